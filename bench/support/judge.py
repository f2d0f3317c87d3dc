"""What the loop did in a scenario, judged against what the scenario injected (pure).

A scenario knows what it broke: ``Injected(cause, targets)`` for each incident it staged
(the cause in the diagnosis' vocabulary, and the action targets a fitting remedy may touch,
as fnmatch globs: ``"group:g/topic:t/4"``, ``"client-id:agent-x-0"``, ``"group:g"``,
``"topic:t"``). ``ledger`` lists every action the loop issued with its type, target, cause,
mode, the actuator's or workers' outcome and the product's own verdict (its
``verification`` events: never the benchmark's opinion), and says whether it fits:

- an intervention fits when its type is a remedy of the injected cause whose targets
  match its target (``REMEDIES``);
- an undo (``restore_partition``, ``release_producer``) fits when it undoes a target that
  a fitting intervention changed: an undo of a wrong action is not a second wrong action,
  and one that undoes nothing we did is;
- a scenario that injected nothing (``calm``) makes every intervention wrong.

``wrong_actions`` counts interventions that do not fit, once per (type, target): renewals of
one wrong throttle are one wrong decision. ``applied_actions`` counts actions the loop
applied: act mode, and an ``applied`` or ``recorded`` outcome from the actuator, or, for a
consumer-side action the actuator ``delegated`` to the SDK workers, a ``worker_outcome``
from at least one worker instance that did it (``applied_by``): ``delegated`` alone says
the actuator passed it on, not that any worker obeyed (a spread addressed to a group no
worker runs is delegated and changes nothing).
``verified`` is True when every fitting intervention that was applied was judged
``verified`` by the product (a verdict of ``no_effect`` followed by an undo is reported as
``undone``, never as verified), None when nothing was applied.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

#: the action types that remedy each cause (the ladders' steps, docs/policy.md)
REMEDIES: dict[str, frozenset[str]] = {
    "hotspot": frozenset({"spread_partition"}),  # spread, and hand-off to the pool
    "rebalance_storm": frozenset({"spread_partition"}),  # the member's partitions handed off
    "inflow_burst": frozenset({"throttle_producer"}),
    "slow_group": frozenset({"scale_consumers", "add_partitions"}),
    "broker_skew": frozenset({"transfer_leadership"}),
    "stalled": frozenset(),  # alert only
}
#: undo type -> the type it undoes
UNDO: dict[str, str] = {
    "restore_partition": "spread_partition",
    "release_producer": "throttle_producer",
}
#: the actuator's outcomes that mean the action took effect by its hand
APPLIED = frozenset({"applied", "recorded"})
#: the actuator's outcome of a consumer-side action: applied once a worker reports it
DELEGATED = "delegated"


@dataclass(frozen=True)
class Injected:
    """One staged incident: its cause and the targets a fitting remedy may touch (globs)."""

    cause: str
    targets: tuple[str, ...]

    def fits(self, action_type: str, target: str) -> bool:
        return action_type in REMEDIES.get(self.cause, frozenset()) and any(
            fnmatch.fnmatchcase(target, glob) for glob in self.targets
        )


def _verdicts(verifications: Iterable[dict[str, Any]]) -> dict[str, list[str]]:
    """action id -> the product's verdicts that name it (a step's verdict names each of its
    actions in ``action_ids``)."""
    out: dict[str, list[str]] = {}
    for v in verifications:
        ids = v.get("action_ids") or [v.get("action_id")]
        for i in ids:
            if isinstance(i, str):
                out.setdefault(i, []).append(str(v.get("result")))
    return out


def partition_targets(
    group: str, topic: str, partitions: Iterable[int], pool: str | None = None
) -> tuple[str, ...]:
    """The action targets of ``partitions`` of ``topic`` in ``group`` and, with ``pool``, in
    the group a hand-off to that pool consumes them in (``<group>.pool.<pool>``, the SDK's
    ``pool_group_id``): a partition handed off to the pool is judged there from then on."""
    groups = [group] + ([f"{group}.pool.{pool}"] if pool else [])
    return tuple(f"group:{g}/topic:{topic}/{p}" for g in groups for p in partitions)


def ledger(
    actions: Sequence[dict[str, Any]],
    outcomes: Iterable[dict[str, Any]],
    verifications: Iterable[dict[str, Any]],
    injected: Sequence[Injected],
) -> list[dict[str, Any]]:
    """Every action (the control topic's ``action`` events, as issued) with its outcome, the
    product's verdict and whether it fits what was injected (see the module). ``outcomes``:
    the outcomes topic's ``outcome`` events and the workers' ``worker_outcome`` events."""
    results: dict[str, list[str]] = {}
    instances: dict[str, set[str]] = {}
    for o in outcomes:
        if not isinstance(o.get("action_id"), str):
            continue
        if o.get("event") == "worker_outcome":
            instances.setdefault(o["action_id"], set()).add(str(o.get("instance")))
        elif o.get("result"):
            results.setdefault(o["action_id"], []).append(str(o["result"]))
    verdicts = _verdicts(verifications)
    ordered = sorted(actions, key=lambda a: a.get("issued_at", 0))
    fitting_targets: set[tuple[str, str]] = set()
    rows = []
    for a in ordered:
        kind, target = str(a["type"]), str(a["target"])
        reason = a.get("reason") or {}
        if kind in UNDO:
            fits = (UNDO[kind], target) in fitting_targets
        else:
            fits = any(i.fits(kind, target) for i in injected)
            if fits:
                fitting_targets.add((kind, target))
        got = results.get(str(a.get("id")), [])
        said = verdicts.get(str(a.get("id")), [])
        by = len(instances.get(str(a.get("id")), ()))
        took = any(r in APPLIED for r in got) or (DELEGATED in got and by > 0)
        rows.append({
            "at_ms": a.get("issued_at"), "id": a.get("id"), "type": kind, "target": target,
            "mode": a.get("mode"), "cause": reason.get("cause"), "fits": fits,
            "outcome": next((r for r in got if r in APPLIED or r == DELEGATED),
                            got[0] if got else None),
            "applied_by": by, "applied": a.get("mode") == "act" and took,
            "verdict": "verified" if "verified" in said else (said[-1] if said else None),
            "rule": reason.get("rule"), "params": a.get("params"),
            "evidence": reason.get("evidence"),
        })  # fmt: skip
    _mark_undone(rows)
    return rows


def _mark_undone(rows: list[dict[str, Any]]) -> None:
    """An intervention judged ``no_effect`` and undone afterwards reads ``undone``."""
    for i, row in enumerate(rows):
        if row["type"] in UNDO or row["verdict"] != "no_effect":
            continue
        if any(r["type"] in UNDO and UNDO[r["type"]] == row["type"]
               and r["target"] == row["target"] for r in rows[i + 1:]):  # fmt: skip
            row["verdict"] = "undone"


def wrong_actions(rows: Sequence[dict[str, Any]]) -> int:
    """Interventions (not undos) that do not fit, once per (type, target)."""
    return len({(r["type"], r["target"]) for r in rows if not r["fits"] and r["type"] not in UNDO})


def wrong_undos(rows: Sequence[dict[str, Any]]) -> int:
    """Undos of something no fitting intervention changed (reported beside wrong_actions)."""
    return sum(1 for r in rows if r["type"] in UNDO and not r["fits"])


def applied_actions(rows: Sequence[dict[str, Any]]) -> int:
    return sum(1 for r in rows if r["applied"])


def verified(rows: Sequence[dict[str, Any]]) -> bool | None:
    """Every fitting, applied intervention's target was judged ``verified`` by the product
    (on any of its actions: a renewal shares its step's verdict)."""
    applied = {(r["type"], r["target"]) for r in rows
               if r["applied"] and r["fits"] and r["type"] not in UNDO}  # fmt: skip
    if not applied:
        return None
    ok = {(r["type"], r["target"]) for r in rows if r["verdict"] == "verified"}
    return applied <= ok


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The keys every scenario reports from its ledger."""
    return {
        "actions": list(rows),
        "wrong_actions": wrong_actions(rows),
        "wrong_undos": wrong_undos(rows),
        "applied_actions": applied_actions(rows),
        "verified": verified(rows),
    }


def judge_run(
    actions: Sequence[dict[str, Any]],
    reported: Iterable[dict[str, Any]],
    injected: Sequence[Injected],
    start_ms: int = 0,
) -> dict[str, Any]:
    """``summary`` of one run from what it published: the control topic's ``action`` events
    and everything on its outcomes topic (``outcome``, ``worker_outcome``, ``verification``
    events); each row's ``at_ms`` counted from ``start_ms``."""
    events = list(reported)
    done = [e for e in events if e.get("event") in ("outcome", "worker_outcome")]
    said = [e for e in events if e.get("event") == "verification"]
    rows = ledger(actions, done, said, injected)
    for row in rows:
        if isinstance(row["at_ms"], int):
            row["at_ms"] -= start_ms
    return summary(rows)
