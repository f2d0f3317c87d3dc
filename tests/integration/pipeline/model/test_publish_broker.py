"""The lag events' sink against the real broker: one message per event, keyed as
``to_topic`` keyed them, with the input's timestamp; an undelivered event fails the
checkpoint (``flush`` raises), so its input is processed again."""

from __future__ import annotations

import time

import orjson
import pytest
from confluent_kafka import Consumer

from bench.support.harness import create_topic
from pipeline.model.model_op import lag_key
from pipeline.model.publish import LagEvents, LagPublishError


def test_each_event_is_one_message_keyed_like_the_lag_topic(
    kafka_bootstrap: str, unique_name: str
) -> None:
    topic = f"{unique_name}.lag"
    create_topic(kafka_bootstrap, topic, 3)
    sink = LagEvents({"bootstrap.servers": kafka_bootstrap}, topic, lag_key)
    sink.setup()
    events = [
        {"event": "group_lag", "group": "g", "topic": "t", "status": "OK"},
        {"event": "partition_lag", "group": "g", "topic": "t", "partition": 3, "lag": 7},
        {"event": "group_health", "group": "g", "status": "STORM"},
    ]
    sink.add(events, "t", 1_790_000_000_123, None, "in", 0, 41)
    sink.add([], "t", 1_790_000_000_124, None, "in", 0, 42)  # a message with no events
    sink.flush()
    assert sink.produced == 3
    c = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": unique_name,
            "auto.offset.reset": "earliest",
        }
    )
    c.subscribe([topic])
    got: dict[str, tuple[dict, int]] = {}
    deadline = time.monotonic() + 30
    while len(got) < 3 and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is not None and not m.error():
            got[m.key().decode()] = (orjson.loads(m.value()), m.timestamp()[1])
    c.close()
    assert got == {
        "g|t": (events[0], 1_790_000_000_123),
        "g|t|3": (events[1], 1_790_000_000_123),
        "g": (events[2], 1_790_000_000_123),
    }


def test_an_undelivered_event_fails_the_checkpoint() -> None:
    """No broker at the address: the event cannot be delivered within its timeout, and
    ``flush`` (Quix's checkpoint) raises a retriable error instead of committing."""
    sink = LagEvents(
        {"bootstrap.servers": "127.0.0.1:9", "message.timeout.ms": 1500},
        "lagpilot.lag",
        lag_key,
    )
    sink.setup()
    sink.add([{"event": "group_lag", "group": "g", "topic": "t"}], "t", 1, None, "in", 0, 0)
    with pytest.raises(LagPublishError) as caught:
        sink.flush()
    assert caught.value.retriable and "not delivered" in str(caught.value)
    sink.flush()  # the failure was reported once; nothing is left to deliver
