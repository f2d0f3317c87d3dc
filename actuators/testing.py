"""Test helpers shipped with the actuator: build signed control events like the policy does.

Used by the actuator's tests and its benchmark; plain functions over dicts, no I/O.
"""

from __future__ import annotations

import uuid
from typing import Any

from schemas import sign


def action(
    kind: str,
    target: str,
    params: dict[str, Any],
    *,
    key: bytes,
    now_ms: int,
    mode: str = "act",
    ttl_ms: int = 60_000,
    action_id: str | None = None,
) -> dict[str, Any]:
    """A signed, schema-valid action event (``action.v1.json``)."""
    return sign(
        {
            "event": "action",
            "v": 1,
            "id": action_id or uuid.uuid4().hex,
            "type": kind,
            "target": target,
            "params": params,
            "reason": {"test": True},
            "mode": mode,
            "issued_at": now_ms,
            "expires_at": now_ms + ttl_ms,
            "policy_version": "test",
            "signature": "",
        },
        key,
    )


def throttle(
    name: str,
    bytes_per_s: int,
    *,
    key: bytes,
    now_ms: int,
    lease_s: float = 60.0,
    entity: str = "client-id",
    **kw: Any,
) -> dict[str, Any]:
    params = {"entity": entity, "name": name, "producer_byte_rate": bytes_per_s, "lease_s": lease_s}
    return action("throttle_producer", f"{entity}:{name}", params, key=key, now_ms=now_ms, **kw)


def release(
    name: str, *, key: bytes, now_ms: int, entity: str = "client-id", **kw: Any
) -> dict[str, Any]:
    params = {"entity": entity, "name": name}
    return action("release_producer", f"{entity}:{name}", params, key=key, now_ms=now_ms, **kw)


def halt(*, key: bytes, now_ms: int, scope: str = "all", **kw: Any) -> dict[str, Any]:
    return action("halt", f"scope:{scope}", {"scope": scope}, key=key, now_ms=now_ms, **kw)


def resume(*, key: bytes, now_ms: int, scope: str = "all", **kw: Any) -> dict[str, Any]:
    return action("resume", f"scope:{scope}", {"scope": scope}, key=key, now_ms=now_ms, **kw)
