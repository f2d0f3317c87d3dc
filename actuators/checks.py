"""What to do with one control event: the actuator's rules as pure functions, ``now`` passed in.

``check`` runs the gates in order and returns a ``Verdict``: either an outcome to publish
without touching the cluster, or an action to apply. It is ``read`` (gates 0-3, which
depend on the value alone) then ``judge`` (gates 4-10, which depend on the ledger and the
clock): a caller that judges one event more than once, against a ledger that changed in
between, reads (and verifies) it once. The order, one reason each:

0. size: an event over ``MAX_EVENT_BYTES`` is rejected before it is parsed. The policy's
   events are a few kB; a huge one is a bug or an attack, and its outcome (which echoes the
   event's params) could outgrow the outcomes topic's message limit and wedge the loop.
1. decode, 2. schema, 3. signature: nothing about an unverified event is trusted, so its
   outcome is keyed by its position on the control topic, never by the id it claims (a
   forged event must not overwrite, in the compacted outcomes topic, the record that a real
   action was applied).
4. dedupe: an id the ledger holds as applied is a ``duplicate`` whatever else is true of it.
   It runs before the remaining gates because the outcomes topic keeps one outcome per id:
   a later "expired" or "rejected: halted" for an applied id would erase that it was applied.
5. expiry: an action past ``expires_at`` acted on stale numbers.
6. kill switch events (``halt``/``resume`` of scope ``actions`` without a group; the older
   ``all``) are applied in any mode:
   stopping is always safe, and the switch must work when everything else is misconfigured.
7. mode: a ``recommend`` event is recorded, never applied. Worker actions (spread/restore
   partition, scoped halts) in ``act`` mode are ``delegated``: the SDK workers obey them
   whatever this actuator's policy file says, and report back (``worker_outcome``). Any
   other event while the policy file's mode is not ``act`` is recorded, never applied.
8. ``scale_consumers`` (a hint for autoscalers) is recorded: this actuator does not own it.
9. halted: nothing is applied.
10. allow-lists: throttles, releases and partition growth only for allow-listed targets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from actuators.ledger import Lease, Ledger
from actuators.settings import Policy
from schemas import (
    WORKER_ACTIONS,
    ActionType,
    EventError,
    Mode,
    OutcomeResult,
    Verifier,
    decode,
    validate,
    verify,
)
from schemas.halts import ACTIONS, HaltScope, halt_scope

#: Control events above this size are rejected unread (the policy's are a few kB).
MAX_EVENT_BYTES = 64 * 1024

KILL_SWITCH = frozenset({ActionType.HALT, ActionType.RESUME})
HINTS = frozenset({ActionType.SCALE_CONSUMERS})


@dataclass(frozen=True)
class Verdict:
    key: str  # the outcome's key on the outcomes topic
    outcome: dict[str, Any] | None = None  # publish this, apply nothing
    action: dict[str, Any] | None = None  # apply this, then publish its outcome


def outcome(
    result: OutcomeResult,
    *,
    actuator: str,
    now_ms: int,
    action: Mapping[str, Any] | None = None,
    action_id: str | None = None,
    reason: str | None = None,
    error: dict[str, Any] | None = None,
    lease_expires_at: int | None = None,
) -> dict[str, Any]:
    """A schema-valid outcome event (``outcome.v1.json``)."""
    out: dict[str, Any] = {
        "event": "outcome",
        "v": 1,
        "action_id": action_id or (action or {}).get("id") or "unknown",
        "result": result.value,
        "actuator": actuator,
        "at": now_ms,
    }
    if action is not None:
        for src, dst in (("type", "action_type"), ("target", "target")):
            if isinstance(action.get(src), str):
                out[dst] = action[src]
        if isinstance(action.get("params"), dict):
            out["params"] = action["params"]
    if reason is not None:
        out["reason"] = reason
    if error is not None:
        out["error"] = error
    if lease_expires_at is not None:
        out["lease_expires_at"] = lease_expires_at
    return out


def _claimed_id(event: Mapping[str, Any] | None, position: str) -> str:
    claimed = (event or {}).get("id")
    if isinstance(claimed, str) and 0 < len(claimed) <= 64:
        return claimed
    return f"unverified@{position}"


@dataclass(frozen=True)
class Reading:
    """What gates 0-3 made of one control-topic value: the verified action, or the reason
    it was rejected unverified (with what decoded of it, which the rejection echoes)."""

    position: str  # "topic/partition@offset"
    action: dict[str, Any] | None = None  # verified: gates 4-10 judge it
    event: dict[str, Any] | None = None  # rejected: what decoded, if anything
    reason: str | None = None  # rejected: why


def check(
    raw: bytes | None,
    *,
    position: str,
    signing_key: Verifier,
    policy: Policy,
    ledger: Ledger,
    actuator: str,
    now_ms: int,
) -> Verdict:
    """The verdict on one control-topic value; ``position`` is "topic/partition@offset"."""
    reading = read(raw, position=position, signing_key=signing_key)
    return judge(reading, policy=policy, ledger=ledger, actuator=actuator, now_ms=now_ms)


def read(raw: bytes | None, *, position: str, signing_key: Verifier) -> Reading:
    """Gates 0-3 (size, decode, schema, signature) on one control-topic value."""

    def reject(event: dict[str, Any] | None, reason: str) -> Reading:
        return Reading(position, event=event, reason=reason)

    if raw is None:
        return reject(None, "malformed: empty value (a tombstone is not an action)")
    if len(raw) > MAX_EVENT_BYTES:
        return reject(
            None, f"oversized: {len(raw)} bytes, over the {MAX_EVENT_BYTES}-byte limit; unread"
        )
    try:
        event = decode(raw)
    except EventError as exc:
        return reject(None, f"{exc.reason}: {exc}")
    try:
        validate(event)
        if event.get("event") != "action":
            raise EventError("schema", f"expected an action event, got {event.get('event')!r}")
        verify(event, signing_key)
    except EventError as exc:
        return reject(event, f"{exc.reason}: {exc}")
    return Reading(position, action=event)


def judge(
    reading: Reading, *, policy: Policy, ledger: Ledger, actuator: str, now_ms: int
) -> Verdict:
    """The verdict on a read value: its rejection, else gates 4-10 on the verified action."""
    if reading.action is not None:
        return _check_verified(
            reading.action, policy=policy, ledger=ledger, actuator=actuator, now_ms=now_ms
        )
    event = reading.event
    out = outcome(
        OutcomeResult.REJECTED,
        actuator=actuator,
        now_ms=now_ms,
        action=event if isinstance(event, Mapping) else None,
        action_id=_claimed_id(event, reading.position),
        reason=reading.reason,
    )
    return Verdict(key=f"unverified@{reading.position}", outcome=out)


def _check_verified(
    action: dict[str, Any], *, policy: Policy, ledger: Ledger, actuator: str, now_ms: int
) -> Verdict:
    action_id: str = action["id"]
    kind = ActionType(action["type"])

    def done(result: OutcomeResult, reason: str, key: str = action_id) -> Verdict:
        out = outcome(result, actuator=actuator, now_ms=now_ms, action=action, reason=reason)
        return Verdict(key=key, outcome=out)

    if action_id in ledger.applied:
        # Keyed apart from the id so that compaction keeps the applied outcome (and its lease).
        return done(OutcomeResult.DUPLICATE, "already applied", key=f"{action_id}@duplicate")
    if action["expires_at"] < now_ms:
        late_s = (now_ms - action["expires_at"]) / 1000
        return done(OutcomeResult.EXPIRED, f"expired {late_s:.3f} s before it was read")
    if kind in KILL_SWITCH:
        scope = halt_scope(action["params"])
        if scope == HaltScope(ACTIONS, None):
            return Verdict(key=action_id, action=action)
        return done(
            OutcomeResult.DELEGATED if action["mode"] == Mode.ACT else OutcomeResult.RECORDED,
            f"{kind.value} scope {scope} is for the workers (and the policy); the actuator "
            "halts only on scope actions without a group",
        )
    if action["mode"] != Mode.ACT:
        return done(OutcomeResult.RECORDED, "recommend mode: recorded, not applied")
    if kind in WORKER_ACTIONS:
        return done(
            OutcomeResult.DELEGATED,
            f"{kind.value} is for the group's SDK workers: each reports a worker_outcome",
        )
    if policy.mode != Mode.ACT:
        return done(
            OutcomeResult.RECORDED,
            f"policy file mode is {policy.mode.value}: recorded, not applied (set mode = "
            '"act" in the policy file to apply)',
        )
    if kind in HINTS:
        return done(OutcomeResult.RECORDED, f"{kind.value} is for autoscalers: recorded")
    if ledger.halted:
        return done(OutcomeResult.REJECTED, "halted: the kill switch is on (send resume)")
    refusal = _allow_refusal(kind, action["params"], policy)
    if refusal:
        return done(OutcomeResult.REJECTED, refusal)
    return Verdict(key=action_id, action=action)


def _allow_refusal(kind: ActionType, params: Mapping[str, Any], policy: Policy) -> str | None:
    throttles = (ActionType.THROTTLE_PRODUCER, ActionType.RELEASE_PRODUCER)
    if kind in throttles and not policy.allow.allows_throttle(params["entity"], params["name"]):
        return (
            f"not allow-listed: {params['entity']}={params['name']} is not covered by "
            "[allow] throttle_client_ids in the policy file"
        )
    if kind == ActionType.ADD_PARTITIONS and not policy.allow.allows_partitions(params["topic"]):
        return (
            f"not allow-listed: topic {params['topic']!r} is not in [allow] partition_topics "
            "in the policy file"
        )
    return None


def lease_expiry_ms(action: Mapping[str, Any], now_ms: int) -> int:
    """When a throttle applied at ``now_ms`` ends unless a newer throttle renews it."""
    return now_ms + round(float(action["params"]["lease_s"]) * 1000)


def released(lease: Lease, *, actuator: str, now_ms: int) -> dict[str, Any]:
    """The outcome that ends a lease. Keyed by the throttle's id, it replaces that throttle's
    ``applied`` outcome under compaction: the lease is over, the id stays known as applied."""
    late_ms = max(0, now_ms - lease.expires_at_ms)
    return outcome(
        OutcomeResult.RELEASED,
        actuator=actuator,
        now_ms=now_ms,
        action_id=lease.action_id,
        reason=f"lease ended {late_ms} ms ago without renewal: quota removed",
    ) | {
        "action_type": ActionType.THROTTLE_PRODUCER.value,
        "target": f"{lease.entity}:{lease.name}",
        "params": {"entity": lease.entity, "name": lease.name},
    }
