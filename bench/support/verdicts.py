"""What the incident suite reads back from a run and how it records it: the remedy, the
product's verdicts and outcomes as rows, where a run's p99 went, time-lag timelines, and
the merge of scenario results into one ``incidents.json`` (support for bench/incidents/__main__.py;
no I/O but the results file). Whether an action fits what a scenario injected, was applied
and was verified is bench/support/judge.py's.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from bench.support.machine import load_avg_1m
from bench.support.results import write_result


def remedy_of(actions: list[dict[str, Any]]) -> list[str]:
    """Action types in the order they were first issued (repeats, e.g. renewals, once)."""
    seen: list[str] = []
    for a in sorted(actions, key=lambda a: a["at_ms"]):
        if a["type"] not in seen:
            seen.append(a["type"])
    return seen


def merge_results(
    out: Path,
    scenarios: dict[str, dict[str, Any]],
    *,
    commit: str | None,
    loads: Mapping[str, tuple[float, float]] | None = None,
    stamp: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``scenarios`` into ``out`` under ``scenarios.<name>``, keeping the entries of
        scenarios not run this time (another module writes them). Each entry carries its own
        ``measured_at`` (UTC), ``commit`` and ``load_avg_1m`` ({start, end}: the host's 1-minute
        load average when the scenario started and ended, from ``loads``; its end is taken now
        when only its start is known); a file that is not a results file is replaced. The file is
    written by ``bench.support.results.write_result`` (with ``stamp``: the run's)."""
    try:
        old = orjson.loads(out.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        old = {}
    result: dict[str, Any] = old if isinstance(old, dict) else {}
    kept = result.get("scenarios")
    result["scenarios"] = dict(kept) if isinstance(kept, dict) else {}
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for name, summary in scenarios.items():
        start, end = (loads or {}).get(name, (None, None))
        load = {"start": start, "end": load_avg_1m() if end is None else end}
        result["scenarios"][name] = {**summary, "measured_at": at, "commit": commit,
                                     "load_avg_1m": load}  # fmt: skip
    result.pop("took_s", None)  # each scenario has its own
    return write_result(out, result, stamp)


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
