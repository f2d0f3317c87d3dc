"""lagpilot's per-partition lag against Kafka's own commands, the reference (issue 45).

Real clients on a topic of three partitions: a producer, and consumers that consume, commit
every 100 ms, and then stop while the producer goes on (records produced after the stop wait
on every partition); then the producer stops too. Once nothing moves, lagpilot's lag for each
group and partition must equal, exactly, the LAG that Kafka's ``ConsumerGroupCommand`` (or
``ShareGroupCommand``) prints for it, and each stopped group must have been called stopped
on every partition, within the second the existing stop test allows
(tests/integration/pipeline/model/test_lag_pipeline.py). Kafka's tools run through
``deploy/local/kafka.sh tool`` (tests/support/kafka_tools.py), once per comparison.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from bench.support.harness import LagReader, PipelineProcess, create_topic, producer
from tests.support.kafka_tools import (
    CONSOLE_SHARE_CONSUMER,
    describe_consumer_groups,
    describe_share_groups,
    ensure_tools,
    run_tool,
)
from tests.support.pipeline import module_pipeline

RUN = uuid.uuid4().hex[:6]
PREFIX = f"lkt-{RUN}-"
PARTITIONS = 3
RATE = 150  # records/s, round robin over the partitions
COMMIT_EVERY_S = 0.1
STOP_WITHIN_MS = 1000  # the bound test_a_consumer_that_stops_is_stop_within_one_second holds

pipeline = module_pipeline(f"{PREFIX}.*", LAGPILOT_WINDOW_S="4", LAGPILOT_METADATA_REFRESH_MS="500")


@pytest.fixture(scope="module")
def kafka_tools() -> None:
    """Kafka's tools, fetched unless present (``make test`` fetched them before pytest)."""
    ensure_tools()


class _Producer:
    """Produces ``RATE`` records/s round robin over the topic's partitions until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._p = producer(bootstrap)
        self._topic = topic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.stopped_ms = 0

    def start(self) -> _Producer:
        self._thread.start()
        return self

    def _run(self) -> None:
        i, t0 = 0, time.monotonic()
        while not self._stop.is_set():
            self._p.produce(self._topic, b"r%d" % i, partition=i % PARTITIONS)
            self._p.poll(0)
            i += 1
            time.sleep(max(0.0, t0 + i / RATE - time.monotonic()))
        self._p.flush(10)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)
        self.stopped_ms = int(time.time() * 1000)


class _GroupConsumer:
    """A confluent-kafka consumer of ``protocol`` ("classic" or "consumer", KIP-848) that
    consumes the topic and commits what it consumed every ``COMMIT_EVERY_S``; ``stop`` makes a
    last commit, notes its time and leaves the group."""

    def __init__(self, bootstrap: str, topic: str, group: str, protocol: str) -> None:
        self.group = group
        self._c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "group.protocol": protocol,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        self._c.subscribe([topic])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.consumed = 0
        self.stopped_ms = 0
        self.error: BaseException | None = None

    def start(self) -> _GroupConsumer:
        self._thread.start()
        return self

    def _commit(self) -> None:
        try:
            self._c.commit(asynchronous=False)
        except KafkaException as exc:  # nothing consumed since the last commit
            if "NO_OFFSET" not in str(exc):
                raise

    def _run(self) -> None:
        try:
            last = time.monotonic()
            while not self._stop.is_set():
                msg = self._c.poll(0.05)
                if msg is not None and not msg.error():
                    self.consumed += 1
                if time.monotonic() - last >= COMMIT_EVERY_S:
                    self._commit()
                    last = time.monotonic()
            self._commit()
            self.stopped_ms = int(time.time() * 1000)  # nothing moves after this commit
        except BaseException as exc:  # reported by stop(), in the test's thread
            self.error = exc
        finally:
            self._c.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert self.error is None, f"{self.group}: {self.error!r}"


def _latest(events: list[dict[str, Any]], group: str, after_ms: int) -> dict[tuple[str, int], int]:
    """{(topic, partition): lag_offsets} of ``group``'s newest events after ``after_ms``."""
    out: dict[tuple[str, int], int] = {}
    for e in sorted(events, key=lambda e: e["observed_at_ms"]):
        if e["group"] == group and e["observed_at_ms"] > after_ms:
            out[(e["topic"], e["partition"])] = e["lag_offsets"]
    return out


def _first_stop(
    reader: LagReader, group: str, topic: str, since_ms: int, statuses: set[str], timeout_s: float
) -> dict[int, dict[str, Any]]:
    """The first event of each partition of ``group`` with a status in ``statuses`` observed
    after ``since_ms`` (fails naming the partitions without one)."""
    deadline = time.monotonic() + timeout_s
    found: dict[int, dict[str, Any]] = {}
    while time.monotonic() < deadline and len(found) < PARTITIONS:
        for e in reader.select(
            lambda e: (
                e["event"] == "partition_lag"
                and e["group"] == group
                and e["topic"] == topic
                and e["observed_at_ms"] > since_ms
                and e["status"] in statuses
            )
        ):
            found.setdefault(e["partition"], e)
        time.sleep(0.1)
    missing = sorted(set(range(PARTITIONS)) - found.keys())
    assert not missing, f"{group}: no {statuses} event for partitions {missing} in {timeout_s}s"
    return found


def _settled_lags(
    reader: LagReader, group: str, topic: str, after_ms: int, timeout_s: float = 20
) -> dict[tuple[str, int], int]:
    """lagpilot's lag of each partition of ``group`` from events observed after ``after_ms``
    (by when nothing moves any more), once every partition has one."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lags = _latest(reader.select(lambda e: e["event"] == "partition_lag"), group, after_ms)
        if len([k for k in lags if k[0] == topic]) == PARTITIONS:
            return lags
        time.sleep(0.1)
    raise AssertionError(f"{group}: no partition_lag event of every partition after the stop")


def test_consumer_group_lag_equals_kafka_consumer_group_command_and_stopped_groups_are_stop(
    pipeline: PipelineProcess, kafka_bootstrap: str, kafka_tools: None
) -> None:
    topic = f"{PREFIX}orders"
    classic, modern = f"g-classic-{RUN}", f"g-consumer-{RUN}"
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    reader = LagReader(kafka_bootstrap, {classic, modern}).start()
    prod = _Producer(kafka_bootstrap, topic).start()
    consumers = [
        _GroupConsumer(kafka_bootstrap, topic, classic, "classic").start(),
        _GroupConsumer(kafka_bootstrap, topic, modern, "consumer").start(),
    ]
    try:
        # both groups consume and commit, every partition modelled OK, cadence learned
        for c in consumers:
            for p in range(PARTITIONS):
                reader.wait_for(
                    lambda e, g=c.group, p=p: (
                        e["event"] == "partition_lag"
                        and e["group"] == g
                        and e["partition"] == p
                        and e["status"] == "OK"
                    ),
                    timeout_s=60,
                )
        time.sleep(3)
        for c in consumers:  # they stop; records keep arriving on every partition
            c.stop()
            assert c.consumed > 0, c.group
        stops = {
            c.group: _first_stop(reader, c.group, topic, c.stopped_ms, {"STOP"}, timeout_s=10)
            for c in consumers
        }
        # records go on arriving for 2.5 s after the last stop, then the producer stops
        since_s = time.time() - max(c.stopped_ms for c in consumers) / 1000
        time.sleep(max(0.0, 2.5 - since_s))
        prod.stop()
        # nothing moves now: a sample after the producer's last record, then Kafka's view
        time.sleep(1.5)
        settled_after = prod.stopped_ms + 750
        ours = {c.group: _settled_lags(reader, c.group, topic, settled_after) for c in consumers}
        kafka = describe_consumer_groups(kafka_bootstrap, classic, modern)
        final = reader.select(lambda e: e["event"] == "partition_lag")
    finally:
        prod.stop()
        for c in consumers:
            c.stop()
        reader.close()

    for c in consumers:
        theirs = kafka.lags(c.group)
        assert set(theirs) == {(topic, p) for p in range(PARTITIONS)}, kafka.text
        assert all(lag and lag > 0 for lag in theirs.values()), (
            f"{c.group}: every partition should hold records produced after the stop:\n{kafka.text}"
        )
        assert ours[c.group] == theirs, (
            f"{c.group}: lagpilot {ours[c.group]} != ConsumerGroupCommand {theirs}\n{kafka.text}"
        )
        # the same committed offsets and end offsets behind the lag, partition for partition
        for (g, t, p), row in kafka.rows.items():
            if g != c.group:
                continue
            mine = [e for e in final if e["group"] == c.group and e["partition"] == p][-1]
            assert (mine["committed_offset"], mine["high_watermark"]) == (
                row.current_offset,
                row.log_end_offset,
            ), (t, p, mine, row)
            assert mine["status"] == "STOP", mine
        # stopped: the group has no member left, and lagpilot said STOP within the bound
        assert c.group in kafka.inactive, kafka.text
        for p, e in stops[c.group].items():
            assert e["observed_at_ms"] - c.stopped_ms <= STOP_WITHIN_MS, (c.group, p, e)


def _set_share_reset_earliest(bootstrap: str, group: str) -> None:
    """``share.auto.offset.reset=earliest`` for ``group`` (a group config; the default,
    latest, would skip what was produced before the share consumer's first fetch)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET
    )
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([res]).values():
        future.result(timeout=30)


def test_share_group_lag_equals_kafka_share_group_command_and_a_stopped_share_group_is_seen(
    pipeline: PipelineProcess, kafka_bootstrap: str, kafka_tools: None, share_group_lag: None
) -> None:
    """The share-group half: Kafka's console share consumer takes records of a share group,
    stops while records keep arriving, then the producer stops; lagpilot's share-group lag
    (``partition_lag`` with ``group_type: "share"``) must equal ShareGroupCommand's LAG per
    partition, and the group must be called stopped (STOP or STALL) on every partition:
    the consumer left, so the group has no members and its waiting partitions are STOP."""
    topic, group = f"{PREFIX}jobs", f"s-share-{RUN}"
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    _set_share_reset_earliest(kafka_bootstrap, group)
    reader = LagReader(kafka_bootstrap, {group}).start()
    prod = _Producer(kafka_bootstrap, topic).start()
    try:
        # Kafka's console share consumer takes 600 records (~4 s of the producer) and exits:
        # its share session closes and acknowledges what it processed
        out, _ = run_tool(
            CONSOLE_SHARE_CONSUMER,
            "--bootstrap-server",
            kafka_bootstrap,
            "--topic",
            topic,
            "--group",
            group,
            "--max-messages",
            "600",
            "--timeout-ms",
            "30000",
        )
        consumer_stopped_ms = int(time.time() * 1000)
        assert len(out.splitlines()) == 600, out[-500:]
        time.sleep(2.5)  # records keep arriving after the stop
        prod.stop()
        time.sleep(1.5)
        kafka = describe_share_groups(kafka_bootstrap, group)
        theirs = kafka.lags(group)
        # Kafka's side holds today: every partition has records delivered to no one
        assert set(theirs) == {(topic, p) for p in range(PARTITIONS)}, kafka.text
        assert all(lag and lag > 0 for lag in theirs.values()), kafka.text

        def share(e: dict[str, Any]) -> bool:
            return e["event"] == "partition_lag" and e.get("group_type") == "share"

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not reader.select(share):
            time.sleep(0.2)
        if not reader.select(share):
            seen = reader.select(lambda e: True)
            raise AssertionError(
                f"lagpilot published no partition_lag event with group_type 'share' for share "
                f"group {group} in 10 s ({len(seen)} events of the group at all): is the "
                f"share-group reader on? ShareGroupCommand's lag for it:\n{kafka.text}"
            )
        ours = _settled_lags(reader, group, topic, prod.stopped_ms + 750)
        stops = _first_stop(
            reader, group, topic, consumer_stopped_ms, {"STOP", "STALL"}, timeout_s=10
        )
    finally:
        prod.stop()
        reader.close()
    assert ours == theirs, f"lagpilot {ours} != ShareGroupCommand {theirs}\n{kafka.text}"
    assert all(e.get("group_type") == "share" for e in stops.values()), stops
