"""The policy's state and its actions, as plain data: incidents, throttles, the budget,
the kill switch (``PolicyState``, persisted as JSON in the operator's state store), and
``build_action``, the unsigned action event every rule emits.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from schemas import stable_id

BUDGET_WINDOW_MS = 60_000
PRUNE_EVERY_MS = 1_000
#: A kill-switch event stamped this far in the future is ignored: ordering of halts and
#: resumes is by issued_at, so one bad clock must not make every later resume look stale.
MAX_CONTROL_SKEW_MS = 300_000
#: halt/resume hold until the opposite event; their expires_at only bounds delivery, so it
#: is far out and an actuator replaying the control topic after a restart still honours it.
CONTROL_TTL_MS = 365 * 24 * 3600 * 1000

ABOVE, BETWEEN, BELOW = "above", "between", "below"
THRESHOLD_KEYS = ("time_lag_s", "offset_lag", "accel_per_s2", "exit_ratio")


@dataclass(slots=True)
class Incident:
    """Hysteresis of one (group, topic): consecutive windows above enter / below exit."""

    above: int = 0
    below: int = 0
    active: bool = False
    since_ms: int = 0  # when the incident opened: the decision window of its actions
    seen_ms: int = 0


@dataclass(slots=True)
class Throttle:
    """A producer quota this policy issued and has not released."""

    rate: int
    since_ms: int  # when this throttle episode began (id window)
    seq: int  # throttle actions issued in this episode (first, renewals, steps)
    issued_ms: int
    lease_until_ms: int
    holders: list[str] = field(default_factory=list)  # incident keys that want it
    # its producer's pressure reports (producer_rates v2): ``pushed`` once a report showed
    # it pushing against the throttle, ``quiet_ms`` since when none has (-1: it pushes)
    pushed: bool = False
    quiet_ms: int = -1


@dataclass(slots=True)
class PolicyState:
    """Everything the policy remembers; plain JSON through ``to_dict``/``from_dict``.

    Bounded: incidents, partition requests and brokers unseen for ``forget_after_s`` are
    forgotten, cooldowns once elapsed, budget entries after a minute, throttles when their
    lease ends. ``skipped_inputs`` counts summaries rejected as malformed (for a metric).
    """

    clock_ms: int = 0
    incidents: dict[str, Incident] = field(default_factory=dict)
    throttles: dict[str, Throttle] = field(default_factory=dict)
    released_ms: dict[str, int] = field(default_factory=dict)
    spreads: dict[str, dict[str, Any]] = field(default_factory=dict)
    scale_hints: dict[str, int] = field(default_factory=dict)
    scale_issued_ms: dict[str, int] = field(default_factory=dict)  # group: hint last published
    partition_requests: dict[str, list[int]] = field(default_factory=dict)  # topic: [total, ms]
    cooldowns: dict[str, int] = field(default_factory=dict)  # "type|target": last issued ms
    budget_ms: list[int] = field(default_factory=list)
    brokers_seen: dict[str, int] = field(default_factory=dict)  # broker id: last seen ms
    halted: dict[str, int] = field(default_factory=dict)  # scope ("all" or group): since ms
    control_ms: dict[str, int] = field(default_factory=dict)  # scope: last halt/resume ms
    skipped_inputs: int = 0
    pruned_ms: int = 0  # last full sweep of stale entries (at most one per PRUNE_EVERY_MS)
    # diagnosis and the ladder (pipeline/decide/remedies.py): per incident key its cause, step and
    # verification; the usual rates per incident key ([produce, consume, samples]); each
    # group's latest health; producer rates by "client|topic": [bytes_per_s, usual, at_ms]
    ladders: dict[str, dict[str, Any]] = field(default_factory=dict)
    baselines: dict[str, list[float]] = field(default_factory=dict)
    health: dict[str, dict[str, Any]] = field(default_factory=dict)
    producer_rates: dict[str, list[float]] = field(default_factory=dict)
    # per incident key: when a partition of it was last seen in STOP (nobody consuming it:
    # a member restarting or gone), so its comeback is waited out as a rebalance's is
    stops_ms: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON; built by hand because ``dataclasses.asdict`` is many times slower."""
        return {
            "v": 1,
            **self._plain(),
            "incidents": {k: [i.above, i.below, i.active, i.since_ms, i.seen_ms]
                          for k, i in self.incidents.items()},
            "throttles": {k: {"rate": t.rate, "since_ms": t.since_ms, "seq": t.seq,
                              "issued_ms": t.issued_ms, "lease_until_ms": t.lease_until_ms,
                              "holders": list(t.holders), "pushed": t.pushed,
                              "quiet_ms": t.quiet_ms} for k, t in self.throttles.items()},
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PolicyState:
        """Rebuild from ``to_dict`` output; missing keys take defaults (older states load)."""
        if data.get("v", 1) != 1:
            raise ValueError(f"policy state v{data.get('v')} is newer than this code (v1)")
        s = cls(**{k: v for k, v in data.items() if k not in ("v", "incidents", "throttles")})
        s = s.copy()  # own every container: the caller's dict may be reused
        s.incidents = {k: Incident(**v) if isinstance(v, dict) else Incident(*v)
                       for k, v in data.get("incidents", {}).items()}  # fmt: skip
        s.throttles = {k: Throttle(**{**v, "holders": list(v["holders"])})
                       for k, v in data.get("throttles", {}).items()}  # fmt: skip
        return s

    def _plain(self) -> dict[str, Any]:
        return {
            "clock_ms": self.clock_ms, "released_ms": dict(self.released_ms),
            "spreads": {k: dict(v) for k, v in self.spreads.items()},
            "scale_hints": dict(self.scale_hints),
            "scale_issued_ms": dict(self.scale_issued_ms),
            "partition_requests": {k: list(v) for k, v in self.partition_requests.items()},
            "cooldowns": dict(self.cooldowns), "budget_ms": list(self.budget_ms),
            "brokers_seen": dict(self.brokers_seen), "halted": dict(self.halted),
            "control_ms": dict(self.control_ms), "skipped_inputs": self.skipped_inputs,
            "pruned_ms": self.pruned_ms,
            "ladders": {k: dict(v) for k, v in self.ladders.items()},
            "baselines": {k: list(v) for k, v in self.baselines.items()},
            "health": dict(self.health),
            "producer_rates": {k: list(v) for k, v in self.producer_rates.items()},
            "stops_ms": dict(self.stops_ms),
        }  # fmt: skip

    def copy(self) -> PolicyState:
        """A copy that ``decide`` may change: containers are new, incidents are replaced on
        write (``decide`` changes only the summary's own), throttles are copied (few)."""
        s = PolicyState(**self._plain())
        s.incidents = dict(self.incidents)
        s.throttles = {k: replace(t, holders=list(t.holders)) for k, t in self.throttles.items()}
        return s


def build_action(
    action_type: str,
    target: str,
    params: dict[str, Any],
    reason: dict[str, Any],
    *,
    mode: str,
    issued_at_ms: int,
    expires_at_ms: int,
    policy_version: str,
    window: Iterable[object],
) -> dict[str, Any]:
    """An unsigned action (``signature`` empty): sign it with ``schemas.sign`` to publish.

    ``window`` identifies the decision (e.g. the incident's start): the same decision
    replayed gets the same id, so actuators apply it once.
    """
    return {
        "event": "action",
        "v": 1,
        "id": stable_id(str(action_type), target, *window),
        "type": str(action_type),
        "target": target,
        "params": params,
        "reason": reason,
        "mode": str(mode),
        "issued_at": issued_at_ms,
        "expires_at": expires_at_ms,
        "policy_version": policy_version,
        "signature": "",
    }


def incident_key(group: str, topic: str) -> str:
    return f"{group}\x00{topic}"
