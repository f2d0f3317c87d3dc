"""The stateful operator that runs the policy inside Quix Streams, on one key.

Every ``group_lag`` summary and every halt/resume from ``lagpilot.control`` arrives under
the single key ``POLICY_KEY``, so one replica decides with one state: the global action
budget, cooldowns and throttles it issued survive restarts in the state store. Actions
leave signed; halt/resume events are verified before they move the kill switch.
"""

from __future__ import annotations

import logging
from typing import Any

from pipeline.policy import PolicyState, apply_control, decide
from pipeline.policy_config import PolicyConfig
from schemas import EventError, group_lag_from_dict, sign, validate, verify

log = logging.getLogger(__name__)

POLICY_KEY = "policy"


class PolicyOperator:
    """``sdf.apply(PolicyOperator(...), stateful=True, metadata=True, expand=True)``."""

    def __init__(self, config: PolicyConfig, signing_key: bytes, metrics: Any = None) -> None:
        self.config = config
        self._key = signing_key
        self.metrics = metrics
        self.rejected_control = 0

    def __call__(
        self, value: Any, key: Any, timestamp: int, headers: Any, state: Any
    ) -> list[dict[str, Any]]:
        if not isinstance(value, dict):
            return []
        raw = state.get("state")
        current = PolicyState.from_dict(raw) if raw else PolicyState()
        if value.get("event") == "action":
            try:
                validate(value)
                verify(value, self._key)
            except EventError as exc:
                self.rejected_control += 1
                log.warning("ignored a %s on the control topic: %s", value.get("type"), exc)
                return []
            new = apply_control(current, value, max(timestamp, current.clock_ms))
            if new is not current:
                state.set("state", new.to_dict())
                if self.metrics is not None:
                    self.metrics.policy_halted.set(1 if new.halted else 0)
            return []
        if value.get("event") != "group_lag":
            return []
        summary = group_lag_from_dict(value)
        actions, new = decide(summary, current, self.config, summary.observed_at_ms)
        if new != current:
            state.set("state", new.to_dict())
        signed = [sign(a, self._key) for a in actions]
        if self.metrics is not None:
            for a in signed:
                self.metrics.actions.labels(a["type"], a["mode"]).inc()
        for a in signed:
            log.info(
                "action %s %s on %s (%s): %s",
                a["mode"],
                a["type"],
                a["target"],
                a["id"],
                a["reason"],
            )
        return signed
