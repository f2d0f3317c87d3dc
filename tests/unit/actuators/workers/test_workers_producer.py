"""The producer wrapper's rate counting (pure) and its reports (a fake producer, no broker)."""

from __future__ import annotations

from typing import Any

import pytest

from actuators.workers import RateCounter, RateProducer
from actuators.workers.producer import payload_size
from schemas import ConfigError, decode, to_dict, validate
from schemas.topics import PRODUCERS


def test_rates_are_per_topic_over_the_window_since_the_last_flush() -> None:
    counter = RateCounter("agent-7", host="h", instance="1", start_ms=1_000)
    for _ in range(30):
        counter.add("docs.raw", 100, 1_200)
    counter.add("docs.small", 10, 1_300)
    rates = {r.topic: r for r in counter.flush(2_000)}
    assert set(rates) == {"docs.raw", "docs.small"}
    assert rates["docs.raw"].records_per_s == pytest.approx(30.0)
    assert rates["docs.raw"].bytes_per_s == pytest.approx(3_000.0)
    assert rates["docs.raw"].window_s == pytest.approx(1.0)
    assert rates["docs.small"].records_per_s == pytest.approx(1.0)
    assert rates["docs.raw"].key == "agent-7|docs.raw"
    # the next window starts at the flush: 5 records over 0.5 s
    for _ in range(5):
        counter.add("docs.raw", 100, 2_100)
    (raw, small) = counter.flush(2_500)
    assert (raw.topic, raw.records_per_s, raw.window_s) == ("docs.raw", 10.0, 0.5)
    assert (small.topic, small.records_per_s) == ("docs.small", 0.0)  # one event at 0 ...
    assert [r.topic for r in counter.flush(3_500)] == ["docs.raw"]  # ... then silence
    assert counter.flush(4_500) == []


def test_every_event_matches_the_schema() -> None:
    counter = RateCounter("agent-7", host="worker-3", instance="4711", start_ms=0)
    counter.add("docs.raw", 8_650_240, 500, records=412)
    (rate,) = counter.flush(1_000)

    validate(to_dict(rate))


def test_a_flush_with_no_time_elapsed_keeps_the_counts() -> None:
    counter = RateCounter("a", start_ms=1_000)
    counter.add("t", 1, 1_000)
    assert counter.flush(1_000) == []
    (rate,) = counter.flush(2_000)
    assert rate.records_per_s == 1.0


def test_nothing_is_reported_before_anything_is_written() -> None:
    assert RateCounter("a").flush(5_000) == []


def test_payload_size_counts_value_and_key_as_the_broker_does() -> None:
    assert payload_size(b"abc", b"k") == 4
    assert payload_size("é", None) == 2  # UTF-8
    assert payload_size(None, None) == 0


class FakeProducer:
    def __init__(self, fail_on: str | None = None) -> None:
        self.sent: list[tuple[str, Any, Any]] = []
        self.fail_on = fail_on

    def produce(self, topic: str, value: Any = None, key: Any = None, **_: Any) -> None:
        if topic == self.fail_on:
            raise BufferError("queue full")
        self.sent.append((topic, value, key))

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = -1) -> int:
        return 0

    def __len__(self) -> int:
        return 0


def test_the_wrapper_forwards_writes_and_reports_them_keyed_client_topic() -> None:
    fake = FakeProducer()
    with RateProducer({"client.id": "agent-7"}, producer=fake, interval_s=3600) as p:  # type: ignore[arg-type]
        for _ in range(4):
            p.produce("docs.raw", value=b"x" * 10, key=b"k")
        start = p.counter._since_ms
        assert start is not None
        p.report(start + 2_000)
    writes = [s for s in fake.sent if s[0] == "docs.raw"]
    reports = [s for s in fake.sent if s[0] == PRODUCERS]
    assert len(writes) == 4
    event = decode(reports[0][1])
    validate(event)
    assert reports[0][2] == b"agent-7|docs.raw"
    assert event["records_per_s"] == pytest.approx(2.0)
    assert event["bytes_per_s"] == pytest.approx(22.0)


def test_a_report_that_cannot_be_sent_is_counted_never_raised() -> None:
    fake = FakeProducer(fail_on=PRODUCERS)
    p = RateProducer({"client.id": "a"}, producer=fake, interval_s=3600)  # type: ignore[arg-type]
    p.produce("t", value=b"x")
    p.report(p.counter._since_ms + 1_000)  # type: ignore[operator]
    assert p.report_errors == 1 and p.reports_sent == 0
    p.close()


def test_a_producer_without_client_id_is_a_config_error_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"client\.id"):
        RateProducer({"bootstrap.servers": "x:1"}, producer=FakeProducer())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="interval_s"):
        RateProducer({"client.id": "a"}, producer=FakeProducer(), interval_s=0)  # type: ignore[arg-type]


def test_reports_go_through_the_reporter_so_a_throttled_producer_still_reports() -> None:
    writes, reports = FakeProducer(), FakeProducer()
    p = RateProducer({"client.id": "a"}, producer=writes, reporter=reports, interval_s=3600)  # type: ignore[arg-type]
    p.produce("t", value=b"x")
    p.report(p.counter._since_ms + 1_000)  # type: ignore[operator]
    p.close()
    assert [s[0] for s in writes.sent] == ["t"]
    assert [s[0] for s in reports.sent] == [PRODUCERS]
