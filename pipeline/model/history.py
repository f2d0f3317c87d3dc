"""The HWM history of a topic: when did a partition's high watermark pass offset c?

Pure (numpy, ``now_ms`` passed in). A topic's history is a table of rows (sample time,
every partition's HWM), oldest first. Time lag reads it backwards: the message at offset c
was written when the HWM went from <= c to c + 1, so it was written between the last row
with HWM <= c and the first row with HWM > c. Whatever is guessed inside that gap, the error
is at most the gap. ``compact`` keeps every gap within a bound that grows with age:

    gap between two neighbouring rows <= max(min_gap_s, error_ratio x age of the newer row)

so the time lag of any offset the history covers is off by at most
``max(min_gap_s, error_ratio x time lag)`` (1 s or 1 %, with the defaults), plus the sample
interval for the youngest rows, which are all kept (``full_rate_s``). Rows where nothing
moved between both neighbours carry no information and go whatever their age (an idle
topic costs almost no rows). Ages grow and bounds only loosen, so a gap that was within its
bound stays within it: the bound holds for every row, however often the table is
compacted. The number of rows this needs is about ``2 x (H_min + ln(horizon / H_min) /
error_ratio)`` at most, with ``H_min = min_gap_s / error_ratio``: about 1,500 rows for a
24 h horizon (docs/lag-model.md states the memory).

Three ways a time lag is obtained (``SOURCE_NAMES``): interpolated in the history (within
the bound); read (the timestamp of the record at the committed offset, fetched by an edge
and fed in as plain data: exact); extrapolated beyond the oldest row at the table's mean
produce rate (no bound: a freshly started pipeline, a lag older than the horizon).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CAUGHT_UP, INTERPOLATED, READ, EXTRAPOLATED = 0, 1, 2, 3
SOURCE_NAMES = ("caught_up", "interpolated", "read", "extrapolated")
#: ``first_beyond`` looks among the last this many rows (2 s of 250 ms samples) first
RECENT_ROWS = 8


@dataclass(frozen=True, slots=True)
class HistoryBound:
    """How close the history keeps its rows; see the module docstring for the bound."""

    full_rate_s: float = 10.0  # every sample younger than this is kept
    min_gap_s: float = 1.0
    error_ratio: float = 0.01
    horizon_s: float = 86_400.0  # rows older than this go (lag beyond: read or extrapolated)
    max_rows: int = 4096  # a hard cap; reached only with a bound tighter than the defaults

    def gap_ms(self, age_ms: np.ndarray) -> np.ndarray:
        """The widest gap allowed before a row of age ``age_ms``."""
        return np.maximum(self.min_gap_s * 1000.0, self.error_ratio * age_ms)

    def error_s(self, time_lag_s: float) -> float:
        """The bound on the error of an interpolated time lag, sample interval aside."""
        return max(self.min_gap_s, self.error_ratio * time_lag_s)


def compact(t_ms: np.ndarray, hw: np.ndarray, now_ms: int, bound: HistoryBound) -> np.ndarray:
    """Which rows to keep (a bool mask): drop what the bound allows, never a young row,
    never the newest. ``t_ms`` ascending; ``hw`` (rows x partitions) non-decreasing down
    each column.

    A row may go when the gap it leaves (between its two neighbours) is within the bound at
    the newer neighbour's age, or when no partition moved between its neighbours. Two
    neighbouring rows never go in the same pass (each merge was checked against rows that
    stay), so a few alternating passes per call, repeated as rows age, reach a table where
    no row can go: every two neighbouring gaps together exceed the bound.
    """
    n = len(t_ms)
    keep = np.ones(n, bool)
    if n < 3:
        return keep
    horizon_ms = now_ms - bound.horizon_s * 1000.0
    keep[:-1] = ~(t_ms[1:] < horizon_ms)  # keep the newest row beyond the horizon as a floor
    young = now_ms - bound.full_rate_s * 1000.0
    for parity in (1, 0, 1, 0):
        live = np.nonzero(keep)[0]
        if len(live) < 3:
            break
        t = t_ms[live].astype(np.float64)
        h = hw[live]
        moved = np.ones(len(live), bool)  # moved[k]: some HWM changed from row k-1 to row k
        moved[1:] = (h[1:] != h[:-1]).any(axis=1)
        k = np.arange(1, len(live) - 1)
        gap_ok = t[k + 1] - t[k - 1] <= bound.gap_ms(now_ms - t[k + 1])
        idle = ~moved[k] & ~moved[k + 1]
        drop = (gap_ok | idle) & (t[k] < young) & (k % 2 == parity)
        keep[live[k[drop]]] = False
    if keep.sum() > bound.max_rows:  # over the cap: halve the oldest rows (the bound breaks)
        live = np.nonzero(keep)[0]
        excess = len(live) - bound.max_rows
        keep[live[1 : 2 * excess + 1 : 2]] = False
    return keep


def time_lag_s(
    t_ms: np.ndarray, hw: np.ndarray, committed: np.ndarray, now_ms: int
) -> tuple[np.ndarray, np.ndarray]:
    """Seconds since the high watermark passed each committed offset, and how each was
    obtained (``CAUGHT_UP``, ``INTERPOLATED`` or ``EXTRAPOLATED`` codes).

    ``hw`` rows are samples at ``t_ms`` (ascending; HWMs non-decreasing down each column);
    ``committed`` is (P,) or (groups, P), -1 where nothing is committed (0, caught up).
    Inside the table: the messages h0 .. h1-1 that appeared between two rows are spread
    evenly over the gap, each at the middle of its share (a lone message in a 250 ms gap is
    dated to the middle of it, not to the sample that first saw it). Older than the table:
    extrapolated at the table's mean produce rate. Never NaN, never negative.
    """
    n, width = hw.shape
    c2 = committed.reshape(-1, width)
    out = np.zeros(c2.shape)
    src = np.zeros(c2.shape, np.int8)
    if n == 0:
        return out.reshape(committed.shape), src.reshape(committed.shape)
    behind = (c2 >= 0) & (c2 < hw[-1])
    gi, pi = np.nonzero(behind)
    if not len(gi):
        return out.reshape(committed.shape), src.reshape(committed.shape)
    t_star, inside = written_ms(t_ms, hw, pi, c2[gi, pi])
    out[gi, pi] = np.maximum(0.0, (now_ms - t_star) / 1000.0)
    src[gi, pi] = np.where(inside, INTERPOLATED, EXTRAPOLATED)
    return out.reshape(committed.shape), src.reshape(committed.shape)


def first_beyond(hw: np.ndarray, pi: np.ndarray, c: np.ndarray) -> np.ndarray:
    """For each (partition ``pi[k]``, offset ``c[k]``): the first row whose HWM is beyond
    ``c[k]`` (``np.searchsorted(hw[:, pi[k]], c[k], side="right")``), every pair at once.

    The model asks it for offsets that just moved (a commit), which are most often within
    the last few samples: the last ``RECENT_ROWS`` rows are compared at once, and where the
    oldest of them is at or below the offset (every older row is too: each column is
    sorted) the count of those at or below it gives the answer. The others are searched
    by ``_bisect`` among the rows before them."""
    n = len(hw)
    if not n:
        return np.zeros(len(pi), np.int64)
    w = min(n, RECENT_ROWS)
    below = hw[n - w :, pi] <= c  # (w, k)
    if w == n:
        return below.sum(axis=0, dtype=np.int64)
    near = below[0]
    if near.all():
        return (n - w) + below.sum(axis=0, dtype=np.int64)
    pos = np.empty(len(pi), np.int64)
    pos[near] = (n - w) + below[:, near].sum(axis=0, dtype=np.int64)
    far = ~near  # beyond row n - w already: the answer is among the rows before it
    pos[far] = _bisect(hw[: n - w], pi[far], c[far])
    return pos


def _bisect(hw: np.ndarray, pi: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``first_beyond`` by a binary search run in lockstep, ~log2(rows) steps of a few
    numpy calls whatever the number of partitions (a search per partition was a Python
    loop over thousands of them).

    The count of rows at or below ``c`` is built a power of two at a time, largest first;
    reads past the last row read the last row (the column, padded so, stays sorted), and
    the count is capped at the number of rows."""
    n = len(hw)
    pos = np.zeros(len(pi), np.int64)
    if not n:
        return pos
    for k in reversed(range(n.bit_length())):
        cand = pos + (1 << k)
        below = hw[np.minimum(cand - 1, n - 1), pi] <= c
        pos = np.where(below, cand, pos)
    return np.minimum(pos, n)


def written_ms(
    t_ms: np.ndarray, hw: np.ndarray, pi: np.ndarray, c: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """When the message at offset ``c[k]`` of partition ``pi[k]`` was written (ms, float),
    for offsets below the last row's HWM, and whether it was interpolated inside the table
    (else extrapolated beyond its oldest row); see ``time_lag_s``. The result for an offset
    depends only on the rows up to the first one beyond it: rows appended later change
    nothing (the model keeps it while the offset stays put)."""
    # i = the first row whose HWM is beyond c (exists: the last row is)
    i = first_beyond(hw, pi, c)
    inside = i > 0
    t_star = np.empty(len(pi))
    ii, pin, cin = i[inside], pi[inside], c[inside]
    h0, h1 = hw[ii - 1, pin].astype(np.float64), hw[ii, pin].astype(np.float64)
    t0, t1 = t_ms[ii - 1].astype(np.float64), t_ms[ii].astype(np.float64)
    frac = np.clip((cin + 0.5 - h0) / np.maximum(h1 - h0, 1.0), 0.0, 1.0)
    t_star[inside] = t0 + frac * (t1 - t0)
    po, co = pi[~inside], c[~inside]
    if len(po):
        span_ms = float(t_ms[-1] - t_ms[0])
        grown = (hw[-1, po] - hw[0, po]).astype(np.float64)
        rate_per_ms = np.where(span_ms > 0, grown / max(span_ms, 1.0), 0.0)
        missing = (hw[0, po] - co).astype(np.float64)
        safe_rate = np.where(rate_per_ms > 0, rate_per_ms, 1.0)
        back_ms = np.where(rate_per_ms > 0, missing / safe_rate, 0.0)
        t_star[~inside] = float(t_ms[0]) - back_ms
    return t_star, inside
