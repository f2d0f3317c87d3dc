"""A handler slower than max.poll.interval.ms does not get its worker thrown out of the group."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Message, Producer

from actuators.workers import EffectGuard, MemoryDedupeStore, Worker
from tests.integration.actuators.workers.workers_broker import (
    KEY,
    committed,
    create_topics,
    end_offsets,
    wait_until,
)


def test_handler_longer_than_max_poll_interval_causes_no_rebalance(
    kafka_bootstrap: str, unique_name: str
) -> None:
    topic, control, group = unique_name, f"{unique_name}.control", f"{unique_name}-g"
    create_topics(kafka_bootstrap, (topic, 1), (control, 1))
    done: list[int] = []

    def handle(msg: Message, ctx: EffectGuard) -> None:
        if msg.key() == b"pdf":
            time.sleep(8.0)  # > max.poll.interval.ms = 6000
        done.append(msg.offset() or 0)

    worker = Worker(
        bootstrap=kafka_bootstrap,
        group=group,
        topics=[topic],
        handler=handle,
        lanes=2,
        instance_id=f"{unique_name}-w1",
        dedupe=MemoryDedupeStore(),
        control_topic=control,
        signing_key=KEY,
        consumer_config={"max.poll.interval.ms": 6000, "session.timeout.ms": 6000},
    )
    worker.start()
    try:
        wait_until(lambda: worker.assignment() == {(topic, 0)}, 20, "the first assignment")
        assert worker.rebalances == 1
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        producer.produce(topic, key=b"pdf", value=b"500 pages")
        for i in range(5):  # other keys of the same partition go on beside it (lane 2)
            producer.produce(topic, key=f"k{i}".encode(), value=b"small")
        producer.flush(10)
        end = end_offsets(kafka_bootstrap, topic, 1)[0]
        wait_until(lambda: len(done) == 6, 15, "all six messages")
        wait_until(
            lambda: committed(kafka_bootstrap, group, topic, 1)[0] == end,
            5,
            "the commit to the end",
        )
        assert worker.rebalances == 1  # no revoke, no lost, no new assignment
        assert worker.assignment() == {(topic, 0)}
        assert worker.stats().get("lost", 0) == 0 and worker.error is None
    finally:
        worker.stop()


def test_a_raw_consumer_blocking_as_long_is_thrown_out(
    kafka_bootstrap: str, unique_name: str
) -> None:
    """The contrast that shows the test above can fail: same settings, handler on the poll loop."""
    topic, group = unique_name, f"{unique_name}-raw"
    create_topics(kafka_bootstrap, (topic, 1))
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topic, value=b"x")
    producer.flush(10)
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "max.poll.interval.ms": 6000,
            "session.timeout.ms": 6000,
        }
    )
    try:
        consumer.subscribe([topic])
        msg: Message | None = None
        deadline = time.monotonic() + 20
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
        assert msg is not None
        time.sleep(8.0)  # the handler, on the poll loop
        after = consumer.poll(1.0)
        assert after is not None and after.error() is not None
        assert "max.poll.interval" in after.error().str() or after.error().code() == -147
    finally:
        consumer.close()
