"""Where the commits reader stands on each offsets partition (``ReadPositions.positions``),
against the real broker: what a tick's ends are held against (``read_up_to``)."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from pipeline.read.commits import CommitsConfig, ReadPositions


def _topic(bootstrap: str, records: int) -> str:
    """A two-partition topic with ``records`` in partition 0 and none in partition 1."""
    topic = f"align-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        f.result(10)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(records):
        producer.produce(topic, value=b"r%d" % i, partition=0)
    assert producer.flush(10) == 0
    return topic


def _positions_after_assignment(bootstrap: str, reset: str, topic: str) -> dict[int, int]:
    """A reader of ``topic`` as the commits source builds it (new group), consumed from
    until it has seen a fetch response for both partitions; its positions then."""
    cfg = CommitsConfig(
        consumer_group=f"align-{uuid.uuid4().hex[:8]}",
        offsets_topic=topic,
        progress_topic=None,
        auto_offset_reset=reset,
    )
    reading = ReadPositions(cfg)
    consumer = cfg.consumer({"bootstrap.servers": bootstrap})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            consumer.consume(100, 0.2)
            parts = {tp.partition for tp in consumer.assignment()}
            fetched = all(
                consumer.get_watermark_offsets(tp, cached=True)[1] >= 0
                for tp in consumer.assignment()
            )
            if parts == {0, 1} and fetched:
                reading.assigned = parts
                positions = reading.positions(consumer)
                assert positions is not None
                return positions
        pytest.fail("not assigned and fetched within 30 s")
    finally:
        consumer.close()


def test_a_reader_started_at_the_end_stands_at_the_end(kafka_bootstrap: str) -> None:
    """``latest``: records there before it started are skipped, not waited for. Before,
    the partition with 5 old records and nothing consumed counted as read to 0 of 5, and
    every tick waited for them (a fresh replica of the scale benchmark dropped every
    sample and never modelled)."""
    topic = _topic(kafka_bootstrap, 5)
    assert _positions_after_assignment(kafka_bootstrap, "latest", topic) == {0: 5, 1: 0}


def test_a_reader_from_the_earliest_stands_where_it_has_read(kafka_bootstrap: str) -> None:
    """``earliest``: every record is to be read; once consumed, the positions say so."""
    topic = _topic(kafka_bootstrap, 5)
    assert _positions_after_assignment(kafka_bootstrap, "earliest", topic) == {0: 5, 1: 0}
