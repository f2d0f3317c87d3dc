"""What a benchmark's handlers logged, judged once: handled, duplicates, key-order violations,
and the rate from the first handled message to the last (pure)."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Handled:
    handled: int  # distinct (key, sequence) pairs
    duplicates: int  # a pair logged again
    order_violations: int  # a key's sequence logged after a later one of the same key
    records_per_s: float

    def lost(self, expected: int) -> int:
        return expected - self.handled


def judge(entries: Iterable[tuple[int, Hashable, int]]) -> Handled:
    """``entries``: (time in ns, key, the key's sequence number) per handled message."""
    ordered = sorted(entries)
    seen: set[tuple[Hashable, int]] = set()
    last: dict[Hashable, int] = {}
    duplicates = order_violations = 0
    for _t, key, seq in ordered:
        if (key, seq) in seen:
            duplicates += 1
            continue
        seen.add((key, seq))
        if last.get(key, -1) > seq:
            order_violations += 1
        last[key] = max(seq, last.get(key, -1))
    span_s = (ordered[-1][0] - ordered[0][0]) / 1e9 if len(ordered) > 1 else 1e-9
    return Handled(len(seen), duplicates, order_violations, round(len(seen) / max(span_s, 1e-9), 1))
