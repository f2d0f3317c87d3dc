"""What a scenario reads from a group's ``group_health`` events (lagpilot.lag): how often the
coordinator rebalanced it, and which partitions the members that died held (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any


def rebalances(health: Sequence[dict[str, Any]], start_ms: int, end_ms: int) -> int:
    """Generation moves the coordinator made between ``start_ms`` and ``end_ms``."""
    gens = sorted((e["observed_at_ms"], e["generation"]) for e in health if e["generation"] >= 0)
    before = [g for t, g in gens if t <= start_ms]
    within = [g for t, g in gens if start_ms < t <= end_ms]
    if not within:
        return 0
    return max(within) - (before[-1] if before else min(within))


def held_at_death(
    health: Sequence[dict[str, Any]], topic: str, deaths: Iterable[tuple[int, str]]
) -> set[int]:
    """The partitions of ``topic`` that each dead member held when it died: its assignment
    in the last ``group_health`` event before its death (``deaths``: (epoch ms, client id))
    that lists it. A member killed by what it processes held these partitions; the
    coordinator moves them all, and the product's remedy for the member that keeps leaving
    names them."""
    ordered = sorted(health, key=lambda e: e["observed_at_ms"])
    held: set[int] = set()
    for at_ms, client_id in deaths:
        last: list[int] | None = None
        for e in ordered:
            if e["observed_at_ms"] > at_ms:
                break
            for m in e.get("members") or ():
                if m.get("client_id") == client_id:
                    last = [p for a in m["assignment"] if a.get("topic") == topic
                            for p in a["partitions"]]  # fmt: skip
        held.update(last or ())
    return held
