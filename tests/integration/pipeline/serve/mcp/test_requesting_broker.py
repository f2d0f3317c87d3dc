"""The request's round trip on the real broker, with the decide stage's part played by the
pure evaluator in act mode (``pipeline.decide.requests.evaluate``, with an open incident)
and the actuator's by an ``applied`` outcome: the requester positions its reader before it
sends, so even an immediate answer is seen, and an issued request becomes ``applied``
once the actuator says so; without an answer it is ``pending`` after its bounded wait."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import orjson
from confluent_kafka import Consumer, Producer, TopicPartition

from bench.support.harness import create_topic
from pipeline.decide.policy import Incident, PolicyState, incident_key
from pipeline.decide.policy_config import config_from_mapping
from pipeline.decide.requests import evaluate
from pipeline.serve.mcp.requesting import Requester, Topics
from schemas import decode, encode, verify

KEY = b"requesting-e2e-key-0123456789"
SPREAD = {"group": "g", "topic": "t", "partition": 1, "lanes": 4}


def decide_stage(bootstrap: str, topics: Topics, stop: threading.Event) -> None:
    """Answers every request on ``topics.requests`` as the pipeline would, then applies it."""
    policy = config_from_mapping({"mode": "act"})
    state = PolicyState()
    state.incidents[incident_key("g", "t")] = Incident(active=True)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"d-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topics.requests, 0, 0)])
    producer = Producer({"bootstrap.servers": bootstrap})
    try:
        while not stop.is_set():
            msg = consumer.poll(0.1)
            if msg is None or msg.error():
                continue
            req = decode(msg.value() or b"")
            verify(req, KEY)
            out, state = evaluate(req, state, policy, int(time.time() * 1000))
            for ev in out:
                if ev["event"] == "request_verdict":
                    producer.produce(topics.outcomes, encode(ev), key=b"verdict")
                    if ev["action_id"]:
                        applied = {
                            "event": "outcome",
                            "v": 1,
                            "action_id": ev["action_id"],
                            "result": "applied",
                            "actuator": "test",
                            "at": int(time.time() * 1000),
                        }
                        producer.produce(topics.outcomes, encode(applied), key=b"outcome")
            producer.flush(10)
    finally:
        consumer.close()


def test_an_issued_request_is_applied_and_an_unanswered_one_pending(kafka_bootstrap: str) -> None:
    run = uuid.uuid4().hex[:6]
    topics = Topics(f"lp-req-{run}", f"lp-out-{run}", f"lp-ctl-{run}")
    for name in (topics.requests, topics.outcomes):
        create_topic(kafka_bootstrap, name, 1)
    requester = Requester(kafka_bootstrap, {}, KEY, topics)
    stop = threading.Event()
    stage = threading.Thread(target=decide_stage, args=(kafka_bootstrap, topics, stop))
    stage.start()
    try:
        got: dict[str, Any] = requester.request(
            "spread_partition", "group:g/topic:t/1", SPREAD, "hot", requested_by="e2e", wait_s=20
        )
        refused = requester.request(
            "spread_partition", "group:g/topic:t/1", SPREAD, "again", requested_by="e2e", wait_s=20
        )
    finally:
        stop.set()
        stage.join(10)
    assert (got["result"], got["rail"]) == ("applied", "passed"), got
    assert (
        got["outcome"]["result"] == "applied" and got["action"]["reason"]["requested_by"] == "e2e"
    )
    assert (refused["result"], refused["rail"]) == ("refused", "cooldown"), refused
    silent = requester.request(
        "spread_partition", "group:g/topic:t/1", SPREAD, "nobody home", requested_by="e2e", wait_s=1
    )
    assert silent["result"] == "pending" and silent["why"] is None
    sent = orjson.loads(_last(kafka_bootstrap, topics.requests))
    assert sent["reason"] == "nobody home" and sent["requested_by"] == "e2e"
    verify(sent, KEY)


def _last(bootstrap: str, topic: str) -> bytes:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}"})
    try:
        _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        c.assign([TopicPartition(topic, 0, high - 1)])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is not None and not msg.error():
                return bytes(msg.value() or b"")
        raise AssertionError(f"nothing on {topic}")
    finally:
        c.close()
