"""The ledger: what the outcomes topic says was applied, which throttles hold, halted or not.

It is a pure fold over outcome events, so the same function rebuilds it at start (reading
``lagpilot.outcomes`` from the beginning), keeps it current while running (tailing the topic,
which also shows what *other* actuators did), and is unit-tested without a broker.

Why it trusts only some results: ``lagpilot.outcomes`` is compacted by action id, so only the
last outcome of an id survives. ``duplicate`` and ``released`` outcomes therefore also mean
"this id was applied (or delegated)" (they are only ever written for such an id), and
nothing else is ever written under an applied id's key (the runner checks the ledger before
it writes anything else, and keys unverified events' outcomes by their position, not their
claimed id).

Intents (``intent`` events, written under the action's id just before its backend call, see
``actuators/reconcile.py``) are kept until an outcome of the same id is folded: an intent
left without one is an action whose call may have been made by an actuator that died.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from schemas import ActionType, OutcomeResult
from schemas.halts import ACTIONS, HaltScope, halt_scope

#: A ``delegated`` worker action is done as far as the actuator goes: its replay (a pipeline
#: killed mid-incident publishes its last decisions again, same ids) is a ``duplicate``, not a
#: second delegation.
_APPLIED_FAMILY = {
    OutcomeResult.APPLIED,
    OutcomeResult.DUPLICATE,
    OutcomeResult.RELEASED,
    OutcomeResult.DELEGATED,
}


@dataclass(frozen=True)
class Lease:
    """A throttle in force: released at ``expires_at_ms`` unless a newer throttle renews it."""

    action_id: str
    entity: str
    name: str
    bytes_per_s: int
    expires_at_ms: int
    applied_at_ms: int

    @property
    def key(self) -> tuple[str, str]:
        return (self.entity, self.name)


@dataclass
class Ledger:
    applied: set[str] = field(default_factory=set)
    leases: dict[tuple[str, str], Lease] = field(default_factory=dict)
    #: (at_ms, halted) of the newest halt/resume applied by any actuator.
    kill_switch: tuple[int, bool] = (0, False)
    #: entity -> when a release_producer last ended its throttle (outcomes on different
    #: partitions may be read out of order: an older throttle must not revive it).
    released_at: dict[tuple[str, str], int] = field(default_factory=dict)
    #: action id -> its intent, while no outcome of that id has been folded.
    intents: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def halted(self) -> bool:
        return self.kill_switch[1]

    def fold(self, outcome: Mapping[str, Any]) -> None:
        """Account for one outcome or intent event (already decoded; bad ones are the caller's
        to skip; other events on the topic are ignored)."""
        result = outcome.get("result")
        action_id = outcome.get("action_id")
        if isinstance(action_id, str):
            if outcome.get("event") == "intent":
                if action_id not in self.applied:
                    self.intents[action_id] = dict(outcome)
                return
            if result is not None:  # an outcome, whatever its result, ends the intent
                self.intents.pop(action_id, None)
        if result not in _APPLIED_FAMILY or not isinstance(action_id, str):
            return
        self.applied.add(action_id)
        kind = outcome.get("action_type")
        params = outcome.get("params") or {}
        at = int(outcome.get("at", 0))
        if result == OutcomeResult.APPLIED and kind in (ActionType.HALT, ActionType.RESUME):
            global_ = halt_scope(params) == HaltScope(ACTIONS, None)
            if global_ and at >= self.kill_switch[0]:
                self.kill_switch = (at, kind == ActionType.HALT)
            return
        entity, name = params.get("entity"), params.get("name")
        if not isinstance(entity, str) or not isinstance(name, str):
            return
        key = (entity, name)
        current = self.leases.get(key)
        if result == OutcomeResult.APPLIED and kind == ActionType.THROTTLE_PRODUCER:
            expires = outcome.get("lease_expires_at")
            newer = current is None or at >= current.applied_at_ms
            if isinstance(expires, int) and newer and at > self.released_at.get(key, -1):
                rate = int(params.get("producer_byte_rate", 0))
                self.leases[key] = Lease(action_id, entity, name, rate, expires, at)
        elif result == OutcomeResult.APPLIED and kind == ActionType.RELEASE_PRODUCER:
            # A release ends whatever throttle holds the entity, whichever id set it.
            self.released_at[key] = max(at, self.released_at.get(key, -1))
            if current is not None and current.applied_at_ms <= at:
                self.leases.pop(key, None)
        elif result == OutcomeResult.RELEASED and current and current.action_id == action_id:
            # A lease end releases only the lease it names: a renewal may have replaced it.
            self.leases.pop(key, None)

    def fold_all(self, outcomes: Iterable[Mapping[str, Any]]) -> Ledger:
        for outcome in outcomes:
            self.fold(outcome)
        return self

    def due(self, now_ms: int) -> list[Lease]:
        """Leases that have ended and must be released, oldest first."""
        return sorted(
            (lease for lease in self.leases.values() if lease.expires_at_ms <= now_ms),
            key=lambda lease: lease.expires_at_ms,
        )
