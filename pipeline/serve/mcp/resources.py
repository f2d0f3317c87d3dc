"""The resources ``lagpilot mcp`` serves: the runbook, the current policy, the schemas."""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

from pipeline.decide.policy_config import PolicyConfig

RUNBOOK = Path(__file__).resolve().parents[3] / "docs" / "runbook.md"


def policy_view(cfg: PolicyConfig, path: str | None) -> dict[str, Any]:
    """The rails a request meets, as the decide stage reads them from the same file."""
    return {
        "file": path,
        "mode": str(cfg.mode),
        "policy_version": cfg.policy_version,
        "enabled": sorted(cfg.enabled),
        "actions_per_minute": cfg.actions_per_minute,
        "cooldown_default_s": cfg.cooldown_default_s,
        "cooldowns_s": dict(cfg.cooldowns_s),
        "allow": {
            "throttle_client_ids": list(cfg.throttle_client_ids),
            "partition_topics": list(cfg.partition_topics),
        },
        "throttle_floor_bytes_per_s": cfg.throttle_floor_bytes_per_s,
        "throttle_lease_s": cfg.throttle_lease_s,
        "action_ttl_s": cfg.action_ttl_s,
        "thresholds": {
            k: getattr(cfg.default_thresholds, k)
            for k in (
                "time_lag_s",
                "offset_lag",
                "accel_per_s2",
                "exit_ratio",
                "enter_windows",
                "exit_windows",
            )
        },
        "diagnose": cfg.diagnose,
    }


def add_resources(mcp: Any, policy: PolicyConfig, policy_path: str | None) -> None:
    """The runbook, the policy (as the decide stage reads it) and every event schema."""

    def runbook() -> str:
        try:
            return RUNBOOK.read_text(encoding="utf-8")
        except OSError:
            return f"the runbook is docs/runbook.md in lagpilot's repository ({RUNBOOK} absent)"

    def policy_resource() -> str:
        return orjson.dumps(policy_view(policy, policy_path)).decode()

    _resource(mcp, "runbook", "text/markdown",
              "lagpilot's runbook: alerts, what they mean, what to do", runbook)  # fmt: skip
    _resource(mcp, "policy", "application/json",
              "the policy the decide stage applies: mode, rails, allow-lists",
              policy_resource)  # fmt: skip
    for entry in sorted(resources.files("schemas").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".json"):
            _schema_resource(mcp, entry.name, entry.read_text(encoding="utf-8"))


def _schema_resource(mcp: Any, name: str, text: str) -> None:
    kind = name.split(".")[0]
    _resource(mcp, f"schemas/{name}", "application/schema+json",
              f"JSON Schema of lagpilot's {kind} event", lambda: text,
              name=name.removesuffix(".json"))  # fmt: skip


def _resource(
    mcp: Any,
    path: str,
    mime_type: str,
    description: str,
    read: Callable[[], str],
    name: str | None = None,
) -> None:
    """Serve ``read()`` at ``lagpilot://<path>``, named ``name`` (by default ``path``)."""
    uri = f"lagpilot://{path}"
    mcp.resource(uri, name=name or path, mime_type=mime_type, description=description)(read)
