"""Intent before the call, reconcile after a crash: no action's side effect twice.

The actuator commits an action's outcome after its backend call. An actuator killed between
the two leaves the call made and no outcome: its successor reprocesses the control event and,
blindly, would call the backend again. Every operation sets a state, so the second call
changes nothing on the cluster, but it is a second side effect all the same (a second
AlterClientQuotas, a second audit-log line on the broker).

So the runner writes an ``intent`` (``schemas/intent.v1.json``) under the action's id on the
outcomes topic before it calls the backend; the outcome, under the same key, supersedes it.
The ledger keeps intents that have no outcome yet. An actuator about to apply an action whose
intent is in its ledger first reads the state the action sets (:func:`observe`, the effect)
and asks :func:`in_effect` (pure) whether it is already there: if so it records ``applied``
with a ``reconciled`` reason and calls nothing; if not (the predecessor died before its
call, or the read failed) it applies the action as usual.

Only an action with an intent pays for the read: a normal apply costs one intent write per
batch, not one read per action.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaException

from actuators.backends import Backend
from schemas import ActionType, encode

log = logging.getLogger("lagpilot.actuator")

#: Action types that change the cluster through the backend: they get an intent.
EFFECTS = frozenset(
    {
        ActionType.THROTTLE_PRODUCER,
        ActionType.RELEASE_PRODUCER,
        ActionType.ADD_PARTITIONS,
        ActionType.TRANSFER_LEADERSHIP,
    }
)


def intent(action: Mapping[str, Any], *, actuator: str, now_ms: int) -> dict[str, Any]:
    """A schema-valid intent event for ``action`` (``intent.v1.json``)."""
    out: dict[str, Any] = {
        "event": "intent",
        "v": 1,
        "action_id": action["id"],
        "action_type": action["type"],
        "params": dict(action.get("params") or {}),
        "actuator": actuator,
        "at": now_ms,
    }
    if isinstance(action.get("target"), str):
        out["target"] = action["target"]
    return out


class IntentLog:
    """Writes intents on the outcomes topic with its own (idempotent, non-transactional)
    producer: an intent must be on the topic before the backend call, whether or not the
    batch's transaction commits later. ``begin`` a batch, ``add`` its actions, ``flush``
    once before the first call."""

    def __init__(self, make_producer: Callable[[], Any], topic: str, actuator: str) -> None:
        self._make = make_producer
        self._producer = make_producer()
        self._topic = topic
        self._actuator = actuator
        self._pending = 0
        self.written: set[str] = set()  # ids of this batch that have their intent

    def begin(self) -> None:
        self.written = set()

    def add(self, action: Mapping[str, Any], now_ms: int) -> bool:
        """Queue the intent of ``action`` if it calls the backend and has none yet."""
        if action["type"] not in EFFECTS or action["id"] in self.written:
            return False
        value = encode(intent(action, actuator=self._actuator, now_ms=now_ms))
        try:
            self._producer.produce(self._topic, key=str(action["id"]).encode(), value=value)
        except (KafkaException, BufferError) as exc:
            # An intent is never worth the actuator: without it a crash costs one more
            # (idempotent) call. A producer in a fatal state is replaced for the next one.
            log.warning("intent of %s not written (%s); a new intent producer", action["id"], exc)
            self._producer = self._make()
            return False
        self.written.add(action["id"])
        self._pending += 1
        return True

    def flush(self, timeout_s: float = 10.0) -> None:
        if not self._pending:
            return
        if self._producer.flush(timeout_s) > 0:
            # Not fatal: without its intent, a crash before the outcome costs one more
            # (idempotent) call on replay, as it did before intents existed.
            log.warning("intents not acknowledged in %g s", timeout_s)
        self._pending = 0

    def close(self) -> None:
        self._producer.flush(5)


def observe(backend: Backend, action: Mapping[str, Any]) -> int | None:
    """The state ``action`` sets, read from the backend (the one effect here): the quota's
    rate (None: no quota), the topic's partition count, or the partition's leader."""
    p = action["params"]
    kind = action["type"]
    if kind in (ActionType.THROTTLE_PRODUCER, ActionType.RELEASE_PRODUCER):
        return backend.producer_rate(p["entity"], p["name"])
    if kind == ActionType.ADD_PARTITIONS:
        return backend.partition_count(p["topic"])
    if kind == ActionType.TRANSFER_LEADERSHIP:
        return backend.leader(p["topic"], int(p["partition"]))
    raise ValueError(f"{kind!r} has no state to observe")


def in_effect(action: Mapping[str, Any], observed: int | None) -> str | None:
    """The outcome's reason when ``observed`` (what :func:`observe` read) already is what
    ``action`` sets; None when the action must still be applied."""
    p = action["params"]
    kind = action["type"]
    if kind == ActionType.THROTTLE_PRODUCER:
        rate = int(p["producer_byte_rate"])
        if observed == rate:
            return (
                f"reconciled: producer_byte_rate={rate} already on {p['entity']}={p['name']} "
                "(applied before a crash); not set again"
            )
    elif kind == ActionType.RELEASE_PRODUCER:
        if observed is None:
            return (
                f"reconciled: no producer_byte_rate on {p['entity']}={p['name']} (released "
                "before a crash); not removed again"
            )
    elif kind == ActionType.ADD_PARTITIONS:
        total = int(p["total"])
        if observed is not None and observed >= total:
            return (
                f"reconciled: {p['topic']} already has {observed} partitions (>= {total}); "
                "not grown again"
            )
    elif kind == ActionType.TRANSFER_LEADERSHIP:
        target = int(p["target_broker"])
        if observed == target:
            return (
                f"reconciled: {p['topic']}/{p['partition']} is already led by broker {target}; "
                "not moved again"
            )
    return None
