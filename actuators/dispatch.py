"""An action to its backend operation, and the one retry layer around it.

The runner owns an action's retry budget: :func:`with_retries` is the only loop that
retries a backend call, and the clients under it (the Redpanda Admin API transport, the
Kafka admin calls) are built not to retry on their own, so an action makes at most
``max_retries + 1`` tries however many layers it passes through.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from actuators.backends import Backend
from actuators.errors import ActuatorError
from runtime.backoff import jittered_s
from schemas import ActionType

__all__ = ["dispatch", "with_retries"]


def dispatch(backend: Backend, action: dict[str, Any]) -> str:
    """Call the backend operation an action names; returns what was done."""
    p = action["params"]
    kind = action["type"]
    if kind == ActionType.THROTTLE_PRODUCER:
        return backend.throttle(p["entity"], p["name"], int(p["producer_byte_rate"]))
    if kind == ActionType.RELEASE_PRODUCER:
        return backend.release(p["entity"], p["name"])
    if kind == ActionType.ADD_PARTITIONS:
        return backend.add_partitions(p["topic"], int(p["total"]))
    if kind == ActionType.TRANSFER_LEADERSHIP:
        return backend.transfer_leadership(p["topic"], int(p["partition"]), int(p["target_broker"]))
    raise ActuatorError(f"no backend operation for {kind!r}", retriable=False)


def with_retries(
    op: Callable[[], str],
    *,
    max_retries: int,
    base_s: float,
    cap_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Run ``op``; on a retriable ActuatorError retry with capped exponential backoff and
    full jitter, at most ``max_retries`` times; then the last error propagates."""
    attempt = 0
    while True:
        try:
            return op()
        except ActuatorError as exc:
            if not exc.retriable or attempt >= max_retries:
                raise
            sleep(jittered_s(attempt, base_s, cap_s))
            attempt += 1
