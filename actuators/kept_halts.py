"""The actuator's side of the kept halt state (schemas/halts.py): at start, a global
``actions`` halt on the halts topic that is newer than what the outcomes say holds here too.

Why: an actuator rebuilds its kill switch from ``lagpilot.outcomes``, where an actuator
records each halt it applied. A halt issued while no actuator ran has no outcome; it is kept
on the halts topic, signed by the operator, and verified here like any action.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runtime.halts import read_in_force
from schemas import EventError, Verifier, validate, verify
from schemas.halts import ACTIONS, HaltScope, halt_scope, halts_topic_for


def kept_global_halt_ms(
    config: Mapping[str, Any], control_topic: str, verifier: Verifier
) -> int | None:
    """``issued_at`` of the global actions halt in force on the halts topic, or None."""

    def accept(event: dict[str, Any]) -> dict[str, Any] | None:
        try:
            validate(event)
            verify(event, verifier)
        except EventError:
            return None
        return event

    found = [
        int(halt["issued_at"])
        for halt in read_in_force(config, halts_topic_for(control_topic), accept)
        if halt_scope(halt["params"]) == HaltScope(ACTIONS, None)
    ]
    return max(found) if found else None
