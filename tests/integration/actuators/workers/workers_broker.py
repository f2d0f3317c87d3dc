"""Helpers for the worker SDK's broker tests: topics, signed control events, offsets."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from schemas import encode, sign, stable_id

KEY = b"workers-integration-signing-key-0123"
KEY_HEX = KEY.hex()


def create_topics(bootstrap: str, *topics: tuple[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1) for name, partitions in topics])
    for future in futures.values():
        future.result(timeout=30)
    deadline = time.monotonic() + 15
    for name, partitions in topics:  # metadata settles: every partition has a leader
        while True:
            md = admin.list_topics(name, timeout=5).topics.get(name)
            ready = md and md.error is None and len(md.partitions) == partitions
            if ready and all(p.leader >= 0 for p in md.partitions.values()):
                break
            assert time.monotonic() < deadline, f"topic {name} not ready"
            time.sleep(0.1)


def control_event(type_: str, params: dict[str, Any], **over: Any) -> dict[str, Any]:
    now = int(time.time() * 1000)
    event = {
        "event": "action",
        "v": 1,
        "id": stable_id(type_, params, time.monotonic_ns()),
        "type": type_,
        "target": f"group:{params.get('group', params.get('scope'))}",
        "params": params,
        "reason": {"test": True},
        "mode": "act",
        "issued_at": now,
        "expires_at": now + 60_000,
        "policy_version": "test",
        **over,
    }
    return sign(event, KEY)


def publish(bootstrap: str, topic: str, *events: dict[str, Any] | bytes) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for e in events:
        producer.produce(topic, key=b"workers", value=e if isinstance(e, bytes) else encode(e))
    producer.flush(10)


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        consumer.close()


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lagpilot-test-peek"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def wait_until(pred, timeout_s: float, what: str, step_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(step_s)
