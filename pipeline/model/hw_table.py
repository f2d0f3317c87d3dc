"""The HWM history of one topic, as the model holds it, and the time lags it answers.

Pure (numpy, ``now_ms`` passed in). Rows of (sample time, every partition's HWM) in buffers
with room to append (``t_ms``/``hw`` are views of the rows in use): a day of history is
about a thousand rows, and copying the table on every sample (np.vstack) would cost more
than the model's fits. Compacted by ``pipeline.model.history.compact`` so that time lag
is interpolated within its stated bound; persisted in two parts (``history_state``).

Time lag (``time_lag``) is computed only where it can have changed: when an offset was
written depends only on the rows up to the first one beyond it, and rows are appended, so
a partition whose committed offset did not move keeps its write time from tick to tick.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.model.arrays import decode as _dec
from pipeline.model.arrays import encode as _enc
from pipeline.model.arrays import widen as _widen
from pipeline.model.history import EXTRAPOLATED, INTERPOLATED, HistoryBound, compact, written_ms

COMPACT_EVERY = 32  # samples between compactions of the HWM history (8 s at 250 ms)
_SPARE_ROWS = 2 * COMPACT_EVERY  # room to append in the history's buffers
HISTORY_FULL_MS = 30_000  # the whole HWM history is persisted this often (history_state)


class HwTable:
    """(sample time, HWM per partition) rows, oldest first, and the leaders last sampled."""

    def __init__(self) -> None:
        self._t_buf = np.zeros(0, np.int64)
        self._hw_buf = np.zeros((0, 0), np.int64)
        self._rows = 0
        self.leaders = np.zeros(0, np.int64)
        self._since_compact = 0  # rows appended since the history was last compacted
        self._saved_ms = 0  # when the whole history was last persisted...
        self._split_ms = 0  # ...up to this row
        # when each committed offset was written (see time_lag): (committed, t_star ms,
        # source) as last computed, valid while the rows are only appended to
        self._written: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    @property
    def t_ms(self) -> np.ndarray:
        return self._t_buf[: self._rows]

    @property
    def hw(self) -> np.ndarray:
        return self._hw_buf[: self._rows]

    def replace(self, t_ms: np.ndarray, hw: np.ndarray) -> None:
        """New rows (compacted, widened, restored): what was derived from them goes."""
        self._t_buf = np.empty(len(t_ms) + _SPARE_ROWS, np.int64)
        self._t_buf[: len(t_ms)] = t_ms
        self._hw_buf = np.empty((len(hw) + _SPARE_ROWS, hw.shape[1]), np.int64)
        self._hw_buf[: len(hw)] = hw
        self._rows = len(t_ms)
        self._written = None

    def append(self, t_ms: int, row: np.ndarray, bound: HistoryBound, max_rows: int) -> None:
        n = self._rows
        if n == len(self._t_buf):
            self.replace(self.t_ms, self.hw)  # a bigger buffer (a copy)
        self._t_buf[n] = t_ms
        self._hw_buf[n] = row
        self._rows = n + 1
        self._since_compact += 1
        if self._since_compact >= COMPACT_EVERY or self._rows > max_rows:
            self.compact(t_ms, bound)

    def compact(self, now_ms: int, bound: HistoryBound) -> None:
        """Drop the rows the bound allows (``pipeline.model.history.compact``)."""
        keep = compact(self.t_ms, self.hw, now_ms, bound)
        if not keep.all():
            self.replace(self.t_ms[keep], self.hw[keep])
        self._since_compact = 0

    def forget_written(self) -> None:
        """The committed offsets' shape changed (a group, a partition): recompute them."""
        self._written = None

    def time_lag(self, c: np.ndarray, now_ms: int) -> tuple[np.ndarray, np.ndarray]:
        """``pipeline.model.history.time_lag_s`` of the committed offsets ``c`` (groups x
        partitions), computed only where it can have changed: a commit, a partition that
        fell behind, rows compacted or reloaded, a group or partition added or gone. The
        same numbers as computing them all, at the cost of the partitions that moved."""
        hw = self.hw
        behind = (c >= 0) & (c < hw[-1])
        cached = self._written
        if cached is not None and cached[0].shape == c.shape:
            last_c, t_star, src = cached
            keep = behind & (last_c == c) & (src == INTERPOLATED)
            src = np.where(keep, src, 0).astype(np.int8)  # (t_star: updated in place)
        else:
            keep = np.zeros(c.shape, bool)
            t_star, src = np.zeros(c.shape), np.zeros(c.shape, np.int8)
        gi, pi = np.nonzero(behind & ~keep)
        if len(gi):
            written, inside = written_ms(self.t_ms, hw, pi, c[gi, pi])
            t_star[gi, pi] = written
            src[gi, pi] = np.where(inside, INTERPOLATED, EXTRAPOLATED)
        if cached is not None and cached[0].shape == c.shape:
            np.copyto(cached[0], c)
            self._written = (cached[0], t_star, src)
        else:
            self._written = (c.copy(), t_star, src)
        tl = np.where(behind, np.maximum(0.0, (now_ms - t_star) / 1000.0), 0.0)
        return tl, src

    # -- persistence ------------------------------------------------------------------------

    def state(self, rows: np.ndarray | None = None) -> dict[str, Any]:
        """The rows (``rows``: a mask of the rows to write; all by default)."""
        t_ms, hw = (self.t_ms, self.hw) if rows is None else (self.t_ms[rows], self.hw[rows])
        return {"t_ms": _enc(t_ms), "hw": _enc(hw), "leaders": _enc(self.leaders)}

    def history_state(self, now_ms: int) -> dict[str, dict[str, Any]]:
        """What to persist: ``hw``, the rows since the last full write, every time;
        ``hwold``, every row, at most every ``HISTORY_FULL_MS``. A day of history is about
        a thousand rows x partitions: written whole every second it would be most of the
        state traffic, and its old rows change only when they are compacted."""
        out: dict[str, dict[str, Any]] = {}
        if not self._saved_ms or now_ms - self._saved_ms >= HISTORY_FULL_MS:
            out["hwold"] = self.state()
            self._saved_ms = now_ms
            self._split_ms = int(self.t_ms[-1]) if self._rows else 0
        out["hw"] = self.state(self.t_ms > self._split_ms)
        return out

    def load(self, d: dict[str, Any], old: dict[str, Any] | None = None) -> None:
        """Restore the rows from ``hw`` (and ``hwold``, the rows before it, if any)."""
        t_ms, hw, self.leaders = _dec(d["t_ms"]), _dec(d["hw"]), _dec(d["leaders"])
        if old is not None:
            t_old, hw_old = _dec(old["t_ms"]), _dec(old["hw"])
            before = t_old < (t_ms[0] if len(t_ms) else np.iinfo(np.int64).max)
            width = max(hw.shape[1], hw_old.shape[1])
            t_ms = np.concatenate([t_old[before], t_ms])
            hw = np.concatenate([_widen(hw_old[before], width, 0), _widen(hw, width, 0)])
        self.replace(t_ms, hw)
