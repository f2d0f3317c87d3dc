"""The rate window of a topic's model: the rows its rates and acceleration are fitted on.

Pure (numpy, ``now_ms`` passed in). Each tick appends one row (the sample time, every
partition's HWM, every group-partition's committed offset) and drops the rows older than
the window. The rows live in buffers (slots x groups x partitions) with room to append, so a tick
writes one row in place instead of copying the whole window and transposing it (which,
with the masks and differences rebuilt from it every tick, was most of the model's cost),
and the live rows are one contiguous block, a matrix the fits multiply as it is:

- the lag of each row (HWM minus committed, 0 where nothing was committed) is computed
  once, when the row is appended (or corrected by a late commit), not re-derived from
  the offsets every tick;
- the count of rows where each group-partition had a commit is kept, so the sums of the
  powers of time (the same for every series with a commit in every row, which is nearly
  all of them) are computed once per tick, and per series only for the few others;
- every sum a tick needs over the rows (the plain and the recent fits, slope and
  acceleration) is one matrix product with the powers of time side by side.

The live rows are slots ``[s, e)`` of the buffers, oldest first; when the buffers are full
the live rows move to the front (every ``SPARE`` ticks, not every tick).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.model.fits import accel_of, slope_of

SPARE = 8  # slots appended between two moves of the live rows to the front


@dataclass
class Rates:
    """The fits of one tick, (groups x partitions) but ``produce`` (partitions)."""

    produce: np.ndarray
    consume: np.ndarray
    lag_rate: np.ndarray
    accel: np.ndarray
    recent_rate: np.ndarray  # nan where fewer than 4 recent rows


class RateWindow:
    """Rows of (time, HWM per partition, committed per group-partition), oldest first."""

    def __init__(self) -> None:
        self.t = np.zeros(SPARE, np.int64)  # slot -> sample time
        self.hw = np.zeros((SPARE, 0), np.int64)  # (slots, P)
        self.c = np.full((SPARE, 0, 0), -1, np.int64)  # (slots, G, P); -1: no commit yet
        self.lag = np.zeros((SPARE, 0, 0))  # (slots, G, P): max(hw - c, 0) where c >= 0
        self.valid = np.zeros((0, 0), np.int64)  # (G, P): live rows with a commit
        self.ahead = np.zeros((0, 0), np.int64)  # (G, P): ...of which committed > HWM
        self.s = self.e = 0

    @property
    def rows(self) -> int:
        return self.e - self.s

    @property
    def times(self) -> np.ndarray:
        return self.t[self.s : self.e]

    # -- shape ------------------------------------------------------------------------------

    def widen(self, width: int) -> None:
        """Room for ``width`` partitions (new ones: HWM 0, no commit)."""
        extra = width - self.c.shape[2]
        if extra <= 0:
            return
        self.hw = np.pad(self.hw, ((0, 0), (0, extra)))
        self.c = np.pad(self.c, ((0, 0), (0, 0), (0, extra)), constant_values=-1)
        self.lag = np.pad(self.lag, ((0, 0), (0, 0), (0, extra)))
        self.valid = np.pad(self.valid, ((0, 0), (0, extra)))
        self.ahead = np.pad(self.ahead, ((0, 0), (0, extra)))

    def add_groups(self, n: int = 1) -> None:
        slots, _, width = self.c.shape
        self.c = np.concatenate([self.c, np.full((slots, n, width), -1, np.int64)], axis=1)
        self.lag = np.concatenate([self.lag, np.zeros((slots, n, width))], axis=1)
        self.valid = np.concatenate([self.valid, np.zeros((n, width), np.int64)])
        self.ahead = np.concatenate([self.ahead, np.zeros((n, width), np.int64)])

    def drop_group(self, g: int) -> None:
        self.c, self.lag = np.delete(self.c, g, axis=1), np.delete(self.lag, g, axis=1)
        self.valid = np.delete(self.valid, g, axis=0)
        self.ahead = np.delete(self.ahead, g, axis=0)

    # -- rows -------------------------------------------------------------------------------

    def slide(self, now_ms: int, window_ms: int, hw_row: np.ndarray, committed: np.ndarray) -> None:
        """Drop the rows older than ``window_ms`` and append this tick's row."""
        s, e = self.s, self.e
        first = s + int(np.searchsorted(self.t[s:e], now_ms - window_ms, side="left"))
        for k in range(s, first):
            self.valid -= self.c[k] >= 0
            self.ahead -= self.c[k] > self.hw[k]
        self.s = first
        if self.e == len(self.t):
            self._move_to_front()
        k = self.e
        hw = self.hw[k]
        hw[:] = 0
        hw[: len(hw_row)] = hw_row
        ok = committed >= 0
        self.t[k] = now_ms
        self.c[k] = committed
        np.multiply(np.maximum(hw - committed, 0), ok, out=self.lag[k])  # 0 without a commit
        self.valid += ok
        self.ahead += committed > hw
        self.e = k + 1

    def _move_to_front(self) -> None:
        s, e = self.s, self.e
        rows = e - s
        slots = rows + SPARE
        t = np.zeros(slots, np.int64)
        t[:rows] = self.t[s:e]
        hw = np.zeros((slots, self.hw.shape[1]), np.int64)
        hw[:rows] = self.hw[s:e]
        c = np.full((slots, *self.c.shape[1:]), -1, np.int64)
        c[:rows] = self.c[s:e]
        lag = np.zeros((slots, *self.c.shape[1:]))
        lag[:rows] = self.lag[s:e]
        self.t, self.hw, self.c, self.lag = t, hw, c, lag
        self.s, self.e = 0, rows

    def correct(self, g: int, p: int, offset: int, ts_ms: int) -> None:
        """A commit at ``ts_ms`` that arrives after samples taken later than it (a replay
        after a restart, a slow coordinator): the rows from ``ts_ms`` on get its offset."""
        s, e = self.s, self.e
        if e == s or self.t[e - 1] < ts_ms:
            return
        late = s + np.nonzero(self.t[s:e] >= ts_ms)[0]
        old = self.c[late, g, p]
        new = np.maximum(old, offset)
        hw = self.hw[late, p]
        self.c[late, g, p] = new
        self.lag[late, g, p] = np.where(new >= 0, np.maximum(hw - new, 0), 0)
        self.valid[g, p] += int((new >= 0).sum() - (old >= 0).sum())
        self.ahead[g, p] += int((new > hw).sum() - (old > hw).sum())

    # -- state (as persisted) ---------------------------------------------------------------

    def rows_hw(self, width: int) -> np.ndarray:
        """(rows, width): the HWM of each live row."""
        return self.hw[self.s : self.e, :width]

    def rows_c(self) -> np.ndarray:
        """(groups, rows, partitions): the committed offsets of each live row."""
        return self.c[self.s : self.e].transpose(1, 0, 2)

    def load(self, t: np.ndarray, hw: np.ndarray, c: np.ndarray) -> None:
        """Replace the rows: ``t`` (R,), ``hw`` (R, P), ``c`` (G, R, P), same P."""
        rows, slots = len(t), len(t) + SPARE
        self.t = np.zeros(slots, np.int64)
        self.t[:rows] = t
        self.hw = np.zeros((slots, hw.shape[1]), np.int64)
        self.hw[:rows] = hw
        self.c = np.full((slots, c.shape[0], c.shape[2]), -1, np.int64)
        self.c[:rows] = c.transpose(1, 0, 2)
        ok = self.c >= 0
        self.lag = np.where(ok, np.maximum(self.hw[:, None, :] - self.c, 0), 0).astype(np.float64)
        self.valid = ok[:rows].sum(axis=0).astype(np.int64)
        self.ahead = (self.c > self.hw[:, None, :])[:rows].sum(axis=0).astype(np.int64)
        self.s, self.e = 0, rows

    # -- the fits ---------------------------------------------------------------------------

    def _series(self, a: np.ndarray, width: int) -> np.ndarray:
        """(rows, G x width): the live rows of a (slots, G, P) buffer, a view when it can."""
        _, g, p = a.shape
        if p == width:
            return a[self.s : self.e].reshape(self.rows, g * p)
        return a[self.s : self.e, :, :width].reshape(self.rows, g * width)

    def fits(
        self, now_ms: int, hw_now: np.ndarray, committed: np.ndarray, recent_s: float
    ) -> Rates:
        """Least squares over the live rows, every series at once: the produce rate per
        partition (HWM), and per group-partition over the rows where it had a commit the
        consume rate, the lag rate and acceleration, and the lag rate of the last
        ``recent_s`` (nan with fewer than 4 such rows)."""
        groups, width = committed.shape
        x = (self.times - now_ms) / 1000.0
        powers = np.vander(x, 5, increasing=True)  # (R, 5): 1, x .. x^4
        recent = powers[:, :3] * (x >= -recent_s)[:, None]
        p_s = np.concatenate([powers, recent], axis=1).T  # (8, R): sums of the rows' powers
        p_y = np.concatenate([powers[:, :3], recent[:, :2]], axis=1).T  # (5, R)
        # sums over the rows where a series has a commit: those with one in every row share
        # them (scalars, while every series does: the fits' arithmetic on the sums alone is
        # then done once); the others (new, forgotten, late) get their own
        full = (self.valid[:, :width] == len(x)).reshape(-1)
        shared = p_s.sum(axis=1)
        c_rows = self._series(self.c, width)
        some = np.nonzero(~full)[0]
        s: list[Any] = list(shared)
        if len(some):
            sums = np.repeat(shared[:, None], groups * width, axis=1)
            sums[:, some] = p_s @ (c_rows[:, some] >= 0).astype(np.float64)
            s = list(sums)
        ty = p_y @ self._series(self.lag, width)  # (5, G x width)
        lag_rate = slope_of(s, ty[:2])
        tp = powers[:, :2].T @ np.subtract(self.rows_hw(width), hw_now, dtype=np.float64)
        produce = slope_of(list(powers.sum(axis=0)[:3]), tp)
        # the consume rate: where a series has a commit in every row, none beyond its HWM,
        # consumed = produced - lag row by row, so its slope is the produce rate minus the
        # lag rate; elsewhere fitted on the committed offsets (relative to the latest)
        consume = np.tile(produce, groups) - lag_rate
        other = np.nonzero(~full | (self.ahead[:, :width] > 0).reshape(-1))[0]
        if len(other):
            rows = c_rows[:, other]
            dc = np.subtract(rows, committed.reshape(-1)[other], dtype=np.float64)
            tc = powers[:, :2].T @ np.where(rows >= 0, dc, 0.0)
            s_other = [v[other] if np.ndim(v) else v for v in s[:3]]
            consume[other] = slope_of(s_other, tc)
        recent_rate = np.where(s[5] >= 4, slope_of(s[5:8], ty[3:5]), np.nan)
        return Rates(
            produce=produce,
            consume=consume.reshape(groups, width),
            lag_rate=lag_rate.reshape(groups, width),
            accel=accel_of(s, ty[:3]).reshape(groups, width),
            recent_rate=recent_rate.reshape(groups, width),
        )
