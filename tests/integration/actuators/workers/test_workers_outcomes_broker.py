"""Workers say what they did: a halt is reported by every instance, a spread by its owner."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, Message

from actuators.workers import EffectGuard, MemoryDedupeStore, Worker
from schemas import decode, validate
from tests.integration.actuators.workers.workers_broker import (
    KEY,
    control_event,
    create_topics,
    publish,
    wait_until,
)


def read_all(bootstrap: str, topic: str, want: int, timeout_s: float) -> list[dict[str, Any]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-reader",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and len(events) < want:
        msg = consumer.poll(0.3)
        if msg is None or msg.error():
            continue
        event = decode(msg.value())
        validate(event)
        assert msg.key() == f"{event['action_id']}|{event['instance']}".encode()
        events.append(event)
    consumer.close()
    return events


def test_halt_is_reported_by_each_instance_and_a_spread_by_its_owner(
    kafka_bootstrap: str, unique_name: str
) -> None:
    topic, control, outcomes = unique_name, f"{unique_name}.control", f"{unique_name}.outcomes"
    group = f"{unique_name}-g"
    create_topics(kafka_bootstrap, (topic, 2), (control, 1), (outcomes, 1))

    def handle(msg: Message, ctx: EffectGuard) -> None:
        return None

    workers = [
        Worker(
            bootstrap=kafka_bootstrap,
            group=group,
            topics=[topic],
            handler=handle,
            instance_id=f"{unique_name}-w{i}",
            dedupe=MemoryDedupeStore(),
            control_topic=control,
            outcomes_topic=outcomes,
            signing_key=KEY,
        )
        for i in range(2)
    ]
    for w in workers:
        w.start()
    try:
        wait_until(lambda: all(len(w.assignment()) == 1 for w in workers), 30, "one partition each")
        halt = control_event("halt", {"scope": group})
        resume = control_event("resume", {"scope": group})
        spread = control_event(
            "spread_partition", {"group": group, "topic": topic, "partition": 1, "lanes": 4}
        )
        (owner,) = [w for w in workers if (topic, 1) in w.assignment()]
        publish(kafka_bootstrap, control, halt, resume, spread)
        events = read_all(kafka_bootstrap, outcomes, want=5, timeout_s=15)
    finally:
        for w in workers:
            w.stop()
    by_action: dict[str, set[tuple[str, str]]] = {}
    for e in events:
        by_action.setdefault(e["action_id"], set()).add((e["instance"], e["did"]))
    names = {w.instance_id for w in workers}
    assert by_action[halt["id"]] == {(n, "halted") for n in names}
    assert by_action[resume["id"]] == {(n, "resumed") for n in names}
    assert by_action[spread["id"]] == {(owner.instance_id, "spread")}
    (spread_event,) = [e for e in events if e["action_id"] == spread["id"]]
    assert (spread_event["topic"], spread_event["partition"], spread_event["lanes"]) == (
        topic,
        1,
        4,
    )
