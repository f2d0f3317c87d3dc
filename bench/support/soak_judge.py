"""The soak's verdicts (pure): what each incident was seen as, the false alarms, the RSS
growth and the detection percentiles, from what the soak recorded.

A *cell* is a (group, topic, partition). An incident names the cells it troubles
(``Incident.cells``): a stall every cell of its group, a hotspot one partition in every
group that reads it, a flood every partition of one topic in every group. A non-OK
``partition_lag`` status for a cell is expected from the incident's injection until it
recovered (every troubled cell back to OK) plus ``GRACE_S``; any other is a false alarm.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: after an incident ends its cells may take this long to be judged OK again (the backlog
#: drains at the consumers' spare capacity)
GRACE_S = 60.0
#: an incident not seen within its own length plus this is missed
DETECT_WITHIN_S = 30.0
#: the last ten minutes' detection p99 may exceed the first ten's by this factor, plus
#: ``P99_SLACK_S`` (one sample interval and a commit interval: a p99 of a few incidents)
P99_FACTOR = 1.5
P99_SLACK_S = 0.5
RSS_GROWTH_TARGET_PCT = 10.0

Cell = tuple[str, str, int]


@dataclass
class Incident:
    kind: str  # stall | hotspot | flood
    injected_at: float  # epoch s
    ended_at: float | None  # epoch s, None while on
    cells: frozenset[Cell]
    target: dict[str, Any] = field(default_factory=dict)  # group / topic / partition

    def covers(self, cell: Cell, t: float) -> bool:
        end = (self.ended_at or float("inf")) + GRACE_S
        return self.injected_at <= t <= end and cell in self.cells


@dataclass(frozen=True)
class StatusEvent:
    """One ``partition_lag`` status as the soak received it."""

    received: float  # epoch s
    cell: Cell
    status: str


def verdict(
    inc: Incident, events: list[StatusEvent], actions: list[dict[str, Any]], recovered_by: float
) -> dict[str, Any]:
    """One incident's verdict: when it was seen, the policy's first action for it (an
    action whose ``_about``, its target and reason as text, names one of the incident's
    groups or topics: names of equal length, so none is a prefix of another), and whether
    every cell it troubled was judged OK again (by ``recovered_by``)."""
    mine = [e for e in events if e.cell in inc.cells and e.received >= inc.injected_at]
    bad = [e for e in mine if e.status != "OK"]
    first = bad[0].received if bad else None
    detect_by = (inc.ended_at or inc.injected_at) + DETECT_WITHIN_S
    detected = first is not None and first <= detect_by
    last_status: dict[Cell, StatusEvent] = {}
    for e in mine:
        if e.received <= recovered_by:
            last_status[e.cell] = e
    troubled = {e.cell for e in bad}
    recovered = bool(troubled) and all(last_status[c].status == "OK" for c in troubled)
    recovered_at = max((last_status[c].received for c in troubled), default=None)
    names = {c[0] for c in inc.cells} | {c[1] for c in inc.cells}
    taken = [
        a
        for a in actions
        if inc.injected_at <= a.get("_received", 0) <= (inc.ended_at or inc.injected_at) + GRACE_S
        and any(n in a.get("_about", "") for n in names)
    ]
    return {
        "kind": inc.kind,
        "target": inc.target,
        "injected_at": round(inc.injected_at, 3),
        "ended_at": round(inc.ended_at, 3) if inc.ended_at else None,
        "cells": len(inc.cells),
        "detected": detected,
        "detected_after_s": round(first - inc.injected_at, 3) if detected and first else None,
        "cells_seen_not_ok": len(troubled),
        "action": taken[0].get("type") if taken else None,
        "actions": sorted({str(a.get("type")) for a in taken}),
        "recovered": recovered,
        "recovered_after_end_s": (
            round(recovered_at - inc.ended_at, 3)
            if recovered and recovered_at is not None and inc.ended_at
            else None
        ),
    }


def false_alarms(events: Iterable[StatusEvent], incidents: list[Incident]) -> list[StatusEvent]:
    """Non-OK statuses that no incident explains."""
    return [
        e
        for e in events
        if e.status != "OK" and not any(i.covers(e.cell, e.received) for i in incidents)
    ]


def p99(values: list[float]) -> float | None:
    return round(float(np.percentile(np.array(values), 99)), 3) if values else None


def windows(duration_s: float, warmup_s: float, window_s: float) -> dict[str, tuple[float, float]]:
    """The soak's windows in seconds from its start: ``first`` (right after the warm-up)
    and ``last`` (the end), each ``window_s`` long, never overlapping."""
    window_s = min(window_s, max(1.0, (duration_s - warmup_s) / 2))
    return {
        "first": (warmup_s, warmup_s + window_s),
        "last": (duration_s - window_s, duration_s),
    }


def rss_growth_pct(
    samples: list[tuple[float, int]], first: tuple[float, float], last: tuple[float, float]
) -> dict[str, Any]:
    """The last window's median RSS against the first window's, in percent; ``samples``
    are (seconds from start, bytes)."""
    a = [b for t, b in samples if first[0] <= t < first[1]]
    z = [b for t, b in samples if last[0] <= t <= last[1]]
    if not a or not z:
        return {"rss_growth_pct": None, "rss_first_mib": None, "rss_last_mib": None}
    m0, m1 = statistics.median(a), statistics.median(z)
    return {
        "rss_growth_pct": round((m1 - m0) / m0 * 100, 2),
        "rss_first_mib": round(m0 / 2**20, 1),
        "rss_last_mib": round(m1 / 2**20, 1),
    }


def detection(
    verdicts: list[dict[str, Any]], t0: float, wins: dict[str, tuple[float, float]]
) -> dict[str, Any]:
    """Detection p99 over every incident, and over those injected in each window."""

    def seen(lo: float, hi: float) -> list[float]:
        return [
            v["detected_after_s"]
            for v in verdicts
            if v["detected_after_s"] is not None and lo <= v["injected_at"] - t0 < hi
        ]

    first, last = seen(*wins["first"]), seen(*wins["last"])
    p_first, p_last = p99(first), p99(last)
    return {
        "detection_p99_s": p99(seen(float("-inf"), float("inf"))),
        "detection_p99_first_s": p_first,
        "detection_p99_last_s": p_last,
        "incidents_first_window": len(first),
        "incidents_last_window": len(last),
        "detection_held": (
            None
            if p_first is None or p_last is None
            else p_last <= p_first * P99_FACTOR + P99_SLACK_S
        ),
    }


def targets_met(result: dict[str, Any]) -> dict[str, bool | None]:
    growth = result.get("rss_growth_pct")
    return {
        "rss_growth": None if growth is None else growth < RSS_GROWTH_TARGET_PCT,
        "false_alarms": result["false_alarms"] == 0,
        "missed_incidents": result["missed_incidents"] == 0,
        "detection_p99_held": result.get("detection_held"),
    }
