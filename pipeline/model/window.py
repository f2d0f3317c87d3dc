"""The rate window of a topic's model: the rows its rates and acceleration are fitted on.

Pure (numpy, ``now_ms`` passed in). Each tick appends one row (the sample time, every
partition's HWM, every group-partition's committed offset) and drops the rows older than
the window. What a tick costs is kept proportional to the rows that enter and leave, not
to the rows the window holds:

- the rows live in a ring of slots (slots x groups x partitions): a tick writes its row
  over the oldest free slot, nothing is moved or copied as the window slides;
- the lag of each row (HWM minus committed, 0 where nothing was committed) is computed
  once, when the row is appended (or corrected by a late commit);
- the sums of x^k x lag (k = 0, 1, 2) over the live rows, which the lag's slope and
  acceleration are solved from, are running sums: a row adds its terms when it enters and
  takes them away when it leaves. ``x`` is seconds from a reference time kept near the
  window (``rebase``: every ``REBASE_MS`` the sums are recomputed from the rows, so the
  rounding of the running sums never accumulates), and shifted to "seconds before now"
  at each fit by the binomial expansion, three array operations;
- the count of rows where each group-partition had a commit is kept, so the sums of the
  powers of time (the same for every series with a commit in every row, which is nearly
  all of them) are computed once per tick, and per series only for the few others;
- the last second's slope (``recent_s``: a few rows) is summed directly from those rows.

A tick so costs a few passes over the (groups x partitions) arrays whatever the window's
length, where a matrix product over every row would read the whole window (40 rows at
250 ms over 10 s) every tick.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.model.fits import accel_of, slope_of

SPARE = 8  # slots added when the ring is full (the window grows to its rows + this)
#: the running sums are recomputed from the rows (and their time reference moved to the
#: oldest row) this often: x stays within a minute or so of its reference
REBASE_MS = 60_000


@dataclass
class Rates:
    """The fits of one tick, (groups x partitions) but ``produce`` (partitions)."""

    produce: np.ndarray
    consume: np.ndarray
    lag_rate: np.ndarray
    accel: np.ndarray
    recent_rate: np.ndarray  # nan where fewer than 4 recent rows


def _powers(x: float) -> np.ndarray:
    return np.array([1.0, x, x * x])[:, None, None]


class RateWindow:
    """Rows of (time, HWM per partition, committed per group-partition) in a ring of slots.

    Rows are numbered from 0 as they are appended; the live rows are ``[s, e)``, row ``i``
    in slot ``i % slots``."""

    def __init__(self) -> None:
        self.t = np.zeros(SPARE, np.int64)  # slot -> sample time
        self.hw = np.zeros((SPARE, 0), np.int64)  # (slots, P)
        self.c = np.full((SPARE, 0, 0), -1, np.int64)  # (slots, G, P); -1: no commit yet
        self.lag = np.zeros((SPARE, 0, 0))  # (slots, G, P): max(hw - c, 0) where c >= 0
        self.valid = np.zeros((0, 0), np.int64)  # (G, P): live rows with a commit
        self.ahead = np.zeros((0, 0), np.int64)  # (G, P): ...of which committed > HWM
        # sum over the live rows of x^k * lag, k = 0, 1, 2; x = (t - t_ref) / 1000
        self.y = np.zeros((3, 0, 0))
        self.t_ref = 0
        self.s = self.e = 0

    @property
    def rows(self) -> int:
        return self.e - self.s

    @property
    def slots(self) -> int:
        return len(self.t)

    def _live(self) -> np.ndarray:
        """The slots of the live rows, oldest first."""
        return np.arange(self.s, self.e) % self.slots

    @property
    def times(self) -> np.ndarray:
        return self.t[self._live()]

    @property
    def last_ms(self) -> int:
        """The newest row's time (0 with no row)."""
        return int(self.t[(self.e - 1) % self.slots]) if self.e > self.s else 0

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
        self.y = np.pad(self.y, ((0, 0), (0, 0), (0, extra)))

    def add_groups(self, n: int = 1) -> None:
        slots, _, width = self.c.shape
        self.c = np.concatenate([self.c, np.full((slots, n, width), -1, np.int64)], axis=1)
        self.lag = np.concatenate([self.lag, np.zeros((slots, n, width))], axis=1)
        self.valid = np.concatenate([self.valid, np.zeros((n, width), np.int64)])
        self.ahead = np.concatenate([self.ahead, np.zeros((n, width), np.int64)])
        self.y = np.concatenate([self.y, np.zeros((3, n, width))], axis=1)

    def drop_group(self, g: int) -> None:
        self.c, self.lag = np.delete(self.c, g, axis=1), np.delete(self.lag, g, axis=1)
        self.valid = np.delete(self.valid, g, axis=0)
        self.ahead = np.delete(self.ahead, g, axis=0)
        self.y = np.delete(self.y, g, axis=1)

    # -- rows -------------------------------------------------------------------------------

    def slide(self, now_ms: int, window_ms: int, hw_row: np.ndarray, committed: np.ndarray) -> None:
        """Drop the rows older than ``window_ms`` and append this tick's row."""
        cut, n = now_ms - window_ms, self.slots
        while self.s < self.e and self.t[self.s % n] < cut:
            k = self.s % n
            self.y -= _powers((self.t[k] - self.t_ref) / 1000.0) * self.lag[k]
            self.valid -= self.c[k] >= 0
            self.ahead -= self.c[k] > self.hw[k]
            self.s += 1
        if self.rows == n:
            self._grow()
        rebase = False
        if self.rows == 0:  # a fresh start: no rounding left over in the sums
            self.t_ref = now_ms
            self.y[:] = 0.0
        elif now_ms - self.t_ref >= REBASE_MS:
            self.t_ref, rebase = now_ms, True
        k = self.e % self.slots
        hw = self.hw[k]
        hw[:] = 0
        hw[: len(hw_row)] = hw_row
        ok = committed >= 0
        self.t[k] = now_ms
        self.c[k] = committed
        lag = self.lag[k]
        np.multiply(np.maximum(hw - committed, 0), ok, out=lag)  # 0 without a commit
        self.valid += ok
        self.ahead += committed > hw
        self.e += 1
        if rebase:  # a new reference: the sums from the rows (this one included)
            self._sums()
        else:
            self.y += _powers((now_ms - self.t_ref) / 1000.0) * lag

    def _grow(self) -> None:
        """``SPARE`` more slots, the live rows moved to the front (oldest first)."""
        live, rows = self._live(), self.rows
        slots = rows + SPARE
        t = np.zeros(slots, np.int64)
        t[:rows] = self.t[live]
        hw = np.zeros((slots, self.hw.shape[1]), np.int64)
        hw[:rows] = self.hw[live]
        c = np.full((slots, *self.c.shape[1:]), -1, np.int64)
        c[:rows] = self.c[live]
        lag = np.zeros((slots, *self.c.shape[1:]))
        lag[:rows] = self.lag[live]
        self.t, self.hw, self.c, self.lag = t, hw, c, lag
        self.s, self.e = 0, rows

    def _sums(self) -> None:
        """The running sums recomputed from the live rows (after a load, a new reference)."""
        live = self._live()
        x = (self.t[live] - self.t_ref) / 1000.0
        p = np.vander(x, 3, increasing=True).T  # (3, R)
        lag = self.lag[live]
        cells = lag.shape[1] * lag.shape[2]
        self.y = (p @ lag.reshape(len(live), cells)).reshape(3, *lag.shape[1:])

    def correct(self, g: int, p: int, offset: int, ts_ms: int) -> None:
        """A commit at ``ts_ms`` that arrives after samples taken later than it (a replay
        after a restart, a slow coordinator): the rows from ``ts_ms`` on get its offset."""
        self.correct_many(
            np.array([g], np.int64),
            np.array([p], np.int64),
            np.array([offset], np.int64),
            np.array([ts_ms], np.int64),
        )

    def correct_many(
        self, g: np.ndarray, p: np.ndarray, offset: np.ndarray, ts_ms: np.ndarray
    ) -> None:
        """``correct`` for a batch of commits, one per group-partition ``(g[i], p[i])``,
        row by row from the newest (a late commit is most often a row or two late: two
        commits readers of a scaled-out pipeline each hold a sample only for their own
        commits), each row for every commit late for it at once."""
        if self.e == self.s or not len(g):
            return
        live = self._live()
        times = self.t[live]
        late_rows = len(live) - np.searchsorted(times, ts_ms, side="left")
        for back in range(1, int(late_rows.max(initial=0)) + 1):
            sel = late_rows >= back
            gs, ps = g[sel], p[sel]
            slot = live[-back]
            old = self.c[slot, gs, ps]
            new = np.maximum(old, offset[sel])
            hw = self.hw[slot, ps]
            new_lag = np.where(new >= 0, np.maximum(hw - new, 0), 0).astype(np.float64)
            x = (self.t[slot] - self.t_ref) / 1000.0
            change = new_lag - self.lag[slot, gs, ps]
            self.y[0, gs, ps] += change
            self.y[1, gs, ps] += x * change
            self.y[2, gs, ps] += x * x * change
            self.c[slot, gs, ps] = new
            self.lag[slot, gs, ps] = new_lag
            self.valid[gs, ps] += (new >= 0).astype(np.int64) - (old >= 0)
            self.ahead[gs, ps] += (new > hw).astype(np.int64) - (old > hw)

    # -- state (as persisted) ---------------------------------------------------------------

    def rows_hw(self, width: int) -> np.ndarray:
        """(rows, width): the HWM of each live row."""
        return self.hw[self._live(), :width]

    def rows_c(self) -> np.ndarray:
        """(groups, rows, partitions): the committed offsets of each live row."""
        return self.c[self._live()].transpose(1, 0, 2)

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
        self.t_ref = int(t[0]) if rows else 0
        self._sums()

    # -- the fits ---------------------------------------------------------------------------

    def fits(
        self, now_ms: int, hw_now: np.ndarray, committed: np.ndarray, recent_s: float
    ) -> Rates:
        """Least squares over the live rows, every series at once: the produce rate per
        partition (HWM), and per group-partition over the rows where it had a commit the
        consume rate, the lag rate and acceleration, and the lag rate of the last
        ``recent_s`` (nan with fewer than 4 such rows)."""
        groups, width = committed.shape
        live = self._live()
        rows = len(live)
        x = (self.t[live] - now_ms) / 1000.0
        powers = np.vander(x, 5, increasing=True)  # (R, 5): 1, x .. x^4
        is_recent = x >= -recent_s
        # the sums of the powers of x over every row: those of every series with a commit
        # in every row (scalars: the fits' arithmetic on them is done once)
        s = powers.sum(axis=0).tolist()  # Python floats: the scalar arithmetic is cheaper
        # sums of x^k lag relative to now, from the running sums (x_now = x_ref - d)
        d = (now_ms - self.t_ref) / 1000.0
        y0, y1, y2 = (a[:, :width] for a in self.y)
        t1 = y1 - d * y0
        t2 = y2 - d * (y1 + t1)  # y2 - 2 d y1 + d^2 y0
        lag_rate = slope_of(s, (y0, t1))
        accel = accel_of(s, (y0, t1, t2))
        # the last recent_s: its few rows summed directly
        r_slots = live[is_recent]
        r_lag = self.lag[r_slots, :, :width]
        xr = x[is_recent]
        sr = powers[is_recent, :3].sum(axis=0).tolist()
        r0 = r_lag.sum(axis=0)
        r1 = (xr @ r_lag.reshape(len(xr), groups * width)).reshape(groups, width)
        recent_rate = slope_of(sr, (r0, r1)) if sr[0] >= 4 else np.full((groups, width), np.nan)
        tp = powers[:, :2].T @ np.subtract(self.hw[live, :width], hw_now, dtype=np.float64)
        produce = slope_of(s[:3], tp)
        # the consume rate: where a series has a commit in every row, none beyond its HWM,
        # consumed = produced - lag row by row, so its slope is the produce rate minus the
        # lag rate; elsewhere fitted on the committed offsets (relative to the latest)
        consume = produce[None, :] - lag_rate
        valid = self.valid[:, :width]
        odd = np.flatnonzero((valid != rows) | (self.ahead[:, :width] > 0))
        if len(odd):
            g, p = np.divmod(odd, width)
            v = valid[g, p]
            never = v == 0  # no commit in any row: no rate at all
            consume[g[never], p[never]] = 0.0
            recent_rate[g[never], p[never]] = np.nan
            own = (v > 0) & (v < rows)  # a commit in some rows: fitted over those rows
            full = v == rows  # a commit in every row, one beyond the HWM: consume alone
            self._fit_odd(g[own], p[own], live, powers, is_recent, committed, (y0, t1, t2),
                          (r0, r1), lag_rate, accel, recent_rate, consume)  # fmt: skip
            self._fit_consume(g[full], p[full], live, powers, s, committed, consume)
        return Rates(
            produce=produce,
            consume=consume,
            lag_rate=lag_rate,
            accel=accel,
            recent_rate=recent_rate,
        )

    def _fit_odd(
        self,
        g: np.ndarray,
        p: np.ndarray,
        live: np.ndarray,
        powers: np.ndarray,
        is_recent: np.ndarray,
        committed: np.ndarray,
        t: tuple[np.ndarray, np.ndarray, np.ndarray],
        r: tuple[np.ndarray, np.ndarray],
        lag_rate: np.ndarray,
        accel: np.ndarray,
        recent_rate: np.ndarray,
        consume: np.ndarray,
    ) -> None:
        """The series ``(g, p)`` with a commit in some rows but not all, fitted over their
        own rows (in place)."""
        if not len(g):
            return
        c_rows = self.c[live[:, None], g[None, :], p[None, :]]  # (R, k)
        ok = (c_rows >= 0).astype(np.float64)
        s = powers.T @ ok  # (5, k): each series' own sums of the powers of x
        recent = powers[:, :3] * is_recent[:, None]
        sr = recent.T @ ok  # (3, k)
        t0, t1, t2 = (a[g, p] for a in t)
        lag_rate[g, p] = slope_of(s, (t0, t1))
        accel[g, p] = accel_of(s, (t0, t1, t2))
        recent_rate[g, p] = np.where(sr[0] >= 4, slope_of(sr, (r[0][g, p], r[1][g, p])), np.nan)
        dc = np.subtract(c_rows, committed[g, p], dtype=np.float64)
        tc = powers[:, :2].T @ np.where(c_rows >= 0, dc, 0.0)
        consume[g, p] = slope_of(s, tc)

    def _fit_consume(
        self,
        g: np.ndarray,
        p: np.ndarray,
        live: np.ndarray,
        powers: np.ndarray,
        s: list[float],
        committed: np.ndarray,
        consume: np.ndarray,
    ) -> None:
        """The consume rate of the series ``(g, p)`` with a commit in every row but one
        beyond that row's HWM, fitted on the committed offsets (in place)."""
        if not len(g):
            return
        c_rows = self.c[live[:, None], g[None, :], p[None, :]]  # (R, k)
        tc = powers[:, :2].T @ np.subtract(c_rows, committed[g, p], dtype=np.float64)
        consume[g, p] = slope_of(s[:3], tc)
