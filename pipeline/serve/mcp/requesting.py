"""Publish a signed action request and wait, bounded, for what became of it.

The decide stage answers every request with a ``request_verdict`` on ``lagpilot.outcomes``
(key ``<request id>@request``); an ``issued`` one is followed by the actuator's ``outcome``
of its action (key: the action id). The reader is positioned at the end of the outcomes
topic *before* the request is sent, so the answer cannot be missed however fast it comes.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.commands.topic_reader import event_of, partitions_at_end, reader
from pipeline.decide.control import PublishError, publish_actions
from pipeline.decide.requests import build_request
from runtime.cli import CommandError, client_config
from schemas import sign, validate

#: what the actuator's outcome makes of an issued request ("recorded": a hint for
#: autoscalers, or the actuator's own policy copy is not in act mode)
_FINAL = {
    "applied": "applied",
    "failed": "failed",
    "rejected": "refused",
    "expired": "refused",
    "duplicate": "applied",
    "delegated": "delegated",
    "recorded": "recorded",
}


@dataclass(frozen=True, slots=True)
class Topics:
    requests: str
    outcomes: str
    control: str


class Requester:
    """One broker connection's worth of request plumbing (clients built per call: a tool
    call is rare, and a fresh consumer has no stale position)."""

    def __init__(self, bootstrap: str, kafka: Mapping[str, str], key: Any, topics: Topics) -> None:
        self.bootstrap, self.kafka, self.key, self.topics = bootstrap, dict(kafka), key, topics

    def request(
        self,
        action_type: str,
        target: str,
        params: Mapping[str, Any],
        reason: str,
        *,
        requested_by: str,
        wait_s: float,
        now_ms: int | None = None,
    ) -> dict[str, Any]:
        """Publish the request; its verdict, and the outcome of an issued action.

        ``result`` is ``applied``, ``recommended``, ``refused``, ``failed``, ``delegated``
        (left to the SDK workers), ``recorded`` (noted, not applied), or ``pending``
        (no answer within ``wait_s``: the request may still be decided; ``actions`` shows
        it later). Raises ``EventError`` for a request that fails its schema (nothing is
        sent) and ``CommandError`` when a topic is missing or the broker refuses it.
        """
        from confluent_kafka import Producer

        now = int(time.time() * 1000) if now_ms is None else now_ms
        req = sign(
            build_request(
                action_type, target, params, reason, requested_by=requested_by, now_ms=now
            ),
            self.key,
        )
        validate(req)
        consumer = reader(self.bootstrap, self.kafka, "mcp")
        try:
            names = (self.topics.requests, self.topics.outcomes)
            ends = partitions_at_end(consumer, names, bootstrap=self.bootstrap, timeout_s=10,
                                     missing="the pipeline creates it when it runs its policy "
                                     "(lagpilot run, with LAGPILOT_SIGNING_KEY set)")  # fmt: skip
            consumer.assign([tp for tp in ends if tp.topic == self.topics.outcomes])
            for tp in consumer.assignment():  # resolve the end now, before the request leaves
                consumer.get_watermark_offsets(tp, timeout=10)
            consumer.poll(0)
            producer = Producer({**client_config(self.bootstrap, self.kafka), "acks": "all"})
            try:
                publish_actions(producer, [req], self.key, topic=self.topics.requests)
            except PublishError as exc:
                raise CommandError(str(exc)) from exc
            return self._await(consumer, req, wait_s)
        finally:
            consumer.close()

    def _await(self, consumer: Any, req: dict[str, Any], wait_s: float) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "request_id": req["id"],
            "requested_by": req["requested_by"],
            "result": "pending",
            "rail": None,
            "why": None,
            "action_id": None,
            "action": None,
            "outcome": None,
        }
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is None or msg.error():
                continue
            ev = event_of(msg)
            if ev is None:
                continue
            if ev.get("event") == "request_verdict" and ev.get("request_id") == req["id"]:
                answer.update(
                    result=ev["result"],
                    rail=ev["rail"],
                    why=ev["why"],
                    action_id=ev["action_id"],
                    action=ev["action"],
                    mode=ev["mode"],
                )
                if ev["result"] != "issued":
                    return answer
                answer["result"] = "issued"  # applied once the actuator says so
            elif (
                ev.get("event") == "outcome"
                and answer["action_id"]
                and ev.get("action_id") == answer["action_id"]
            ):
                answer["outcome"] = {
                    k: ev.get(k) for k in ("result", "reason", "error", "actuator", "at")
                }
                final = _FINAL.get(str(ev.get("result")))
                if final is not None:
                    answer["result"] = final
                    return answer
        return answer
