"""The kill switch's scopes, and the halts kept in force on a compacted topic.

Two scopes, each explicit (``lagpilot control halt --scope ...``):

- ``actions`` (the default; ``params.group`` narrows it to one consumer group): lagpilot
  stops acting. The actuator applies nothing (global scope only), the policy stops deciding
  (for the group, or for all), and the SDK workers restore their spreads (lanes back to the
  default, hand-offs returned by the pools) and refuse new ones, but keep processing.
- ``workload`` (``params.group`` required): that group's SDK workers pause processing. Nothing
  else changes.

Older events say ``scope: "all"`` (read as ``actions``) or ``scope: <group>`` (``actions``
for that group). A ``resume`` lifts the halt of exactly its own scope.

Every halt and resume is also written to ``lagpilot.halts``, a compacted topic keyed by
``state_key`` (one key per scope), so its latest value per key is the halt state. A worker,
actuator or pipeline that starts later reads it from the beginning (``runtime.halts.read_in_force``)
and obeys what is still in force; the events are signed operator events, verified like any
other, so nobody can forge a state by writing to that topic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

ACTIONS, WORKLOAD = "actions", "workload"
SCOPES = (ACTIONS, WORKLOAD)
LEGACY_ALL = "all"


@dataclass(frozen=True)
class HaltScope:
    kind: str  # ACTIONS or WORKLOAD
    group: str | None  # None: every group (actions only)

    @property
    def state_key(self) -> str:
        """The key on ``lagpilot.halts``: ``actions``, ``actions:<group>``, ``workload:<group>``."""
        return self.kind if self.group is None else f"{self.kind}:{self.group}"

    def covers(self, group: str) -> bool:
        return self.group is None or self.group == group

    def __str__(self) -> str:
        return self.state_key


def halts_topic_for(control_topic: str) -> str:
    """The halts topic that goes with a control topic: ``lagpilot.halts`` for the default
    ``lagpilot.control``, else ``<control topic>.halts`` (so each deployment, and each test
    on a shared broker, keeps its own halt state)."""
    from schemas.topics import CONTROL, HALTS

    return HALTS if control_topic == CONTROL else f"{control_topic}.halts"


def halt_scope(params: Mapping[str, Any]) -> HaltScope:
    """The scope of a (schema-valid) halt or resume's params."""
    scope, group = params.get("scope"), params.get("group")
    group = group if isinstance(group, str) and group else None
    if scope == WORKLOAD:
        return HaltScope(WORKLOAD, group)
    if scope in (ACTIONS, LEGACY_ALL):
        return HaltScope(ACTIONS, group)
    return HaltScope(ACTIONS, str(scope))  # legacy: a group name


def halt_params(scope: str, group: str | None) -> dict[str, str]:
    """Params of a halt/resume from the CLI's ``--scope`` and ``--group``; ValueError with
    the fix for a combination that means nothing."""
    if scope == LEGACY_ALL:
        scope = ACTIONS
    if scope not in SCOPES:
        if group:
            raise ValueError(f"--scope {scope!r}: use --scope actions or --scope workload")
        scope, group = ACTIONS, scope  # the older --scope <group>
    if scope == WORKLOAD and not group:
        raise ValueError(
            "--scope workload pauses one group's processing: pass --group G (to stop "
            "lagpilot acting everywhere, use --scope actions)"
        )
    return {"scope": scope, **({"group": group} if group else {})}


def in_force(events: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The halts still in force after ``events`` (verified halts and resumes, in order): the
    last event per scope, when it is a halt."""
    last: dict[str, Mapping[str, Any]] = {}
    for event in events:
        params = event.get("params")
        if event.get("type") in ("halt", "resume") and isinstance(params, Mapping):
            last[halt_scope(params).state_key] = event
    return [e for e in last.values() if e.get("type") == "halt"]
