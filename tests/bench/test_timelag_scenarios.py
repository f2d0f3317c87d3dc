"""The time-lag benchmark's scripted consumers (pure: no broker)."""

from __future__ import annotations

from collections.abc import Callable

from bench.perf.timelag import scenarios


def _idle_consumer() -> Callable[[float, list[int]], int | None]:
    [sc] = [s for s in scenarios(smoke=True) if s.name == "idle_10min"]
    return sc.consumer


def test_the_idle_consumer_stops_at_the_records_of_its_first_3_s() -> None:
    stopped = _idle_consumer()
    ts = [1_000 + 20 * i for i in range(200)]  # 50/s for 4 s, delivered so far
    assert stopped(ts[0] + 2_999, ts) is None  # not yet
    at = stopped(ts[0] + 3_000, ts)
    assert at == 151  # the records at 1,000 .. 4,000 ms: within 3 s of the first
    assert stopped(ts[0] + 5_000, [*ts, 9_000]) == at  # fixed once


def test_the_idle_consumer_leaves_a_record_behind_when_the_producer_was_held_back() -> None:
    """A loaded host held the producer back and every record went out within 3 s of the
    first: the consumer still stops short of the last, so there is lag to measure."""
    stopped = _idle_consumer()
    ts = [1_000 + i for i in range(299)]  # all within 0.3 s
    at = stopped(ts[0] + 3_000, ts)
    assert at == len(ts) - 1
