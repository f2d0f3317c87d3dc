"""What commits change, per (group, partition) of a topic: the first half of the lag model
(``pipeline.model.lag.TopicModel`` subclasses it with the samples, the window and the tick).

Pure (numpy). A batch of commits applies as array work (``commit_columns``), exactly what
``commit`` does one at a time; the rows of the groups a commit batch touches are what the
operator writes to the state store after it (``position_state``).
"""

from __future__ import annotations

import abc
from typing import Any

import numpy as np

from pipeline.model.arrays import decode as _dec
from pipeline.model.arrays import encode as _enc
from pipeline.model.config import LagConfig
from pipeline.model.progress import WorkerProgress
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


class CommitState(abc.ABC):
    """The (groups x partitions) arrays commits change, and the commits that change them.

    ``TopicModel`` provides the rest: the rows of groups (``add_groups``), the width
    (``_widen``), the bound on partitions (``partition_limit``) and the rate window."""

    cfg: LagConfig
    groups: list[str]
    _index: dict[str, int]
    _width: int
    _win: RateWindow
    rejected_commits: int
    progress: WorkerProgress
    committed: np.ndarray
    commit_ms: np.ndarray
    progress_ms: np.ndarray
    interval_s: np.ndarray
    rewind_ms: np.ndarray
    read_offset: np.ndarray
    read_ms: np.ndarray
    #: the status rules' ``Limits`` of ``interval_s`` as they last used them (None: to be
    #: recomputed; every write to ``interval_s`` here updates or resets them, every new
    #: array resets them)
    _limits: Limits | None = None
    #: has any record timestamp been read (``record_read``): until then none can win
    _reads: bool = False
    #: scratch of one slot per cell, for ``_repeats`` (its contents are never read before
    #: they are written)
    _scratch: np.ndarray | None = None

    @abc.abstractmethod
    def partition_limit(self) -> int:
        """Provided by ``TopicModel``."""

    @abc.abstractmethod
    def _widen(self, width: int) -> None:
        """Provided by ``TopicModel``."""

    @abc.abstractmethod
    def _group(self, name: str) -> int:
        """Provided by ``TopicModel``."""

    @abc.abstractmethod
    def add_groups(self, names: list[str]) -> list[int]:
        """Provided by ``TopicModel``."""

    @abc.abstractmethod
    def _drop_group(self, g: int) -> None:
        """Provided by ``TopicModel``."""

    def commit(self, group: str, partition: int, offset: int, ts_ms: int) -> None:
        """Apply one commit. Replays (older than the last commit seen) change nothing; a
        partition the topic does not have is counted in ``rejected_commits``."""
        if not 0 <= partition < self.partition_limit():
            self.rejected_commits += 1
            return
        self._widen(partition + 1)
        g, p = self._group(group), partition
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
                self._limits = None
            self.progress_ms[g, p] = ts_ms
            # a commit that arrives after samples taken later than it (a replay after a
            # restart, a slow coordinator): correct the window rows it should have been in
            self._win.correct(g, p, offset, ts_ms)
        self.commit_ms[g, p] = ts_ms
        self.committed[g, p] = offset

    def commit_many(self, rows: list[Any]) -> set[str]:
        """Apply a batch of ``[group, partition, offset, ts_ms]`` rows: see
        ``commit_columns``. Returns the groups touched."""
        if not rows:
            return set()
        names, parts, offsets, times = zip(*rows, strict=True)  # columns
        groups = list(dict.fromkeys(names))
        index = {n: i for i, n in enumerate(groups)}
        return self.commit_columns(groups, [index[n] for n in names], parts, offsets, times)

    def commit_columns(
        self,
        groups: list[str],
        group: Any,
        partition: Any,
        offset: Any,
        commit_ts_ms: Any,
    ) -> set[str]:
        """Apply a batch of commits given as columns (``group`` indexes ``groups``) as
        array work: exactly what ``commit`` does one at a time, for a batch with one commit
        per group-partition (the commits source coalesces to that); other batches go one
        at a time. Returns the groups whose positions it changed."""
        gi = np.asarray(group, np.int64)
        p = np.asarray(partition, np.int64)
        if not len(p):
            return set()
        limit = self.partition_limit()
        ok = (p >= 0) & (p < limit)
        off, ts = np.asarray(offset, np.int64), np.asarray(commit_ts_ms, np.int64)
        if not ok.all():
            self.rejected_commits += int(len(p) - ok.sum())
            gi, p, off, ts = gi[ok], p[ok], off[ok], ts[ok]
            if not len(p):
                return set()
        known = [self._index.get(name) for name in groups]
        if None in known:  # new groups take rows in the order commits name them
            _, first = np.unique(gi, return_index=True)
            used = gi[np.sort(first)].tolist()
            rows = np.zeros(len(groups), np.int64)
            rows[used] = self.add_groups([groups[i] for i in used])
        else:  # (the usual batch: every group it names is modelled already)
            rows = np.asarray(known, np.int64)
        g = rows[gi]
        self._widen(int(p.max()) + 1)
        if self._repeats(g * self._width + p, len(self.groups) * self._width):
            for i, partition_, offset_, ts_ in zip(
                gi.tolist(), p.tolist(), off.tolist(), ts.tolist(), strict=True
            ):
                self.commit(groups[i], partition_, offset_, ts_)
            return {groups[i] for i in np.unique(gi).tolist()}
        # replays (older than what is known) and repeats (the source re-sends what it knows
        # every minute) change nothing: the groups of neither are touched
        known_ms, prev = self.commit_ms[g, p], self.committed[g, p]
        fresh = (ts > known_ms) | ((ts == known_ms) & (off != prev))
        if not fresh.all():
            if not fresh.any():
                return set()
            gi, g, p, off, ts, prev = (
                gi[fresh],
                g[fresh],
                p[fresh],
                off[fresh],
                ts[fresh],
                prev[fresh],
            )
        touched = {groups[i] for i in np.flatnonzero(np.bincount(gi, minlength=len(groups)))}
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
            limits = self._limits
            if (
                limits is not None
                and gl.max() < limits.usual.shape[0]
                and pl.max() < limits.usual.shape[1]
            ):
                limits.update(gl, pl, self.interval_s[gl, pl], self.cfg)
            else:
                self._limits = None
        if rewind.any():
            self.rewind_ms[g[rewind], p[rewind]] = ts[rewind]
        moved = rewind | advance
        self.progress_ms[g[moved], p[moved]] = ts[moved]
        if self._win.rows:  # late: see commit()
            late = advance & (ts <= self._win.last_ms)
            if late.any():
                self._win.correct_many(g[late], p[late], off[late], ts[late])
        self.commit_ms[g, p] = ts
        self.committed[g, p] = off
        return touched

    def _repeats(self, cells: np.ndarray, n_cells: int) -> bool:
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

    def forget(self, group: str, partition: int) -> None:
        """The offset was deleted (tombstone): stop modelling this partition, and the group
        once it has no partition left."""
        g = self._index.get(group)
        if g is None:
            return
        if partition < self._width:
            self.committed[g, partition] = -1
            self.interval_s[g, partition] = np.nan
            self._limits = None
            self.rewind_ms[g, partition] = 0
            self.read_offset[g, partition] = -1
        self.progress.forget(group, partition)
        if not (self.committed[g] >= 0).any():
            self._drop_group(g)

    def position_state(self, group: str) -> dict[str, Any]:
        """What a commit changes for one group: small, written on every commit batch. The
        int64 columns of ``POSITION`` side by side in one array (``"cols"``, in that
        order), ``interval_s`` apart: two encodings a group, not seven."""
        g = self._index[group]
        ints = np.stack([getattr(self, k)[g] for k in POSITION if k not in POSITION_DTYPES])
        return {
            "width": self._width,
            "cols": _enc_raw(ints),
            "interval_s": _enc(self.interval_s[g]),
        }

    def load_position_state(self, group: str, d: dict[str, Any]) -> None:
        """``position_state`` read back; also the layout of earlier releases (one
        encoding per column, ``read_offset`` and ``read_ms`` missing in the oldest)."""
        width = int(d["width"])
        self._widen(width)
        g = self._group(group)
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
        self._limits = None
        if (self.read_offset[g] >= 0).any():
            self._reads = True


def _enc_raw(a: np.ndarray) -> dict[str, Any]:
    """A small table as its raw bytes (``encode`` would difference it down the rows:
    these rows are different columns, not successive values)."""
    return _enc(np.ascontiguousarray(a).reshape(-1)) | {"s": list(a.shape)}
