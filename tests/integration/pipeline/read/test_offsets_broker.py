"""``__consumer_offsets`` as the real broker writes it, decoded by ``pipeline.read.offsets``.

One module-scoped story does what users do (a classic group, a KIP-848 group, a
transactional offset commit, an offset deletion, a group deletion), then the whole offsets
topic is read from the beginning once, and each test asserts that the records of its
groups decode to exactly what the story did. A last test reads the same topic through a
real ``quixstreams.Application`` to show tombstones flow through Quix as deletion events.
"""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import KafkaAdminClient

from pipeline.coordinator.records import (
    ConsumerGroupEpoch,
    ConsumerGroupTombstone,
    ConsumerMemberAssignment,
    ConsumerMemberMetadata,
)
from pipeline.read.offsets import (
    CoordinatorKeyDeserializer,
    DecodeCounters,
    Skipped,
    decode_record,
    make_message_decoder,
)
from schemas import (
    GroupMetadata,
    GroupRemoved,
    OffsetCommit,
    OffsetDeleted,
    TopicAssignment,
    to_dict,
    validate,
)
from schemas.topics import CONSUMER_OFFSETS

PARTITIONS = 3


@dataclass
class Story:
    prefix: str
    topic: str
    classic: str
    classic_client: str
    kip848: str
    txn: str
    deleted_offsets: str
    started_ms: int
    ended_ms: int = 0
    records: list[tuple[str, bytes, bytes | None, Any]] = field(default_factory=list)

    def of(self, group: str) -> list[Any]:
        """Decoded records of one group, in log order within each offsets partition."""
        return [r for g, _, _, r in self.records if g == group]


def _group_of(key: bytes) -> str | None:
    """The group id that starts every coordinator key (types 0..15), read independently."""
    try:
        (n,) = struct.unpack_from(">h", key, 2)
        return key[4 : 4 + n].decode() if n >= 0 else None
    except (struct.error, UnicodeDecodeError):
        return None


def _wait_assigned(consumer: Consumer, n: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while len(consumer.assignment()) < n:
        assert time.monotonic() < deadline, f"no assignment of {n} partitions in {timeout_s}s"
        consumer.poll(0.2)


def _commit(consumer: Consumer, offsets: list[TopicPartition]) -> None:
    for attempt in range(20):
        try:
            consumer.commit(offsets=offsets, asynchronous=False)
            return
        except KafkaException as exc:  # e.g. a rebalance in flight: retry, then fail loudly
            if attempt == 19 or not exc.args[0].retriable():
                raise
            consumer.poll(0.2)


def _read_offsets_topic(
    bootstrap: str, prefix: str, done: Callable[[list[Any]], bool], timeout_s: float = 45.0
) -> list[tuple[str, bytes, bytes | None, Any]]:
    """Every record of ``prefix`` groups, from the beginning of every offsets partition,
    until each partition has hit EOF once and ``done`` says the story is all there."""
    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"lagpilot-test-reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    try:
        meta = reader.list_topics(CONSUMER_OFFSETS, timeout=10)
        parts = sorted(meta.topics[CONSUMER_OFFSETS].partitions)
        reader.assign([TopicPartition(CONSUMER_OFFSETS, p, -2) for p in parts])  # beginning
        at_eof: set[int] = set()
        out: list[tuple[str, bytes, bytes | None, Any]] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for msg in reader.consume(num_messages=2000, timeout=0.5):
                if msg.error():
                    if msg.error().code() == -191:  # _PARTITION_EOF
                        at_eof.add(msg.partition())
                    continue
                key, value = msg.key(), msg.value()
                group = _group_of(key) if key else None
                if group and group.startswith(prefix):
                    out.append((group, key, value, decode_record(key, value)))
            if len(at_eof) == len(parts) and done(out):
                return out
        raise AssertionError(
            f"story incomplete after {timeout_s}s: {len(at_eof)}/{len(parts)} partitions at "
            f"EOF, {len(out)} records: {[r for *_, r in out]}"
        )
    finally:
        reader.close()


@pytest.fixture(scope="module")
def story(kafka_bootstrap: str) -> Iterator[Story]:
    prefix = f"t-{uuid.uuid4().hex[:10]}"
    s = Story(
        prefix=prefix,
        topic=f"{prefix}-in",
        classic=f"{prefix}-classic",
        classic_client=f"{prefix}-classic-client",
        kip848=f"{prefix}-kip848",
        txn=f"{prefix}-txn",
        deleted_offsets=f"{prefix}-offdel",
        started_ms=int(time.time() * 1000),
    )
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(s.topic, PARTITIONS, 1)])[s.topic].result(timeout=20)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for p in range(PARTITIONS):
        for i in range(10):
            producer.produce(s.topic, value=b"x%d" % i, partition=p)
    assert producer.flush(20) == 0
    base = {"bootstrap.servers": kafka_bootstrap, "enable.auto.commit": False}

    # 1. A classic group: join (GroupMetadata with the member and its assignment), commit
    #    with metadata and leader epoch, leave (GroupMetadata, now empty).
    classic = Consumer(
        {
            **base,
            "group.id": s.classic,
            "client.id": s.classic_client,
            "partition.assignment.strategy": "range",
        }
    )
    classic.subscribe([s.topic])
    _wait_assigned(classic, PARTITIONS)
    _commit(
        classic,
        [TopicPartition(s.topic, p, 5 + p, metadata=f"m{p}", leader_epoch=0) for p in range(3)],
    )
    classic.close()

    # 2. A KIP-848 group: its membership goes to record types 3..8, its commits to type 1.
    kip848 = Consumer({**base, "group.id": s.kip848, "group.protocol": "consumer"})
    kip848.subscribe([s.topic])
    _wait_assigned(kip848, PARTITIONS)
    _commit(kip848, [TopicPartition(s.topic, p, 7) for p in range(PARTITIONS)])
    kip848.close()

    # 3. A transactional offset commit (consume-transform-produce).
    txn_consumer = Consumer({**base, "group.id": s.txn})
    txn_producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{prefix}-tx"}
    )
    txn_producer.init_transactions(30)
    txn_producer.begin_transaction()
    txn_producer.produce(s.topic, value=b"out", partition=0)
    txn_producer.send_offsets_to_transaction(
        [TopicPartition(s.topic, 0, 4)], txn_consumer.consumer_group_metadata(), 30
    )
    txn_producer.commit_transaction(30)
    txn_consumer.close()

    # 4. Offsets deleted: commit two partitions without joining, delete one of them.
    simple = Consumer({**base, "group.id": s.deleted_offsets})
    _commit(simple, [TopicPartition(s.topic, 0, 3), TopicPartition(s.topic, 1, 3)])
    simple.close()
    kp_admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        errors = kp_admin.delete_group_offsets(s.deleted_offsets, [KpTopicPartition(s.topic, 0)])
        assert all(getattr(e, "errno", 0) == 0 for e in errors.values()), errors
    finally:
        kp_admin.close()

    # 5. A group deleted: the classic group, empty since it left.
    admin.delete_consumer_groups([s.classic])[s.classic].result(timeout=20)
    s.ended_ms = int(time.time() * 1000)

    def complete(out: list[Any]) -> bool:
        records = [r for *_, r in out]
        return (
            GroupRemoved(s.classic) in records
            and OffsetDeleted(s.deleted_offsets, s.topic, 0) in records
            and sum(isinstance(r, OffsetCommit) and r.group == s.kip848 for r in records) >= 3
            and any(isinstance(r, OffsetCommit) and r.group == s.txn for r in records)
        )

    s.records = _read_offsets_topic(kafka_bootstrap, prefix, complete)
    try:
        yield s
    finally:
        for group in (s.kip848, s.txn, s.deleted_offsets):
            admin.delete_consumer_groups([group])[group].exception(timeout=20)
        admin.delete_topics([s.topic])[s.topic].exception(timeout=20)


def _commits(story: Story, group: str) -> list[OffsetCommit]:
    return [r for r in story.of(group) if isinstance(r, OffsetCommit)]


def test_every_story_record_decodes_and_matches_its_schema(story: Story) -> None:
    for _group, _key, _value, record in story.records:
        assert not isinstance(record, Skipped), record
        if hasattr(record, "event"):  # KIP-848 membership is read in-process, not an event
            validate(to_dict(record))


def _check_commit(story: Story, c: OffsetCommit, offset: int, epoch: int, meta: str) -> None:
    # confluent-kafka-python 2.12 sends commit metadata with its C string's NUL terminator;
    # the broker stores those bytes and the decoder reports them as they are.
    metadata = c.metadata.removesuffix("\x00")
    assert (c.offset, c.leader_epoch, metadata, c.expire_ts_ms) == (offset, epoch, meta, None)
    assert story.started_ms - 1000 <= c.commit_ts_ms <= story.ended_ms + 1000


def test_classic_group_commits_membership_and_deletion(story: Story) -> None:
    commits = _commits(story, story.classic)
    assert sorted(c.partition for c in commits) == [0, 1, 2]
    for c in commits:
        assert c.topic == story.topic
        _check_commit(story, c, 5 + c.partition, 0, f"m{c.partition}")

    metas = [r for r in story.of(story.classic) if isinstance(r, GroupMetadata)]
    joined = [m for m in metas if m.members]
    assert joined, metas
    g = joined[-1]
    assert (g.protocol_type, g.protocol, g.generation >= 1) == ("consumer", "range", True)
    (member,) = g.members
    assert g.leader == member.member_id
    assert member.client_id == story.classic_client
    assert member.session_timeout_ms == 45_000 and member.rebalance_timeout_ms == 300_000
    assert member.assignment == (TopicAssignment(story.topic, (0, 1, 2)),)
    assert story.started_ms - 1000 <= g.current_state_ts_ms <= story.ended_ms + 1000
    assert metas[-1].members == (), "after the member left, the group is empty"

    tail = story.of(story.classic)[-4:]  # deletion: every offset tombstoned, then the group
    assert sorted(tail[:3], key=lambda r: r.partition) == [
        OffsetDeleted(story.classic, story.topic, p) for p in range(3)
    ]
    assert tail[3] == GroupRemoved(story.classic)


def test_kip848_group_commits_and_membership_decode(story: Story) -> None:
    commits = _commits(story, story.kip848)
    assert sorted(c.partition for c in commits) == [0, 1, 2]
    for c in commits:
        _check_commit(story, c, 7, c.leader_epoch, "")
    records = story.of(story.kip848)
    assert any(isinstance(r, ConsumerGroupEpoch) and r.epoch >= 1 for r in records)
    (member,) = {r for r in records if isinstance(r, ConsumerMemberMetadata)}
    assert member.subscribed_topics == (story.topic,)
    owned = [r for r in records if isinstance(r, ConsumerMemberAssignment) and r.assigned]
    assert owned and owned[-1].member_id == member.member_id
    assert sorted(p for tp in owned[-1].assigned for p in tp.partitions) == [0, 1, 2]
    left = [r for r in records if isinstance(r, ConsumerGroupTombstone)]
    assert {t.kind for t in left} >= {"member_metadata", "member_assignment"}  # it left


def test_transactional_offset_commit(story: Story) -> None:
    (commit,) = _commits(story, story.txn)
    assert (commit.topic, commit.partition) == (story.topic, 0)
    _check_commit(story, commit, 4, commit.leader_epoch, "")


def test_offset_deletion_is_a_tombstone_of_that_partition_only(story: Story) -> None:
    records = story.of(story.deleted_offsets)
    assert sorted(c.partition for c in _commits(story, story.deleted_offsets)) == [0, 1]
    deleted = [r for r in records if isinstance(r, OffsetDeleted)]
    assert deleted == [OffsetDeleted(story.deleted_offsets, story.topic, 0)]


def test_quix_application_decodes_commits_and_tombstones(
    story: Story, kafka_bootstrap: str, tmp_path: Path
) -> None:
    from quixstreams import Application

    app = Application(
        broker_address=kafka_bootstrap,
        consumer_group=f"lagpilot-test-quix-{story.prefix}",
        auto_offset_reset="earliest",
        state_dir=str(tmp_path / "state"),
        auto_create_topics=False,
    )
    topic = app.topic(
        CONSUMER_OFFSETS, key_deserializer=CoordinatorKeyDeserializer(), value_deserializer="bytes"
    )
    counters = DecodeCounters()
    sdf = app.dataframe(topic)
    sdf = sdf.apply(make_message_decoder(counters=counters), metadata=True)
    sdf = sdf.filter(lambda v: v is not None and v["group"].startswith(story.prefix))
    expected = [to_dict(r) for *_, r in story.records if hasattr(r, "event")]
    got = app.run(sdf, count=len(expected), timeout=30)

    assert sorted(map(repr, got)) == sorted(map(repr, expected))
    assert {"event": "group_removed", "v": 1, "group": story.classic} in got
    assert to_dict(OffsetDeleted(story.deleted_offsets, story.topic, 0)) in got
    assert not [k for k in counters if k[1] in range(3, 9)]  # KIP-848 records decode
