"""One decision's context: the summary, the config, the state being built, the actions so far.

``Ctx.emit`` is where every rail that applies to a single action is checked in one place
(enabled types, cooldowns, the budget); ``Ctx.reason`` writes the numbers behind a decision.
The rules (``pipeline.decide.rules``) and the remedy ladders (``pipeline.decide.remedies``)
emit through it; ``pipeline.decide.policy.decide`` builds one per summary.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pipeline.decide.policy_config import PolicyConfig, Thresholds
from pipeline.decide.state import (
    BUDGET_WINDOW_MS,
    THRESHOLD_KEYS,
    Incident,
    PolicyState,
    build_action,
)
from schemas import ActionType, GroupLag


@dataclass(slots=True)
class Ctx:
    summary: GroupLag
    config: PolicyConfig
    state: PolicyState
    now: int
    thresholds: Thresholds
    incident: Incident
    key: str
    actions: list[dict[str, Any]] = field(default_factory=list)
    diagnosis: dict[str, Any] | None = None  # {"cause", "evidence"} when diagnosing

    def budget_left(self) -> bool:
        recent = [t for t in self.state.budget_ms if t > self.now - BUDGET_WINDOW_MS]
        return len(recent) < self.config.actions_per_minute

    def cooling(self, action_type: str, target: str) -> bool:
        last = self.state.cooldowns.get(f"{action_type}|{target}")
        cooldown_ms = self.config.cooldown_s(action_type) * 1000
        return last is not None and self.now - last < cooldown_ms

    def emit(
        self,
        action_type: ActionType,
        target: str,
        params: dict[str, Any],
        reason: dict[str, Any],
        window: Iterable[object],
        *,
        budgeted: bool = True,
        cooled: bool = True,
        also_cools: tuple[str, ...] = (),
        mode: str | None = None,
    ) -> bool:
        """Append the action if every gate passes; record its cooldowns and budget use."""
        if str(action_type) not in self.config.enabled:
            return False
        if cooled and any(self.cooling(action_type, t) for t in (target, *also_cools)):
            return False
        if budgeted and not self.budget_left():
            return False
        if cooled:
            for t in (target, *also_cools):
                self.state.cooldowns[f"{action_type}|{t}"] = self.now
        if budgeted:
            self.state.budget_ms.append(self.now)
        cfg, expires = self.config, self.now + int(self.config.action_ttl_s * 1000)
        reason = {**reason, "budgeted": budgeted}
        self.actions.append(build_action(action_type, target, params, reason,
            mode=mode or cfg.mode,
            issued_at_ms=self.now, expires_at_ms=expires, policy_version=cfg.policy_version,
            window=window))  # fmt: skip
        return True

    def reason(self, rule: str, **extra: Any) -> dict[str, Any]:
        """The numbers behind a decision, as an on-call engineer would want to read them."""
        s, t = self.summary, self.thresholds
        return {
            "rule": rule,
            "group": s.group,
            "topic": s.topic,
            "status": str(s.status),
            "time_lag_s": round(s.max_time_lag_s, 3),
            "offset_lag": s.total_lag_offsets,
            "lag_rate_per_s": round(s.lag_rate_per_s, 3),
            "accel_per_s2": round(accel(s), 3),
            "thresholds": {k: getattr(t, k) for k in THRESHOLD_KEYS},
            "incident_since_ms": self.incident.since_ms,
            **(self.diagnosis or {}),
            **extra,
        }


def accel(s: GroupLag) -> float:
    """The steepest lag acceleration among the worst partitions (0 when none)."""
    return max((w.lag_accel_per_s2 for w in s.worst), default=0.0)
