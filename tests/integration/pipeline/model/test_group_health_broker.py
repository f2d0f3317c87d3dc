"""Group health on the real broker: a rebalance storm, a KIP-848 group, own groups, deletion.

One pipeline process (storm window 15 s, stall 5 s, group health re-published every second)
watches every group on the broker. A classic group has a steady member and a member that
is killed (SIGKILL) and restarted in a loop: the coordinator rebalances the group again
and again while nothing is committed, which must be ``STORM`` within a second of the
record that crosses the threshold, naming the flapping member, and ``OK`` again once the
loop stops. A KIP-848 group's members and assignment must match what the AdminClient
reports; lagpilot's own groups never appear; a deleted group is published once as
``DELETED`` and then forgotten.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from bench.support.harness import LagReader, PipelineProcess, create_topic
from pipeline.read.offsets import decode_record
from schemas import GroupMetadata, validate
from schemas.topics import CONSUMER_OFFSETS
from tests.support.pipeline import module_pipeline

RUN = uuid.uuid4().hex[:6]
PREFIX = f"lph-{RUN}-"
WINDOW_S = 15

FLAPPY = """
import sys, time
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
              "client.id": sys.argv[3], "session.timeout.ms": 6000,
              "heartbeat.interval.ms": 500, "enable.auto.commit": False})
def on_assign(consumer, partitions):
    if partitions:
        print("assigned", flush=True)
c.subscribe([sys.argv[4]], on_assign=on_assign)
while True:
    c.poll(0.1)
"""


class _Groups:
    """A group filter for LagReader: these groups, or every group with this prefix."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def __contains__(self, group: object) -> bool:
        return isinstance(group, str) and group.startswith(self.prefix)


pipeline = module_pipeline(
    f"{PREFIX}.*",
    LAGPILOT_STORM_WINDOW_S=str(WINDOW_S),
    LAGPILOT_GROUP_STALL_S="5",
    LAGPILOT_GROUP_HEALTH_INTERVAL_MS="1000",
    LAGPILOT_METADATA_REFRESH_MS="500",
)


@pytest.fixture(scope="module")
def reader(pipeline: PipelineProcess, kafka_bootstrap: str) -> Iterator[LagReader]:
    r = LagReader(kafka_bootstrap, _Groups(PREFIX)).start()  # type: ignore[arg-type]
    yield r
    r.close()


@pytest.fixture(scope="module")
def own_reader(pipeline: PipelineProcess, kafka_bootstrap: str) -> Iterator[LagReader]:
    r = LagReader(kafka_bootstrap, _Groups("lagpilot")).start()  # type: ignore[arg-type]
    yield r
    r.close()


def _validate(event: dict[str, Any]) -> None:
    validate({k: v for k, v in event.items() if not k.startswith("_")})  # _received_ms


def _health(reader: LagReader, group: str) -> list[dict[str, Any]]:
    """This module's pipeline's health events of ``group``."""
    return reader.select(lambda e: _ours(e) and e["group"] == group)


def _ours(e: dict[str, Any]) -> bool:
    """A group health event of this module's pipeline. Every pipeline on the broker publishes
    every group's health on the shared lagpilot.lag (the bench smokes run beside these
    tests, with the default 60 s storm window): its storm window tells ours apart."""
    return e["event"] == "group_health" and e.get("window_s") == WINDOW_S


class _Poller:
    """A consumer polling in a thread (a live member), committing nothing."""

    def __init__(self, bootstrap: str, group: str, client: str, topic: str, **conf: Any) -> None:
        self.c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": client,
                "enable.auto.commit": False,
                **conf,
            }
        )
        self.c.subscribe([topic])
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.c.poll(0.1)

    def close(self) -> None:
        self._stop.set()
        self._t.join(5)
        self.c.close()


def _java_hash(s: str) -> int:
    h = 0
    for ch in s.encode("utf-16-be").decode("utf-16-be"):
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _metadata_records(bootstrap: str, group: str) -> list[tuple[int, GroupMetadata]]:
    """(timestamp, record) of the group's GroupMetadata records, read independently from
    the one offsets partition that holds the group (Kafka: abs(hashCode) % partitions)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"lph-check-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        parts = c.list_topics(CONSUMER_OFFSETS, timeout=10).topics[CONSUMER_OFFSETS].partitions
        p = abs(_java_hash(group)) % len(parts)
        c.assign([TopicPartition(CONSUMER_OFFSETS, p, -2)])
        out: list[tuple[int, GroupMetadata]] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                return out
            r = decode_record(msg.key(), msg.value())
            if isinstance(r, GroupMetadata) and r.group == group:
                out.append((msg.timestamp()[1], r))
        raise AssertionError("offsets partition never reached its end")
    finally:
        c.close()


def test_a_member_killed_and_restarted_in_a_loop_is_a_storm_then_ok(
    pipeline: PipelineProcess, reader: LagReader, kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic, group = f"{PREFIX}storm", f"{PREFIX}storm-g"
    create_topic(kafka_bootstrap, topic, 4)
    steady = _Poller(
        kafka_bootstrap, group, f"{PREFIX}steady", topic, **{"session.timeout.ms": 6000}
    )
    flappy_client = f"{PREFIX}flappy"
    procs: list[subprocess.Popen[bytes]] = []

    def start_flappy() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-c", FLAPPY, kafka_bootstrap, group, flappy_client, topic],
            stdout=subprocess.PIPE,
        )
        procs.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"assigned"  # it joined and owns partitions
        return proc

    try:
        storm = None
        deadline = time.monotonic() + 45
        proc = start_flappy()
        while storm is None and time.monotonic() < deadline:
            proc.send_signal(signal.SIGKILL)  # a crash: no LeaveGroup, the session expires
            proc.wait()
            proc = start_flappy()
            found = [e for e in _health(reader, group) if e["status"] == "STORM"]
            storm = found[0] if found else None
        assert storm is not None, f"no STORM: {_health(reader, group)}\n{pipeline.log_tail()}"
        _validate(storm)
        # within 1 s of the record that crossed the threshold, by the coordinator's clock
        records = _metadata_records(kafka_bootstrap, group)
        [crossing_ms] = [ts for ts, r in records if r.generation == storm["generation"]]
        assert storm["last_rebalance_ms"] == crossing_ms
        assert storm["_received_ms"] - crossing_ms <= 1000, (storm["_received_ms"], crossing_ms)
        assert storm["rebalances_per_min"] >= 3 * 60 / WINDOW_S
        assert storm["commits_stalled"] and storm["consumption_stopped"]
        named = storm["storm"]
        assert named["client_id"] == flappy_client and named["leaves"] >= 1
        held = {p for a in named["partitions"] for p in a["partitions"]}
        assert held and all(a["topic"] == topic for a in named["partitions"])
        # the partitions it held are those of the flapping member in the record before it left
        before = [
            r for _, r in records if any(m.member_id == named["member_id"] for m in r.members)
        ]
        (mine,) = [m for m in before[-1].members if m.member_id == named["member_id"]]
        assert held == {p for a in mine.assignment for p in a.partitions}
        # the loop stops (the last instance stays): back to OK once the window has passed
        stopped = time.monotonic()
        ok = reader.wait_for(
            lambda e: (
                _ours(e)
                and e["group"] == group
                and e["status"] == "OK"
                and e["observed_at_ms"] > storm["observed_at_ms"]
            ),
            timeout_s=WINDOW_S + 15,
        )
        assert ok["storm"] is None and time.monotonic() - stopped <= WINDOW_S + 15
        assert {m["client_id"] for m in ok["members"]} == {f"{PREFIX}steady", flappy_client}
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        steady.close()


def test_kip848_members_and_assignment_match_the_admin_client_then_deletion(
    pipeline: PipelineProcess, reader: LagReader, kafka_bootstrap: str
) -> None:
    topic, group = f"{PREFIX}k848", f"{PREFIX}k848-g"
    create_topic(kafka_bootstrap, topic, 4)
    members = [
        _Poller(kafka_bootstrap, group, f"{PREFIX}k{i}", topic, **{"group.protocol": "consumer"})
        for i in range(2)
    ]
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    try:
        deadline = time.monotonic() + 30
        matched = None
        while matched is None and time.monotonic() < deadline:
            desc = admin.describe_consumer_groups([group])[group].result(timeout=10)
            truth = {
                (m.member_id, m.client_id, m.host): sorted(
                    (tp.topic, tp.partition) for tp in m.assignment.topic_partitions
                )
                for m in desc.members
            }
            owned = sorted(p for ps in truth.values() for p in ps)
            if len(truth) != 2 or owned != [(topic, p) for p in range(4)]:
                time.sleep(0.2)
                continue
            for e in reversed(_health(reader, group)):
                seen = {
                    (m["member_id"], m["client_id"], m["client_host"]): sorted(
                        (a["topic"], p) for a in m["assignment"] for p in a["partitions"]
                    )
                    for m in e["members"]
                }
                if seen == truth:
                    matched = e
                    break
            time.sleep(0.2)
        assert matched is not None, (truth, _health(reader, group)[-3:])
        _validate(matched)
        assert matched["protocol"] == "consumer" and matched["generation"] >= 2
        assert all(a["topic_id"] for m in matched["members"] for a in m["assignment"])
    finally:
        for m in members:
            m.close()
    # deleted: published once as DELETED, then never again
    deadline = time.monotonic() + 30
    while True:
        try:
            admin.delete_consumer_groups([group])[group].result(timeout=10)
            break
        except Exception:  # members still leaving: NON_EMPTY_GROUP for a moment
            assert time.monotonic() < deadline
            time.sleep(0.5)
    gone = reader.wait_for(
        lambda e: _ours(e) and e["group"] == group and e["status"] == "DELETED",
        timeout_s=10,
    )
    _validate(gone)
    time.sleep(2.5)  # more than two re-publish intervals
    assert [e for e in _health(reader, group) if e["observed_at_ms"] > gone["observed_at_ms"]] == []


def test_a_restarted_pipeline_knows_a_stable_group_without_a_new_rebalance(
    pipeline: PipelineProcess, reader: LagReader, kafka_bootstrap: str
) -> None:
    topic, group = f"{PREFIX}stable", f"{PREFIX}stable-g"
    create_topic(kafka_bootstrap, topic, 2)
    member = _Poller(kafka_bootstrap, group, f"{PREFIX}calm", topic)
    try:
        first = reader.wait_for(
            lambda e: _ours(e) and e["group"] == group and e["members"],
            timeout_s=30,
        )
        time.sleep(1.5)  # the source commits its position (every second)
        pipeline.kill()  # SIGKILL: it resumes __consumer_offsets after this group's records
        restarted_ms = int(time.time() * 1000)
        pipeline.start()
        again = reader.wait_for(
            lambda e: _ours(e) and e["group"] == group and e["observed_at_ms"] > restarted_ms,
            timeout_s=45,
        )
        assert again["generation"] == first["generation"]  # no rebalance since
        assert [m["member_id"] for m in again["members"]] == [
            m["member_id"] for m in first["members"]
        ]
    finally:
        member.close()


def test_lagpilot_own_groups_are_filtered_out(
    pipeline: PipelineProcess, own_reader: LagReader, reader: LagReader
) -> None:
    # the pipeline's own groups (its model group and its offsets reader) have members and
    # rebalanced while the tests above ran; none may show up in group health
    assert reader.select(_ours)  # health is published
    assert own_reader.select(_ours) == []
