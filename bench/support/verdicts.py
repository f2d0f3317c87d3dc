"""What the incident suite reads back from a run: the remedy, its verdicts, and the merge of
scenario results into one ``incidents.json`` (support for bench/incidents.py; no I/O but
the results file).

``verified`` is judged per target that the policy changed (a partition spread, a producer
throttled, a leader moved...): the policy's ``verification`` events on the run's outcomes
topic must say ``verified`` for it, or the target must have been undone afterwards (a
``restore_partition``/``release_producer``, or a hand-off that replaced a spread that had
no effect). ``None`` when nothing was applied at all.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import orjson

#: action types that undo a standing decision (they are not verified themselves)
UNDO = {"restore_partition": "spread_partition", "release_producer": "throttle_producer"}
#: action types that are not changes to verify (control of lagpilot itself)
NOT_VERIFIED = {"halt", "resume", *UNDO}


def remedy_of(actions: list[dict[str, Any]]) -> list[str]:
    """Action types in the order they were first issued (repeats, e.g. renewals, once)."""
    seen: list[str] = []
    for a in sorted(actions, key=lambda a: a["at_ms"]):
        if a["type"] not in seen:
            seen.append(a["type"])
    return seen


def verified_of(actions: list[dict[str, Any]], verifications: list[dict[str, Any]]) -> bool | None:
    """True if every target an action changed ended verified or undone (see the module)."""
    changed = {a["target"] for a in actions if a["type"] not in NOT_VERIFIED}
    if not changed:
        return None
    return all(target_verdict(t, actions, verifications) != "open" for t in changed)


def target_verdict(
    target: str, actions: list[dict[str, Any]], verifications: list[dict[str, Any]]
) -> str:
    """``verified``, ``undone`` (no effect, then restored/released or handed off), or
    ``open`` (applied, never judged: the target misses its verdict). A step that changed
    several targets at once (a hand-off of a storm member's partitions, a throttle of
    several client ids) is judged once: its verdict names every action in ``action_ids``
    and covers each of their targets."""
    ids = {a["id"] for a in actions if a["target"] == target and "id" in a}
    verdicts = [
        v
        for v in verifications
        if v.get("target") == target or ids & set(v.get("action_ids") or ())
    ]
    if any(v.get("result") == "verified" for v in verdicts):
        return "verified"
    undone = [a for a in actions if a["target"] == target and a["type"] in UNDO]
    if undone:
        return "undone"
    return "open"


def verdicts_by_target(
    actions: list[dict[str, Any]], verifications: list[dict[str, Any]]
) -> dict[str, str]:
    changed = sorted({a["target"] for a in actions if a["type"] not in NOT_VERIFIED})
    return {t: target_verdict(t, actions, verifications) for t in changed}


def git_commit(root: Path) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10, check=True)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def merge_results(
    out: Path, scenarios: dict[str, dict[str, Any]], *, commit: str | None
) -> dict[str, Any]:
    """Write ``scenarios`` into ``out`` under ``scenarios.<name>``, keeping the entries of
    scenarios not run this time (another module writes them). Each entry carries its own
    ``measured_at`` (UTC) and ``commit``; a file that is not a results file is replaced."""
    try:
        old = orjson.loads(out.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        old = {}
    result: dict[str, Any] = old if isinstance(old, dict) else {}
    kept = result.get("scenarios")
    result["scenarios"] = dict(kept) if isinstance(kept, dict) else {}
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for name, summary in scenarios.items():
        result["scenarios"][name] = {**summary, "measured_at": stamp, "commit": commit}
    result.pop("took_s", None)  # each scenario has its own
    out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    return result


def p99_tail(
    rows: list[tuple[str, int, int, int, int]],
    hot: set[int],
    spread_at_ms: dict[int, int],
) -> dict[str, Any]:
    """Where a run's p99 goes: the messages slower than its p99, split by where they were.

    ``rows`` are the ledger's (id, partition, heavy, produced_ms, done_ms); ``spread_at_ms``
    the absolute time each partition's spread was issued. ``hot_before_spread``: on a hot
    partition, produced before its spread (the time to detect and act); ``hot_after_spread``:
    on a hot partition after it (the spread's own capacity); ``other_partitions``: collateral
    (shared worker threads, the machine)."""
    if not rows:
        return {}
    import numpy as np

    latency = np.array([r[4] - r[3] for r in rows], dtype=np.float64)
    p99 = float(np.percentile(latency, 99))
    slow = [r for r in rows if r[4] - r[3] > p99]
    out = {"p99_ms": round(p99, 1), "slower_than_p99": len(slow),
           "heavy": sum(1 for r in slow if r[2]),
           "hot_before_spread": 0, "hot_after_spread": 0, "other_partitions": 0}  # fmt: skip
    for r in slow:
        if r[1] not in hot:
            out["other_partitions"] += 1
        elif r[1] in spread_at_ms and r[3] >= spread_at_ms[r[1]]:
            out["hot_after_spread"] += 1
        else:
            out["hot_before_spread"] += 1
    return out


def action_row(a: dict[str, Any], start_ms: int) -> dict[str, Any]:
    """An action as a scenario reports it (times from the run's start)."""
    reason = a.get("reason") or {}
    return {"at_ms": a["issued_at"] - start_ms, "id": a["id"], "type": a["type"],
            "target": a["target"], "mode": a["mode"], "params": a["params"],
            "cause": reason.get("cause"), "rule": reason.get("rule"),
            "evidence": reason.get("evidence")}  # fmt: skip


def verdict_row(v: dict[str, Any], start_ms: int) -> dict[str, Any]:
    """A ``verification`` event as a scenario reports it; ``action_ids``: every action of
    the step it judges."""
    return {"at_ms": v["at"] - start_ms, "target": v.get("target"),
            "action_ids": v.get("action_ids") or [v["action_id"]],
            "action_type": v["action_type"], "result": v["result"],
            "cause": v["cause"], "step": v["step"], "why": v["why"],
            "time_lag_at_apply_s": v["time_lag_at_apply_s"],
            "time_lag_now_s": v["time_lag_now_s"]}  # fmt: skip


def outcome_rows(reported: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The actuator's ``outcome`` events of a run as a scenario reports them."""
    return [
        {"result": o["result"], "type": o.get("action_type"), "action_id": o.get("action_id")}
        for o in reported
        if o.get("event") == "outcome"
    ]


def verdict_rows(reported: list[dict[str, Any]], start_ms: int) -> list[dict[str, Any]]:
    """The policy's ``verification`` events of a run (see ``verdict_row``)."""
    return [verdict_row(v, start_ms) for v in reported if v.get("event") == "verification"]


def timeline(events: list[dict[str, Any]], start_ms: int) -> list[list[Any]]:
    """``partition_lag`` events as ``[ms since the start, partition, time lag s]`` (what the
    plots draw, bench.support.plots.time_lag_lines)."""
    return [[e["observed_at_ms"] - start_ms, e["partition"], e["time_lag_s"]] for e in events]
