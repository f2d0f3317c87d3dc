"""What commits change, per (group, partition) of a topic: the arrays and the array work.

``pipeline.model.lag.TopicModel`` holds one ``CommitState`` beside its samples, rate window
and tick. The model keeps the group index (names to rows), the width and the bound on
partitions; this keeps the (groups x partitions) arrays commits change and applies commits
to them by row number. Pure (numpy). A batch of commits applies as array work
(``apply_cells``), exactly what ``apply`` does one at a time; the rows of the groups a
commit batch touches are what the operator writes to the state store after it
(``row_state``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.model.arrays import decode as _dec
from pipeline.model.arrays import encode as _enc
from pipeline.model.arrays import widen as _widen
from pipeline.model.config import LagConfig
from pipeline.model.status import Limits
from pipeline.model.window import RateWindow

POSITION = {  # per group x partition, what commits change; fill for a new row/column
    "committed": -1,  # -1: no commit seen on this partition
    "commit_ms": 0,
    "progress_ms": 0,  # when the committed offset last advanced
    "interval_s": np.nan,  # EWMA of the time between advances (nan: unknown)
    "rewind_ms": 0,
    # the timestamp of the record at offset read_offset, read from the broker by an edge
    # (``record_read``): an exact time lag while the group stays at that offset
    "read_offset": -1,
    "read_ms": 0,
}
POSITION_DTYPES = {"interval_s": np.float64}


def _empty(name: str) -> np.ndarray:
    return np.full((0, 0), POSITION[name], POSITION_DTYPES.get(name, np.int64))


class CommitState:
    """The (groups x partitions) arrays commits change, and the commits that change them.

    Rows are the groups of the ``TopicModel`` that holds this; it reshapes these arrays as
    its groups and partitions change (``widen``, ``add_rows``, ``drop_row``). A late
    commit also corrects the model's rate window, which the caller passes in (``win``)."""

    def __init__(self, cfg: LagConfig) -> None:
        self.cfg = cfg
        self.committed = _empty("committed")
        self.commit_ms = _empty("commit_ms")
        self.progress_ms = _empty("progress_ms")
        self.interval_s = _empty("interval_s")
        self.rewind_ms = _empty("rewind_ms")
        self.read_offset = _empty("read_offset")
        self.read_ms = _empty("read_ms")
        #: the status rules' ``Limits`` of ``interval_s`` as they last used them (None: to
        #: be recomputed). Every write to ``interval_s`` here updates or resets them, and
        #: every new array resets them, so they never describe intervals gone stale.
        self.limits: Limits | None = None
        #: has any record timestamp been read (``record_read``): until then none can win
        self.reads = False
        #: one slot per cell for ``repeats`` (its contents are never read before written)
        self._scratch: np.ndarray | None = None

    # -- shape ----------------------------------------------------------------------------

    def widen(self, width: int) -> None:
        """Columns up to ``width`` (new ones at their fill)."""
        for name, fill in POSITION.items():
            setattr(self, name, _widen(getattr(self, name), width, fill))
        self.limits = None

    def add_rows(self, new: int) -> None:
        """``new`` rows at the end, at their fill."""
        for name, fill in POSITION.items():
            a = getattr(self, name)
            setattr(self, name, np.concatenate([a, np.full((new, *a.shape[1:]), fill, a.dtype)]))
        self.limits = None

    def drop_row(self, g: int) -> None:
        for name in POSITION:
            setattr(self, name, np.delete(getattr(self, name), g, axis=0))
        self.limits = None

    # -- commits --------------------------------------------------------------------------

    def apply(self, g: int, p: int, offset: int, ts_ms: int, win: RateWindow) -> None:
        """Apply one commit to cell ``(g, p)`` (within the arrays). Replays (older than
        the last commit seen) change nothing."""
        if ts_ms < self.commit_ms[g, p]:
            return
        prev = int(self.committed[g, p])
        if prev >= 0 and offset < prev:
            self.rewind_ms[g, p] = ts_ms
            self.progress_ms[g, p] = ts_ms
        elif offset > prev:
            last_progress = int(self.progress_ms[g, p])
            if prev >= 0 and last_progress > 0:
                dt_s = (ts_ms - last_progress) / 1000.0
                old = float(self.interval_s[g, p])
                alpha = self.cfg.interval_alpha
                self.interval_s[g, p] = dt_s if np.isnan(old) else (1 - alpha) * old + alpha * dt_s
                self.limits = None
            self.progress_ms[g, p] = ts_ms
            # a commit that arrives after samples taken later than it (a replay after a
            # restart, a slow coordinator): correct the window rows it should have been in
            win.correct(g, p, offset, ts_ms)
        self.commit_ms[g, p] = ts_ms
        self.committed[g, p] = offset

    def apply_cells(
        self, g: np.ndarray, p: np.ndarray, off: np.ndarray, ts: np.ndarray, win: RateWindow
    ) -> np.ndarray:
        """Apply a batch of commits to distinct cells ``(g, p)`` (within the arrays) as
        array work: exactly what ``apply`` does one at a time. Returns which commits were
        fresh (changed anything): replays, older than what is known, and repeats (the
        commits source re-sends what it knows every minute) change nothing."""
        known_ms, prev = self.commit_ms[g, p], self.committed[g, p]
        fresh = (ts > known_ms) | ((ts == known_ms) & (off != prev))
        if not fresh.all():
            if not fresh.any():
                return fresh
            g, p, off, ts, prev = g[fresh], p[fresh], off[fresh], ts[fresh], prev[fresh]
        rewind = (prev >= 0) & (off < prev)
        advance = off > prev
        last_progress = self.progress_ms[g, p]
        learn = advance & (prev >= 0) & (last_progress > 0)
        if learn.any():
            gl, pl = g[learn], p[learn]
            dt_s = (ts[learn] - last_progress[learn]) / 1000.0
            old = self.interval_s[gl, pl]
            a = self.cfg.interval_alpha
            self.interval_s[gl, pl] = np.where(np.isnan(old), dt_s, (1 - a) * old + a * dt_s)
            limits = self.limits
            if (
                limits is not None
                and gl.max() < limits.usual.shape[0]
                and pl.max() < limits.usual.shape[1]
            ):
                limits.update(gl, pl, self.interval_s[gl, pl], self.cfg)
            else:
                self.limits = None
        if rewind.any():
            self.rewind_ms[g[rewind], p[rewind]] = ts[rewind]
        moved = rewind | advance
        self.progress_ms[g[moved], p[moved]] = ts[moved]
        if win.rows:  # late: see apply()
            late = advance & (ts <= win.last_ms)
            if late.any():
                win.correct_many(g[late], p[late], off[late], ts[late])
        self.commit_ms[g, p] = ts
        self.committed[g, p] = off
        return fresh

    def repeats(self, cells: np.ndarray, n_cells: int) -> bool:
        """Does any cell occur twice in ``cells`` (each in ``[0, n_cells)``)? Each position
        writes its index into the cell's slot: a cell named twice keeps one of the two, so
        the other reads back another index (without the sort ``np.unique`` does: this is
        asked of every batch)."""
        scratch = self._scratch
        if scratch is None or len(scratch) < n_cells:
            scratch = self._scratch = np.empty(max(n_cells, 64), np.int64)
        at = np.arange(len(cells))
        scratch[cells] = at
        return bool((scratch[cells] != at).any())

    def clear(self, g: int, p: int) -> None:
        """The offset of cell ``(g, p)`` was deleted: as if never committed."""
        self.committed[g, p] = -1
        self.interval_s[g, p] = np.nan
        self.limits = None
        self.rewind_ms[g, p] = 0
        self.read_offset[g, p] = -1

    def any_commit(self, g: int) -> bool:
        """Does row ``g`` hold a commit on any partition?"""
        return bool((self.committed[g] >= 0).any())

    def record_read(self, g: int, p: int, offset: int, record_ms: int) -> None:
        """The timestamp of the record at ``offset`` of cell ``(g, p)``, read from the
        broker: the exact time lag while the committed offset stays there."""
        self.read_offset[g, p] = offset
        self.read_ms[g, p] = record_ms
        self.reads = True

    # -- persistence ----------------------------------------------------------------------

    def row_state(self, g: int, width: int) -> dict[str, Any]:
        """What a commit changes for one group: small, written on every commit batch. The
        int64 columns of ``POSITION`` side by side in one array (``"cols"``, in that
        order), ``interval_s`` apart: two encodings a group, not seven."""
        ints = np.stack([getattr(self, k)[g] for k in POSITION if k not in POSITION_DTYPES])
        return {
            "width": width,
            "cols": _enc_raw(ints),
            "interval_s": _enc(self.interval_s[g]),
        }

    def load_row(self, g: int, d: dict[str, Any]) -> None:
        """``row_state`` read back into row ``g`` (the arrays as wide as ``d["width"]``
        already); also the layout of earlier releases (one encoding per column,
        ``read_offset`` and ``read_ms`` missing in the oldest)."""
        width = int(d["width"])
        columns = dict(d)
        if "cols" in d:
            ints = _dec(d["cols"])
            names = [k for k in POSITION if k not in POSITION_DTYPES]
            columns.update(zip(names, ints, strict=True))
        for k in POSITION:
            if k in columns:
                value = columns[k]
                row = value if isinstance(value, np.ndarray) else _dec(value)
                getattr(self, k)[g, :width] = row[:width]
        self.limits = None
        if (self.read_offset[g] >= 0).any():
            self.reads = True


def _enc_raw(a: np.ndarray) -> dict[str, Any]:
    """A small table as its raw bytes (``encode`` would difference it down the rows:
    these rows are different columns, not successive values)."""
    return _enc(np.ascontiguousarray(a).reshape(-1)) | {"s": list(a.shape)}
