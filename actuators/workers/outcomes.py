"""What a worker instance did with a control event, reported on ``lagpilot.outcomes``.

The actuator only delegates worker actions (outcome ``delegated``); the workers are the ones
that act, so they say so: one ``worker_outcome`` event (``worker_outcome.v1.json``) per
instance and step, keyed ``action_id|instance`` so that the compacted topic keeps each
instance's latest step. Counting the distinct instances of an action id gives "applied by N
instances". ``worker_outcome`` is pure; ``OutcomeReporter`` sends, and never raises into the
poll loop: a report that cannot be sent is counted and logged.
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import Producer

from schemas import encode

log = logging.getLogger(__name__)

SPREAD = "spread"
RESTORED = "restored"
HANDOFF_STARTED = "handoff_started"
HANDOFF_RETURNED = "handoff_returned"
HALTED = "halted"
RESUMED = "resumed"


def worker_outcome(
    *,
    action_id: str,
    action_type: str,
    did: str,
    group: str,
    instance: str,
    host: str,
    now_ms: int,
    topic: str | None = None,
    partition: int | None = None,
    lanes: int | None = None,
    pool: str | None = None,
    offset: int | None = None,
) -> dict[str, Any]:
    """The event for one step (absent optional fields are left out, not null)."""
    event: dict[str, Any] = {
        "event": "worker_outcome",
        "v": 1,
        "action_id": action_id,
        "action_type": action_type,
        "did": did,
        "group": group,
        "instance": instance,
        "host": host,
        "at": now_ms,
    }
    for name, value in (
        ("topic", topic),
        ("partition", partition),
        ("lanes", lanes),
        ("pool", pool),
        ("offset", offset),
    ):
        if value is not None:
            event[name] = value
    return event


def outcome_key(event: dict[str, Any]) -> bytes:
    return f"{event['action_id']}|{event['instance']}".encode()


class OutcomeReporter:
    """Sends worker outcomes with its own small producer (started at ``start``)."""

    def __init__(self, config: dict[str, Any], topic: str) -> None:
        # never create the outcomes topic: lagpilot's actuator creates it compacted, and an
        # auto-created one would not be
        self._config = {
            **config,
            "linger.ms": 0,
            "allow.auto.create.topics": False,
            "message.timeout.ms": 5000,
        }
        self.topic = topic
        self._producer: Producer | None = None
        self.sent = 0
        self.errors = 0

    def start(self) -> None:
        self._producer = Producer(self._config)

    def report(self, event: dict[str, Any]) -> None:
        if self._producer is None:
            return
        try:
            self._producer.produce(self.topic, value=encode(event), key=outcome_key(event))
            self._producer.poll(0)
            self.sent += 1
        except Exception as exc:  # BufferError, KafkaException: never the poll loop's problem
            self.errors += 1
            log.warning("worker_outcome %s not sent: %s", event.get("did"), exc)

    def close(self, timeout_s: float = 5.0) -> None:
        if self._producer is not None:
            self._producer.flush(timeout_s)
            self._producer = None
