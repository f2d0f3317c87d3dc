"""The high-watermark sampler against the real broker.

One test runs the sampler the way users do (``python -m pipeline.commands.sample``: a Quix
Application with the Source in its spawned process) and reads the produced topic back;
the others call the Source's run loop in a thread with ``produce`` captured, so topology
changes can be timed to the tick without Quix's process machinery in the way.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic, OffsetSpec

from pipeline.read.list_offsets import BrokerListOffsets
from pipeline.read.sampling import STATS_HEADER, TOPOLOGY_ERRORS
from pipeline.read.watermarks import HighWatermarkSource
from schemas import decode, validate

ROOT = Path(__file__).resolve().parents[4]


class CapturingSource(HighWatermarkSource):
    """The real sampler with its output captured in memory instead of produced."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.captured: list[tuple[float, dict[str, Any]]] = []

    def produce(self, value=None, key=None, headers=None, timestamp=None, **_: Any) -> None:  # type: ignore[override]
        event = decode(value)
        assert event["topic"] == key and event["sampled_at_ms"] == timestamp
        assert headers and headers[0][0] == STATS_HEADER
        self.captured.append((time.monotonic(), event))

    def flush(self, timeout: float | None = None) -> None:
        return None

    def latest(self, topic: str) -> dict[str, Any] | None:
        for _, event in reversed(self.captured):
            if event["topic"] == topic:
                return event
        return None

    def hwms(self, topic: str) -> list[int] | None:
        """The high watermarks in the latest sample of ``topic`` (None before the first)."""
        event = self.latest(topic)
        return None if event is None else list(event["high_watermarks"])


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _create(admin: AdminClient, partitions: dict[str, int]) -> None:
    futures = admin.create_topics([NewTopic(t, n, 1) for t, n in partitions.items()])
    for f in futures.values():
        f.result(10)


def _produce(bootstrap: str, counts: dict[tuple[str, int], int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for (topic, partition), n in counts.items():
        for i in range(n):
            producer.produce(topic, value=b"x%d" % i, partition=partition)
    assert producer.flush(10) == 0


def _list_offsets(admin: AdminClient, topic: str, partitions: int) -> list[int]:
    req = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)}
    got = {tp.partition: f.result(10).offset for tp, f in admin.list_offsets(req).items()}
    return [got[p] for p in range(partitions)]


def _wait_for(cond: Callable[[], object], timeout_s: float, what: str) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if cond():
            return time.monotonic() - start
        time.sleep(0.02)
    pytest.fail(f"not within {timeout_s}s: {what}")


def _run_in_thread(source: HighWatermarkSource) -> threading.Thread:
    thread = threading.Thread(target=source.start, daemon=True)
    thread.start()
    return thread


def _read_all(bootstrap: str, topic: str, group: str) -> list[Any]:
    admin = _admin(bootstrap)
    partitions = len(admin.list_topics(topic, timeout=10).topics[topic].partitions)
    ends = _list_offsets(admin, topic, partitions)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    messages: list[Any] = []
    deadline = time.monotonic() + 15
    while len(messages) < sum(ends) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            messages.append(msg)
    consumer.close()
    assert len(messages) == sum(ends), "could not read back everything the sampler produced"
    return messages


def test_lagpilot_sample_through_quix_matches_list_offsets_at_the_configured_rate(
    kafka_bootstrap: str, unique_name: str
) -> None:
    admin = _admin(kafka_bootstrap)
    one, six, out = f"{unique_name}-one", f"{unique_name}-six", f"{unique_name}-out"
    _create(admin, {one: 1, six: 6})
    counts = {(one, 0): 5, (six, 0): 3, (six, 2): 7, (six, 5): 1}
    _produce(kafka_bootstrap, counts)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline.commands.sample", "--bootstrap", kafka_bootstrap,
         "--include", rf"{re.escape(unique_name)}-(one|six)", "--topic", out,
         "--sample-interval-ms", "250", "--log-level", "WARNING"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        _wait_for(
            lambda: (
                out in admin.list_topics(timeout=5).topics and sum(_list_offsets(admin, out, 1)) > 0
            ),
            30,
            "the sampler's first message",
        )
        time.sleep(4.5)
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        _, stderr = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr, stderr

    messages = _read_all(kafka_bootstrap, out, f"{unique_name}-reader")
    by_topic: dict[str, list[dict[str, Any]]] = {one: [], six: []}
    for msg in messages:
        event = decode(msg.value())
        validate(event)
        assert msg.key().decode() == event["topic"]
        assert msg.timestamp()[1] == event["sampled_at_ms"], "the sample time is the event time"
        assert decode(dict(msg.headers())[STATS_HEADER])["errors"] == 0
        by_topic[event["topic"]].append(event)

    # Values: what list_offsets says, after the known counts produced above.
    assert by_topic[one][-1]["high_watermarks"] == _list_offsets(admin, one, 1) == [5]
    assert by_topic[six][-1]["high_watermarks"] == _list_offsets(admin, six, 6)
    assert by_topic[six][-1]["high_watermarks"] == [3, 0, 7, 0, 0, 1]
    assert len(by_topic[six][-1]["leaders"]) == 6
    assert all(e["high_watermarks"] == [5] for e in by_topic[one])

    # Cost: one message per topic per tick, however many partitions the topic has.
    ticks_one = [e["sampled_at_ms"] for e in by_topic[one]]
    ticks_six = [e["sampled_at_ms"] for e in by_topic[six]]
    assert ticks_one == ticks_six
    assert len(messages) == 2 * len(ticks_one)

    # Rate: 250 ms for 4 s is 16 samples, +/-20%.
    first = ticks_one[0]
    in_window = [t for t in ticks_one if first <= t < first + 4000]
    assert 13 <= len(in_window) <= 19, in_window
    assert ticks_one == sorted(ticks_one)


def test_topics_and_partitions_are_tracked_within_one_metadata_refresh(
    kafka_bootstrap: str, unique_name: str
) -> None:
    admin = _admin(kafka_bootstrap)
    a, b, c = (f"{unique_name}-{s}" for s in "abc")
    _create(admin, {a: 2, b: 1})
    refresh_s = 1.0
    source = CapturingSource(
        f"{unique_name}-wm",
        {"bootstrap.servers": kafka_bootstrap},
        include=rf"{re.escape(unique_name)}-.*",
        sample_interval_ms=100,
        metadata_refresh_ms=int(refresh_s * 1000),
    )
    thread = _run_in_thread(source)
    try:
        _wait_for(lambda: source.latest(a) and source.latest(b), 10, "the first samples")
        slack_s = 0.8  # a tick, the topic creation itself, a loaded 2-core machine

        _create(admin, {c: 3})
        # a new topic is sampled within one metadata refresh (the wait fails past its bound)
        _wait_for(lambda: source.latest(c), refresh_s + slack_s, "the new topic sampled")

        admin.create_partitions([NewPartitions(a, 4)])[a].result(10)
        _wait_for(
            lambda: len(source.hwms(a) or ()) == 4,
            refresh_s + slack_s,
            "the added partitions sampled",
        )

        _produce(kafka_bootstrap, {(c, 1): 10, (a, 3): 2})
        _wait_for(
            lambda: source.hwms(c) == [0, 10, 0] and source.hwms(a) == [0, 0, 0, 2],
            1.0,
            "new records seen within a few ticks",
        )

        admin.delete_topics([b])[b].result(10)
        deleted_at = time.monotonic()
        time.sleep(refresh_s + slack_s)
        last_b = max(t for t, e in source.captured if e["topic"] == b)
        assert last_b - deleted_at < refresh_s + slack_s
        count_b = sum(1 for _, e in source.captured if e["topic"] == b)
        time.sleep(0.5)
        assert sum(1 for _, e in source.captured if e["topic"] == b) == count_b, "b not dropped"
        assert thread.is_alive()
        # the deletion did not stop the other topics' samples
        assert max(t for t, e in source.captured if e["topic"] == c) > deleted_at + refresh_s
    finally:
        source.stop()
        thread.join(5)
    assert not thread.is_alive(), "stop() did not end the run loop"

    stats = source.stats()
    assert stats["messages"] == len(source.captured)
    assert stats["topics"] == 2 and stats["partitions"] == 4 + 3
    assert stats["metadata_refreshes"] >= 4
    for event in (e for _, e in source.captured):
        validate(event)


def test_unreachable_broker_is_counted_and_retried_with_backoff_never_fatal(
    unique_name: str,
) -> None:
    source = CapturingSource(
        f"{unique_name}-wm",
        {"bootstrap.servers": "127.0.0.1:1"},  # nothing listens on port 1
        sample_interval_ms=50,
        request_timeout_ms=200,
        backoff_initial_ms=200,
        backoff_max_ms=800,
    )
    thread = _run_in_thread(source)
    try:
        time.sleep(2.5)
        assert thread.is_alive(), "the source died on a transient error"
    finally:
        stopped_at = time.monotonic()
        source.stop()
        thread.join(5)
    assert time.monotonic() - stopped_at < 1.5, "stop() took longer than one request"
    stats = source.stats()
    attempts = sum(n for kind, n in stats["errors"].items() if kind.startswith("metadata:"))
    # Without backoff: ~2.5 s / (200 ms timeout + 50 ms tick) = 10 attempts; with it,
    # 200 + 200, 200 + 400, 200 + 800, 200 + 800 ms ... = 4 or 5.
    assert 2 <= attempts <= 6, stats
    assert stats["errors_total"] == attempts
    assert source.captured == []


def test_list_offsets_per_broker_matches_the_admin_client_and_keeps_its_beat(
    kafka_bootstrap: str, unique_name: str
) -> None:
    admin = _admin(kafka_bootstrap)
    six = f"{unique_name}-six"
    _create(admin, {six: 6})
    _produce(kafka_bootstrap, {(six, 0): 3, (six, 2): 7, (six, 5): 1})
    source = CapturingSource(
        f"{unique_name}-wm",
        {"bootstrap.servers": kafka_bootstrap},
        include=re.escape(six),
        sample_interval_ms=250,
        list_offsets_per_broker=True,
    )
    thread = _run_in_thread(source)
    try:
        _wait_for(lambda: source.latest(six), 15, "the first sample")
        _produce(kafka_bootstrap, {(six, 1): 4})
        _wait_for(lambda: source.hwms(six) == [3, 4, 7, 0, 0, 1], 5, "the new records seen")
        first = len(source.captured)
        time.sleep(2.0)
        ticks = len(source.captured) - first
    finally:
        source.stop()
        thread.join(5)
    assert source.hwms(six) == _list_offsets(admin, six, 6)
    # the per-broker way answered every tick (a failure would count an error and fall back)
    assert not any(k.startswith("list_offsets_by_broker") for k in source.stats()["errors"])
    assert 6 <= ticks <= 10, ticks  # 8 ticks in 2 s at 250 ms


@pytest.mark.parametrize("per_broker", [True, False], ids=["per_broker", "admin_client"])
def test_a_deleted_topic_goes_at_once_not_at_the_next_metadata_refresh(
    kafka_bootstrap: str, unique_name: str, per_broker: bool
) -> None:
    admin = _admin(kafka_bootstrap)
    keep, gone = f"{unique_name}-keep", f"{unique_name}-gone"
    _create(admin, {keep: 2, gone: 3})
    source = CapturingSource(
        f"{unique_name}-wm",
        {"bootstrap.servers": kafka_bootstrap},
        include=rf"{re.escape(unique_name)}-.*",
        sample_interval_ms=100,
        metadata_refresh_ms=60_000,  # the refresh period cannot be what drops it
        list_offsets_per_broker=per_broker,
    )
    thread = _run_in_thread(source)
    try:
        _wait_for(lambda: source.latest(keep) and source.latest(gone), 15, "the first samples")
        admin.delete_topics([gone])[gone].result(10)
        deleted_at = time.monotonic()
        # its partitions answer "unknown topic": metadata is re-read at once, and the topic
        # no longer in it goes at the first tick none of its partitions answers
        took_s = _wait_for(lambda: source.stats()["topics"] == 1, 3.0, "the deleted topic dropped")
        last_gone = max(t for t, e in source.captured if e["topic"] == gone)
        kept = len([1 for t, e in source.captured if e["topic"] == keep and t > deleted_at])
        time.sleep(0.5)
        assert not [t for t, e in source.captured if e["topic"] == gone and t > last_gone]
        assert source.latest(keep) is not None and source.stats()["partitions"] == 2
    finally:
        source.stop()
        thread.join(5)
    assert last_gone - deleted_at < took_s + 0.2
    assert kept >= 1, "the other topic's samples went on"
    errors = source.stats()["errors"]
    assert errors.get("partition:unknown_topic_or_part", 0) >= 1, errors
    assert not any(k.startswith("list_offsets") for k in errors), errors


def test_per_broker_a_partition_with_an_error_is_minus_one_alone(
    kafka_bootstrap: str, unique_name: str
) -> None:
    """The per-broker way on its own: a partition the broker does not have, and one whose
    leader the client does not know, fail alone; the others answer."""
    admin = _admin(kafka_bootstrap)
    topic = f"{unique_name}-three"
    _create(admin, {topic: 3})
    _produce(kafka_bootstrap, {(topic, 0): 2, (topic, 2): 5})
    leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    fast = BrokerListOffsets({"bootstrap_servers": kafka_bootstrap}, 5000, wait_ms=250)
    try:
        _wait_for(fast.connect, 10, "kafka-python bootstrapped")
        fast.set_partitions({topic: (leader,) * 3})
        answer = fast.latest()
        assert answer.hwms == {topic: [2, 0, 5]} and not answer.failed
        assert answer.hwms[topic] == _list_offsets(admin, topic, 3)

        # partition 3 does not exist (a topic re-created smaller, metadata not re-read yet);
        # broker 99 does not exist (a broker the metadata named that has gone)
        fast.set_partitions({topic: (leader, leader, leader, leader), f"{topic}-x": (99,)})
        answer = fast.latest()
        assert answer.hwms == {topic: [2, 0, 5, -1], f"{topic}-x": [-1]}
        assert answer.failed == {"unknown_topic_or_part": 1, "_unknown_broker": 1}
        assert answer.answered == 3 and answer.brokers_answered == 1
        assert set(answer.failed) <= TOPOLOGY_ERRORS  # both ask for a metadata refresh
    finally:
        fast.close()


def test_where_kafka_python_cannot_connect_the_admin_client_samples(
    kafka_bootstrap: str, unique_name: str
) -> None:
    """One PLAINTEXT broker cannot refuse one client and serve the other: the per-broker
    client is pointed at a port nothing listens on, the AdminClient at the broker."""
    admin = _admin(kafka_bootstrap)
    six = f"{unique_name}-six"
    _create(admin, {six: 6})
    _produce(kafka_bootstrap, {(six, 1): 4})
    source = CapturingSource(
        f"{unique_name}-wm",
        {"bootstrap.servers": kafka_bootstrap},
        include=re.escape(six),
        sample_interval_ms=100,
        request_timeout_ms=300,
    )
    source.setup()
    ways = source._ways
    assert ways is not None and ways.by_broker is not None, "the per-broker way is the default"
    ways.by_broker = BrokerListOffsets({"bootstrap_servers": "127.0.0.1:1"}, 300, 100)
    source.setup = lambda: None  # type: ignore[method-assign]  # keep the client set above
    thread = _run_in_thread(source)
    try:
        _wait_for(lambda: source.hwms(six) == [0, 4, 0, 0, 0, 0], 10, "samples all the same")
        first = len(source.captured)
        time.sleep(1.5)
        ticks = len(source.captured) - first
    finally:
        source.stop()
        thread.join(5)
    stats = source.stats()
    attempts = stats["errors"].get("list_offsets_by_broker:timed_out", 0)
    # the bootstrap is tried at the first tick, then again after 20 ticks, 40, 80...: a
    # 300 ms wait each time, not every tick
    tries_at = [1 + sum(20 * 2**i for i in range(k)) for k in range(10)]  # 1, 21, 61, 141...
    assert 1 <= attempts <= sum(1 for t in tries_at if t <= stats["ticks"]), stats
    assert ticks >= 10, ticks  # 15 at 100 ms


def test_per_broker_stable_offsets_stop_at_an_open_transaction(
    kafka_bootstrap: str, unique_name: str
) -> None:
    """``stable`` topics are asked read_committed: the last stable offset, which an open
    transaction holds back (the commits reader, read_committed, can read no further);
    the high watermark is past it until the transaction ends."""
    admin = _admin(kafka_bootstrap)
    topic = f"{unique_name}-txn"
    _create(admin, {topic: 1})
    _produce(kafka_bootstrap, {(topic, 0): 3})
    leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    txn = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{topic}-tx"})
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(2):
        txn.produce(topic, value=b"t%d" % i, partition=0)
    assert txn.flush(10) == 0
    fast = BrokerListOffsets({"bootstrap_servers": kafka_bootstrap}, 5000, wait_ms=250)
    try:
        _wait_for(fast.connect, 10, "kafka-python bootstrapped")
        fast.set_partitions({topic: (leader,)})
        assert fast.latest().hwms == {topic: [5]}
        fast.set_partitions({}, {topic: (leader,)})
        answer = fast.latest()
        assert answer.hwms == {topic: [3]} and not answer.failed
        txn.commit_transaction(30)
        # the coordinator writes the marker (a record) after the commit returns: the stable
        # offset then moves past it, to the end
        _wait_for(lambda: fast.latest().hwms == {topic: [6]}, 10, "the transaction's marker")
        assert _list_offsets(admin, topic, 1) == [6]
    finally:
        fast.close()


def test_each_tick_says_where_the_offsets_partitions_end(
    kafka_bootstrap: str, unique_name: str
) -> None:
    """A sampler given ``ends_topic`` asks, in each tick's round, the last stable offset of
    every partition of it: the tick's ``ends``, between what the broker says before the
    tick and after it (the commits reader holds the tick until it has read that far)."""
    admin = _admin(kafka_bootstrap)
    topic = f"{unique_name}-ends"
    _create(admin, {topic: 1})
    offsets = "__consumer_offsets"
    n = len(admin.list_topics(offsets, timeout=10).topics[offsets].partitions)

    def stable_ends() -> list[int]:
        req = {TopicPartition(offsets, p): OffsetSpec.latest() for p in range(n)}
        futures = admin.list_offsets(req, isolation_level=IsolationLevel.READ_COMMITTED)
        got = {tp.partition: f.result(10).offset for tp, f in futures.items()}
        return [got[p] for p in range(n)]

    group = f"{unique_name}-g"
    committer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
    committer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    before = stable_ends()
    source = HighWatermarkSource(
        "sampler", {"bootstrap.servers": kafka_bootstrap}, include=re.escape(topic)
    )
    source.ends_topic = offsets
    ticks: list[Any] = []
    thread = threading.Thread(target=source.run_alone, args=(ticks.append,), daemon=True)
    thread.start()
    try:
        _wait_for(lambda: any("ends" in t[2] for t in ticks), 15, "a tick with its ends")
        # a commit while the sampler runs: a later tick's end is past it
        committer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
        committed_at = stable_ends()
        _wait_for(
            lambda: any(t[2].get("ends") >= committed_at for t in ticks if "ends" in t[2]),
            10,
            "a tick whose ends are past the commit",
        )
    finally:
        source.stop()
        thread.join(5)
        committer.close()
    after = stable_ends()
    ended = [t for t in ticks if "ends" in t[2]]
    for _, messages, fields in ended:
        assert len(fields["ends"]) == n
        assert all(b <= e <= a for b, e, a in zip(before, fields["ends"], after, strict=True))
        assert [t for t, _ in messages] == [topic]  # the offsets topic is no sample of its own
    assert source.stats()["partitions"] == 1  # the sampler's own count: watched topics only


def test_an_ends_topic_that_is_watched_is_sampled_and_asked_no_ends(
    kafka_bootstrap: str, unique_name: str
) -> None:
    """Watched itself (internal topics included), the offsets topic is a sample like any
    other and its high watermarks are asked, not its ends: ticks carry none (the commits
    reader then goes by its read-through time)."""
    admin = _admin(kafka_bootstrap)
    topic = f"{unique_name}-own"
    _create(admin, {topic: 1})
    offsets = "__consumer_offsets"
    source = HighWatermarkSource(
        "sampler",
        {"bootstrap.servers": kafka_bootstrap},
        include=f"{re.escape(topic)}|{offsets}",
        exclude_internal=False,
    )
    source.ends_topic = offsets
    ticks: list[Any] = []
    thread = threading.Thread(target=source.run_alone, args=(ticks.append,), daemon=True)
    thread.start()
    try:
        _wait_for(lambda: len(ticks) >= 3, 15, "three ticks")
    finally:
        source.stop()
        thread.join(5)
    assert all("ends" not in fields for _, _, fields in ticks)
    assert all({t for t, _ in messages} == {topic, offsets} for _, messages, _ in ticks[1:])
