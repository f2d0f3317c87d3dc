"""The control topic on a real broker: policy actions and the kill switch, read back.

Each test uses its own control topic (``--topic``), so a halt here never reaches the
actuators other tests run against ``lagpilot.control``.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from pipeline.commands.control import main, publish_actions
from pipeline.decide.policy import PolicyState, apply_control, decide
from pipeline.decide.policy_config import config_from_mapping
from schemas import GroupLag, LagStatus, WorstPartition, decode, validate, verify

KEY = "integration-signing-key-0123456789"


def create_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, 3, 1)]).values():
        future.result(timeout=30)


def read_all(bootstrap: str, topic: str, want: int, timeout_s: float = 20.0) -> list[Any]:
    """Every message of ``topic`` from the start, until ``want`` arrived or the time is up."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    consumer.subscribe([topic])
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < want and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                out.append(msg)
        extra = consumer.poll(1.0)  # nothing more than wanted
        if extra is not None and not extra.error():
            out.append(extra)
    finally:
        consumer.close()
    return out


def lagging(at: int) -> GroupLag:
    worst = (WorstPartition(0, 90_000, 45.0, 300.0, 20.0, 500.0, 200.0, LagStatus.ERR, 1),)
    return GroupLag("workers", "docs", at, LagStatus.ERR, 90_000, 45.0, 300.0, 1, 1, worst)


def test_one_explained_action_then_halt_stops_further_actions(
    kafka_bootstrap: str, unique_name: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("LAGPILOT_SIGNING_KEY", KEY)
    topic = f"{unique_name}.control"
    create_topic(kafka_bootstrap, topic)
    config = config_from_mapping({
        "mode": "act",
        "thresholds": {"default": {"time_lag_s": 30, "enter_windows": 3}},
        "allow": {"throttle_client_ids": ["ingest-*"]},
        "producers": {"ingest-*": ["docs"]},
        "actions": {"enabled": ["throttle_producer", "release_producer"]},
        "diagnosis": {"enabled": False},  # the publishing path and the kill switch, not a cause
    })  # fmt: skip
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})

    # a lagging partition, summarised every 250 ms for 2 s: exactly one action
    state, t0 = PolicyState(), 1_800_000_000_000
    for i in range(8):
        actions, state = decide(lagging(t0 + i * 250), state, config, t0 + i * 250)
        publish_actions(producer, actions, KEY.encode(), topic=topic)
    [msg] = read_all(kafka_bootstrap, topic, want=1)
    action = decode(msg.value())
    validate(action)
    verify(action, KEY.encode())
    assert msg.key() == b"client-id-prefix:ingest-"
    assert action["type"] == "throttle_producer" and action["mode"] == "act"
    assert action["reason"]["time_lag_s"] == 45.0
    assert action["reason"]["thresholds"]["time_lag_s"] == 30

    # the kill switch, through the CLI, reads back signed and schema-valid
    assert main(["--bootstrap", kafka_bootstrap, "--topic", topic, "halt", "--scope", "all"]) == 0
    assert "halt scope=actions" in capsys.readouterr().out  # "all" is read as actions
    messages = read_all(kafka_bootstrap, topic, want=2)
    assert len(messages) == 2
    halt_msg = next(m for m in messages if decode(m.value())["type"] == "halt")
    halt = decode(halt_msg.value())
    validate(halt)
    verify(halt, KEY.encode())
    assert halt_msg.key() == b"scope:actions" and halt["params"] == {"scope": "actions"}

    # folded into the policy, it stops every further action (even the lease renewals due)
    state = apply_control(state, halt, halt["issued_at"])
    for i in range(8, 400):
        actions, state = decide(lagging(t0 + i * 250), state, config, t0 + i * 250)
        assert actions == []

    # tail shows both events as a table, with verified signatures
    args = ["--bootstrap", kafka_bootstrap, "--topic", topic, "tail", "--outcomes-topic",
            topic, "--from-beginning", "--max", "2", "--idle-exit", "15"]  # fmt: skip
    assert main(args) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].startswith("time(UTC)")
    assert sorted(r.split()[2] for r in rows[1:]) == ["halt", "throttle_producer"]
    assert all(r.split()[5] == "ok" for r in rows[1:])
