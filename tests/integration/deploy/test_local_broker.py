"""The session broker is a real Kafka: topics, produce, group consume, commit, and the
commit lands as a raw record in ``__consumer_offsets`` (decoding is tested elsewhere)."""

from __future__ import annotations

import struct
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.support.scale_load import commit_key


def test_produce_consume_commit_lands_in_consumer_offsets(
    kafka_bootstrap: str, unique_name: str
) -> None:
    topic, group = unique_name, f"{unique_name}-g"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(timeout=30)

    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(30):
        producer.produce(topic, value=f"m{i}".encode(), partition=i % 3)
    assert producer.flush(30) == 0

    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 30
    while seen < 30 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            seen += 1
    assert seen == 30
    consumer.commit(asynchronous=False)
    committed = consumer.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
    consumer.close()
    assert sorted(tp.offset for tp in committed) == [10, 10, 10]

    md = admin.list_topics(timeout=10)
    offsets_topic = md.topics["__consumer_offsets"]
    assert len(offsets_topic.partitions) >= 1

    # Read __consumer_offsets raw, as lagpilot's pipeline will: our group's commit
    # records must be there, keyed by (type, group, topic, partition).
    wanted = {commit_key(group, topic, p) for p in range(3)}
    reader = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": f"{unique_name}-reader",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    parts = [TopicPartition("__consumer_offsets", p, 0) for p in offsets_topic.partitions]
    reader.assign(parts)
    found: dict[bytes, bytes] = {}
    eof: set[int] = set()
    deadline = time.monotonic() + 30
    while len(eof) < len(parts) and time.monotonic() < deadline:
        msg = reader.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            eof.add(msg.partition())
            continue
        if msg.key() in wanted and msg.value() is not None:
            found[msg.key()] = msg.value()
    reader.close()
    assert set(found) == wanted
    for value in found.values():
        version = struct.unpack_from(">h", value)[0]
        assert 0 <= version <= 4
        # The committed offset (10) follows the version in every value version.
        assert struct.unpack_from(">q", value, 2)[0] == 10


def test_three_broker_mode_has_three_brokers_and_replicates_three_ways(
    cluster_bootstrap: str, unique_name: str
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster_bootstrap})
    admin.create_topics([NewTopic(unique_name, 6, 3)])[unique_name].result(timeout=60)
    # the controller has the topic; the broker answering metadata may learn it a moment later
    deadline = time.monotonic() + 30
    md = admin.list_topics(timeout=10)
    while time.monotonic() < deadline and not (
        unique_name in md.topics
        and len(md.topics[unique_name].partitions) == 6
        and all(p.leader >= 0 for p in md.topics[unique_name].partitions.values())
    ):
        time.sleep(0.2)
        md = admin.list_topics(timeout=10)
    assert unique_name in md.topics, f"{unique_name} not in metadata after 30 s"
    assert len(md.brokers) == 3
    assert all(len(p.replicas) == 3 for p in md.topics[unique_name].partitions.values())
    leaders = {p.leader for p in md.topics[unique_name].partitions.values()}
    assert len(leaders) > 1  # leadership is spread, so moving it means something
    # a group commit creates __consumer_offsets: 16 partitions like Redpanda, 3 replicas
    c = Consumer({"bootstrap.servers": cluster_bootstrap, "group.id": f"{unique_name}-g"})
    c.commit(offsets=[TopicPartition(unique_name, 0, 0)], asynchronous=False)
    c.close()
    offsets = admin.list_topics(timeout=10).topics["__consumer_offsets"]
    assert len(offsets.partitions) == 16
    assert all(len(p.replicas) == 3 for p in offsets.partitions.values())
