"""Read the halts still in force from the compacted halts topic (``lagpilot.halts``).

Every process that starts (actuator, policy, worker supervisor) reads the topic from its
beginning to its end once, so a halt kept there binds processes started after it; which
events count and how a resume lifts a halt is the contract's (``schemas.halts.in_force``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from schemas.halts import in_force


def read_in_force(
    config: Mapping[str, Any], topic: str, accept: Any, timeout_s: float = 10.0
) -> list[dict[str, Any]]:
    """Read ``topic`` (``lagpilot.halts``) from its beginning to its end; the halts still in
    force among the events ``accept(event)`` keeps (it decodes, validates and verifies, and
    returns the event or None). A missing topic means no halt was ever kept: []."""
    from confluent_kafka import Consumer, TopicPartition

    from schemas.codec import EventError, decode

    consumer = Consumer({**config, "enable.auto.commit": False, "enable.partition.eof": False})
    try:
        info = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if info is None or info.error is not None or not info.partitions:
            return []
        ends: dict[int, int] = {}
        for p in info.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
            if high > low:
                ends[p] = high
        if not ends:
            return []
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        events: list[dict[str, Any]] = []
        done: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(done) < len(ends) and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=0.2):
                if msg.error() is not None:
                    continue
                if msg.offset() >= ends[msg.partition()] - 1:
                    done.add(msg.partition())
                try:
                    event = accept(decode(msg.value() or b""))
                except EventError:
                    continue
                if event is not None:
                    events.append(event)
        return [dict(e) for e in in_force(events)]
    finally:
        consumer.close()
