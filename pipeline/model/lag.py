"""The lag model: from watermark samples and commits to lag, rates, time lag and status.

Pure and numpy-based: no Kafka, no Quix, no clock (``now_ms`` is the sample's event time),
so the same inputs always give the same outputs and every rule is unit-tested.

One ``TopicModel`` per topic holds
- the topic's high-watermark history (``pipeline.model.hw_table``): rows of (sample time,
  every partition's HWM), compacted by ``pipeline.model.history`` so that time lag is
  interpolated within a stated error (1 s or 1 % of the lag) for 24 h back
  (kafka-lag-exporter's offset->time table, without its 30 s poll and without its error on
  idle and spiky partitions); a time lag is recomputed only where the offset moved;
- every consumer group on the topic as one row of (groups x partitions) arrays: committed
  offset, last commit time, last progress time and the usual interval between progress
  (what commits change: ``pipeline.model.commit_state``);
- the rate window (``pipeline.model.window``): the (time, HWM, committed) rows the rates
  are fitted on, in buffers laid out for the fits. A tick fits every group at once (a few
  matrix products per topic, not a dozen numpy calls per group) and touches each row of
  the window once, when it is appended.

Every sample updates every group on the topic, so lag is observed every tick, not only when
consumers commit (Burrow's blind spot), and a consumer that stopped committing is seen from
its growing time lag without waiting for another commit.
"""

from __future__ import annotations

import zlib
from dataclasses import replace
from typing import Any

import numpy as np

from pipeline.model.arrays import decode as _dec
from pipeline.model.arrays import encode as _enc
from pipeline.model.arrays import widen as _widen
from pipeline.model.commit_state import CommitState
from pipeline.model.config import LagConfig
from pipeline.model.events import TopicObservation
from pipeline.model.history import READ
from pipeline.model.hw_table import HwTable
from pipeline.model.progress import WorkerProgress
from pipeline.model.status import Limits, StatusInputs, classify, usual_interval_s
from pipeline.model.window import RateWindow
from schemas.lag import SEVERITY, LagStatus

#: Commits name partitions the model allocates arrays for, and garbage on
#: __consumer_offsets can decode as a valid commit to a partition in the billions: a commit
#: is accepted only below twice the topic's sampled width (at least 64, for partitions added
#: since the last sample), or below this bound before the topic's first sample; the others
#: are counted in ``rejected_commits``. A commit dropped for a partition added beyond that
#: comes again with the consumer's next commit (and the commits source's re-send).
MAX_PARTITIONS_UNSAMPLED = 4096

# an observation's arrays before the first sample: (fill, dtype)
_EMPTY: dict[str, tuple[int, Any]] = {
    "committed": (-1, np.int64),
    "lag": (0, np.int64),
    "lag_rate_per_s": (0, np.float64),
    "lag_accel_per_s2": (0, np.float64),
    "produce_rate_per_s": (0, np.float64),
    "consume_rate_per_s": (0, np.float64),
    "time_lag_s": (0, np.float64),
    "time_lag_source": (0, np.int8),
    "eta_drain_s": (0, np.float64),
    "status": (0, np.int8),
    "last_commit_ms": (0, np.int64),
}
_PER_PARTITION = {"produce_rate_per_s"}
#: ``StatusInputs`` field -> its key in the dict ``WorkerProgress.overlay`` takes and returns
# per group (and per group-partition): what the operator last published, and when
_PUBLISHED = (
    "last_status",
    "last_snapshot_ms",
    "last_alert_ms",
    "last_summary_ms",
    "last_summary_status",
    "phase",
)


#: a lag drains when it falls by at least this share of the produce rate ...
DRAIN_MIN_SHARE = 0.05
#: ... and by at least this many offsets a second: a fitted rate a rounding error below
#: zero (a stopped group on an idle topic) is no drain, and its ETA would be astronomical
DRAIN_MIN_PER_S = 0.1


#: the status codes of partitions nobody consumes (no drain ETA)
UNCONSUMED_CODES = np.array([SEVERITY[LagStatus.STALL], SEVERITY[LagStatus.STOP]], np.int8)


def drain_eta_s(
    lag: np.ndarray, lag_rate: np.ndarray, produce: np.ndarray, status: np.ndarray | None = None
) -> np.ndarray:
    """Seconds until the lag is gone at its current rate: 0 when caught up, NaN unless it
    is draining (the consumers outpace the producers by ``DRAIN_MIN_SHARE`` of the produce
    rate and ``DRAIN_MIN_PER_S``) and someone consumes it (``status`` codes, when given,
    not STALL or STOP: whatever its commits' fit says, such a partition does not drain)."""
    falls = -lag_rate
    draining = (lag > 0) & (falls >= np.maximum(DRAIN_MIN_SHARE * produce, DRAIN_MIN_PER_S))
    if status is not None:
        draining &= ~np.isin(status, UNCONSUMED_CODES)
    with np.errstate(divide="ignore", invalid="ignore"):
        eta = np.where(draining, lag / falls, np.nan)
    return np.where(lag == 0, 0.0, eta)


class TopicModel:
    """The model of one topic: its HWM history and every group that commits on it.

    Groups are rows of (groups x partitions) arrays, so a tick models all of them at once.
    What commits change is its ``CommitState`` (``positions``): this keeps the group names,
    the width and the bound on partitions, and hands it row numbers.
    """

    def __init__(self, topic: str, cfg: LagConfig) -> None:
        self.topic = topic
        self.cfg = cfg
        self.history = HwTable()  # the HWM history (pipeline/model/hw_table.py)
        self.groups: list[str] = []
        #: the groups the commits source reported as share groups (KIP-932): their positions
        #: come from the share-group state, and their events say ``group_type: share``
        self.share_groups: frozenset[str] = frozenset()
        self._index: dict[str, int] = {}
        self._width = 0  # partitions known from samples or commits
        self.positions = CommitState(cfg)  # what commits change, per group x partition
        # the rate window: rows at each tick (time, HWM per partition, committed per group)
        self._win = RateWindow()
        # what the operator last published per group-partition (the model does not use it)
        self.last_status = np.zeros((0, 0), np.int8)
        self.last_snapshot_ms = np.zeros(0, np.int64)
        self.last_alert_ms = np.zeros(0, np.int64)
        # ...and its group summaries: when one was last sent, at which status (-1: never)
        self.last_summary_ms = np.zeros(0, np.int64)
        self.last_summary_status = np.zeros(0, np.int16)
        # each group's phase on the periodic events' grids (a hash of its name)
        self.phase = np.zeros(0, np.int64)
        self.rejected_commits = 0  # commits to partitions the topic does not have
        # SDK workers' progress reports: where present, they judge the status (progress.py)
        self.progress = WorkerProgress(cfg.progress, cfg.warn_factor)

    @property
    def committed(self) -> np.ndarray:
        """The last committed offset per group x partition (-1: none)."""
        return self.positions.committed

    @property
    def commit_ms(self) -> np.ndarray:
        return self.positions.commit_ms

    @property
    def progress_ms(self) -> np.ndarray:
        return self.positions.progress_ms

    @property
    def interval_s(self) -> np.ndarray:
        return self.positions.interval_s

    @property
    def rewind_ms(self) -> np.ndarray:
        return self.positions.rewind_ms

    @property
    def read_offset(self) -> np.ndarray:
        return self.positions.read_offset

    @property
    def read_ms(self) -> np.ndarray:
        return self.positions.read_ms

    @property
    def t_ms(self) -> np.ndarray:
        return self.history.t_ms

    @property
    def hw(self) -> np.ndarray:
        return self.history.hw

    @property
    def leaders(self) -> np.ndarray:
        return self.history.leaders

    @property
    def w_t(self) -> np.ndarray:
        """The rate window's row times (R,)."""
        return self._win.times

    @property
    def w_hw(self) -> np.ndarray:
        """The rate window's HWM rows (R, partitions sampled)."""
        return self._win.rows_hw(self.width)

    @property
    def w_c(self) -> np.ndarray:
        """The rate window's committed offsets (groups, R, partitions)."""
        return self._win.rows_c()

    @property
    def width(self) -> int:
        """Partitions the sampler reported for this topic."""
        return int(self.hw.shape[1])

    @property
    def last_sample_ms(self) -> int:
        return int(self.t_ms[-1]) if len(self.t_ms) else 0

    def __contains__(self, group: str) -> bool:
        return group in self._index

    # -- shape ----------------------------------------------------------------------------

    def _widen(self, width: int) -> None:
        if width <= self._width:
            return
        self.positions.widen(width)
        self._win.widen(width)
        self.last_status = _widen(self.last_status, width, 0)
        self._width = width
        self.history.forget_written()

    def _group(self, name: str) -> int:
        g = self._index.get(name)
        return g if g is not None else self.add_groups([name])[0]

    def add_groups(self, names: list[str]) -> list[int]:
        """Rows for groups not seen before, all at once (one copy of every array for the
        lot: a model restarted on a busy topic meets its 100 groups in a few batches)."""
        rows = []
        for name in names:
            g = self._index.get(name)
            if g is None:
                g = self._index[name] = len(self.groups)
                self.groups.append(name)
            rows.append(g)
        new = len(self.groups) - len(self.last_snapshot_ms)
        if new <= 0:
            return rows
        self.history.forget_written()

        def grown(a: np.ndarray, fill: float | int) -> np.ndarray:
            return np.concatenate([a, np.full((new, *a.shape[1:]), fill, a.dtype)])

        self.positions.add_rows(new)
        self._win.add_groups(new)
        self.last_status = grown(self.last_status, 0)
        self.last_snapshot_ms = grown(self.last_snapshot_ms, 0)
        self.last_alert_ms = grown(self.last_alert_ms, 0)
        self.last_summary_ms = grown(self.last_summary_ms, 0)
        self.last_summary_status = grown(self.last_summary_status, -1)
        names = self.groups[len(self.phase) :]
        self.phase = np.concatenate(
            [self.phase, np.array([zlib.crc32(n.encode()) for n in names], np.int64)]
        )
        return rows

    def _drop_group(self, g: int) -> None:
        self.positions.drop_row(g)
        for key in _PUBLISHED:
            setattr(self, key, np.delete(getattr(self, key), g, axis=0))
        self._win.drop_group(g)
        del self.groups[g]
        self.history.forget_written()
        self._index = {name: i for i, name in enumerate(self.groups)}

    # -- inputs ---------------------------------------------------------------------------

    def partition_limit(self) -> int:
        """Commits are accepted for partitions below this (see MAX_PARTITIONS_UNSAMPLED)."""
        if len(self.t_ms) and self.width:
            return max(2 * self.width, 64)
        return MAX_PARTITIONS_UNSAMPLED

    def add_sample(
        self, sampled_at_ms: int, high_watermarks: list[int] | tuple[int, ...], leaders: Any = ()
    ) -> bool:
        """Append one sample; False (and nothing changes) for a replayed or older sample."""
        if sampled_at_ms <= self.last_sample_ms:
            return False
        row = np.asarray(high_watermarks, dtype=np.int64)
        width = max(len(row), self.width)
        if width > self.width:
            self.history.replace(self.t_ms, _widen(self.hw, width, 0))
        row = _widen(row, width, -1)
        if len(self.t_ms):
            # a partition whose ListOffsets failed (-1) keeps its last known HWM
            row = np.where(row < 0, self.hw[-1], row)
            row = np.maximum(row, self.hw[-1])  # HWMs never go back (truncation aside)
        else:
            row = np.maximum(row, 0)
        h = self.history
        leaders = np.asarray(leaders, dtype=np.int64) if len(leaders) else h.leaders
        h.leaders = _widen(leaders, width, -1)
        h.append(sampled_at_ms, row, self.cfg.history_bound, self.cfg.history_rows)
        self._widen(width)
        return True

    def record_read(self, group: str, partition: int, offset: int, record_ms: int) -> None:
        """The timestamp of the record at ``offset``, read from the broker (an edge does
        the read; see docs/lag-model.md): the exact time lag while the group's committed
        offset stays there. Unknown groups and partitions are ignored."""
        g = self._index.get(group)
        if g is None or not 0 <= partition < self._width or offset < 0 or record_ms <= 0:
            return
        self.positions.record_read(g, partition, offset, record_ms)

    # -- commits --------------------------------------------------------------------------

    def commit(self, group: str, partition: int, offset: int, ts_ms: int) -> None:
        """Apply one commit. Replays (older than the last commit seen) change nothing; a
        partition the topic does not have is counted in ``rejected_commits``."""
        if not 0 <= partition < self.partition_limit():
            self.rejected_commits += 1
            return
        self._widen(partition + 1)
        self.positions.apply(self._group(group), partition, offset, ts_ms, self._win)

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
        if self.positions.repeats(g * self._width + p, len(self.groups) * self._width):
            for i, partition_, offset_, ts_ in zip(
                gi.tolist(), p.tolist(), off.tolist(), ts.tolist(), strict=True
            ):
                self.commit(groups[i], partition_, offset_, ts_)
            return {groups[i] for i in np.unique(gi).tolist()}
        fresh = self.positions.apply_cells(g, p, off, ts, self._win)
        if not fresh.any():  # replays and repeats: no group is touched
            return set()
        return {groups[i] for i in np.flatnonzero(np.bincount(gi[fresh], minlength=len(groups)))}

    def forget(self, group: str, partition: int) -> None:
        """The offset was deleted (tombstone): stop modelling this partition, and the group
        once it has no partition left."""
        g = self._index.get(group)
        if g is None:
            return
        if partition < self._width:
            self.positions.clear(g, partition)
        self.progress.forget(group, partition)
        if not self.positions.any_commit(g):
            self._drop_group(g)

    def position_state(self, group: str) -> dict[str, Any]:
        """What a commit changes for one group (``CommitState.row_state``)."""
        return self.positions.row_state(self._index[group], self._width)

    def load_position_state(self, group: str, d: dict[str, Any]) -> None:
        """``position_state`` read back (``CommitState.load_row``)."""
        self._widen(int(d["width"]))
        self.positions.load_row(self._group(group), d)

    # -- the tick -------------------------------------------------------------------------

    def observe(self, now_ms: int, *, slide: bool = True) -> TopicObservation:
        """Model every group at the latest sample, all groups at once. ``slide=False``
        judges between samples (``judge_reports``): the rate window is left as it is."""
        cfg, width = self.cfg, self.width
        if not len(self.t_ms):
            return self._observation(now_ms, np.zeros((len(self.groups), 0), bool), {})
        if slide:  # this tick's row into the rate window, rows older than it out
            self._win.slide(now_ms, cfg.window_ms, self.hw[-1], self.committed)
        hw_now = self.hw[-1]
        c = self.committed[:, :width]
        mask = c >= 0
        lag = np.maximum(hw_now[None, :] - c, 0)

        # rates and acceleration: least squares over the window, every series at once;
        # a group-partition's rows are those where it had a commit
        rates = self._win.fits(now_ms, hw_now, c, cfg.recent_s)
        lag_rate, produce, consume = rates.lag_rate, rates.produce, rates.consume

        # time lag: only where data waits
        tl, how = self.history.time_lag(c, now_ms)
        # a record timestamp read at the committed offset is the truth: it wins
        read = (
            (self.read_offset[:, :width] == c) & (lag > 0) & mask if self.positions.reads else None
        )
        if read is not None and read.any():
            tl = np.where(read, np.maximum(0.0, (now_ms - self.read_ms[:, :width]) / 1000.0), tl)
            how = np.where(read, READ, how).astype(np.int8)
        rew = self.rewind_ms[:, :width]
        inputs = StatusInputs(
            lag_offsets=lag,
            time_lag_s=tl,
            since_progress_s=(now_ms - self.progress_ms[:, :width]) / 1000.0,
            since_commit_s=(now_ms - self.commit_ms[:, :width]) / 1000.0,
            since_rewind_s=(
                np.where(rew > 0, (now_ms - rew) / 1000.0, np.inf) if rew.any() else None
            ),
            interval_s=self.interval_s[:, :width],
            lag_rate_per_s=lag_rate,
            produce_rate_per_s=produce[None, :],
            recent_lag_rate_per_s=rates.recent_rate,
        )
        if len(self.progress):  # workers' own reports, where present, judge the status
            inputs = self._overlay_reports(
                replace(
                    inputs,
                    warn_min_s=np.full(lag.shape, cfg.warn_min_s),
                    stop_min_s=np.full(lag.shape, cfg.stop_min_s),
                ),
                now_ms,
            )
        status = classify(inputs, cfg, self._status_limits(inputs))
        eta = drain_eta_s(lag, lag_rate, produce[None, :], status)
        return self._observation(
            now_ms,
            mask,
            {
                "committed": c.copy(),
                "lag": lag,
                "lag_rate_per_s": lag_rate,
                "lag_accel_per_s2": rates.accel,
                "produce_rate_per_s": produce,
                "consume_rate_per_s": consume,
                "time_lag_s": tl,
                "time_lag_source": how,
                "eta_drain_s": eta,
                "status": np.where(mask, status, 0).astype(np.int8),
                "last_commit_ms": self.commit_ms[:, :width].copy(),
            },
        )

    def _overlay_reports(self, inputs: StatusInputs, now_ms: int) -> StatusInputs:
        """``inputs`` with the cells workers report judged by their reports
        (``WorkerProgress.overlay``; the arrays given are not modified)."""
        return self.progress.overlay(
            inputs, index=self._index, t_ms=self.t_ms, hw=self.hw, now_ms=now_ms
        )

    def _status_limits(self, inputs: StatusInputs) -> Limits:
        """The status rules' ``Limits``, kept while the intervals are the model's own
        (worker reports overlay their cells' intervals and floors: then derived afresh)."""
        interval_s = inputs.interval_s
        if inputs.warn_min_s is not None or not np.may_share_memory(interval_s, self.interval_s):
            usual = usual_interval_s(interval_s, self.cfg)
            return Limits.of(usual, self.cfg, inputs.warn_min_s, inputs.stop_min_s)
        kept = self.positions.limits
        if kept is None or kept.usual.shape != interval_s.shape:
            kept = self.positions.limits = Limits.of(
                usual_interval_s(interval_s, self.cfg), self.cfg
            )
        return kept

    def judge_reports(self, keys: list[tuple[str, int]]) -> TopicObservation | None:
        """Between samples, as worker reports arrive: the observation as of the newest
        report of ``keys`` that shows a stalled worker (``WorkerProgress.suspects``), or
        None when none does (the usual case: nothing is computed).

        The status of a reported partition needs only the report and the last sample's HWM,
        so it can be judged the moment the report lands instead of at the next sampler
        tick: a stall is seen one report interval after it shows, whatever the phase of
        the samples, and a report that just missed a sample costs nothing. Only the
        reported cells' statuses are to be used (``reported_mask``): commit-judged cells
        are aligned with their commits at samples only."""
        if not len(self.t_ms) or not len(self.progress):
            return None
        # a partition already at STALL or worse has nothing sooner to tell: its worker's
        # reports wait for the samples (a long stall is not re-modelled 8 times a second)
        done = SEVERITY[LagStatus.STALL]
        last = self.last_status
        keys = [
            (g, p)
            for g, p in keys
            if (gi := self._index.get(g)) is None or p >= last.shape[1] or last[gi, p] < done
        ]
        at_ms = self.progress.suspects(keys, self.hw[-1], self.cfg.warn_factor)
        if not at_ms:
            return None
        return self.observe(max(at_ms, self.last_sample_ms), slide=False)

    def reported_mask(self, shape: tuple[int, int]) -> np.ndarray:
        """(groups x partitions): the cells a worker's report judges."""
        out = np.zeros(shape, bool)
        for g, p in self.progress.reporters(self._index):
            if g < shape[0] and p < shape[1]:
                out[g, p] = True
        return out

    def _observation(
        self, now_ms: int, mask: np.ndarray, arrays: dict[str, np.ndarray]
    ) -> TopicObservation:
        shape, width = mask.shape, mask.shape[1]
        if not arrays:  # nothing sampled yet: every number at its empty value
            arrays = {k: np.full(width if k in _PER_PARTITION else shape, fill, dtype)
                      for k, (fill, dtype) in _EMPTY.items()}  # fmt: skip
        return TopicObservation(
            topic=self.topic,
            now_ms=now_ms,
            groups=list(self.groups),
            share_groups=self.share_groups,
            mask=mask,
            high_watermark=self.hw[-1].copy() if len(self.t_ms) else np.zeros(0, np.int64),
            leaders=_widen(self.leaders, width, -1)[:width],
            topic_partitions=width,
            **arrays,
        )

    # -- persistence ----------------------------------------------------------------------

    def hw_state(self) -> dict[str, Any]:
        """The whole HWM history (``history_state`` writes it in two parts)."""
        return self.history.state()

    def history_state(self, now_ms: int) -> dict[str, dict[str, Any]]:
        """What to persist of the HWM history (``HwTable.history_state``)."""
        return self.history.history_state(now_ms)

    def load_hw_state(self, d: dict[str, Any], old: dict[str, Any] | None = None) -> None:
        """Restore the history from ``hw`` (and ``hwold``, the rows before it, if any)."""
        self.history.load(d, old)
        self._widen(self.width)

    def window_state(self) -> dict[str, Any]:
        """The rate window of every group: larger, written periodically (a lost row only
        thins the fit)."""
        return {
            "groups": list(self.groups),
            "w_t": _enc(self.w_t),
            "w_hw": _enc(self.w_hw),
            "w_c": _enc(self.w_c),
            "last_status": _enc(self.last_status),
            "last_snapshot_ms": _enc(self.last_snapshot_ms),
        }

    def load_window_state(self, d: dict[str, Any]) -> None:
        """Restore the window rows of the groups that are known (positions load first)."""
        w_t, w_hw, w_c = _dec(d["w_t"]), _dec(d["w_hw"]), _dec(d["w_c"])
        status, snap = _dec(d["last_status"]), _dec(d["last_snapshot_ms"])
        self._widen(max(w_hw.shape[1], w_c.shape[2]))
        hw_rows = _widen(w_hw, self._width, 0)[:, : self._width].copy()
        hw_rows[:, self.width :] = 0  # partitions not sampled yet: HWM 0, as when they come
        rows_c = np.full((len(self.groups), len(w_t), self._width), -1, np.int64)
        for i, name in enumerate(d["groups"]):
            g = self._index.get(name)
            if g is not None:
                rows_c[g, :, : w_c.shape[2]] = w_c[i]
                self.last_status[g, : status.shape[1]] = status[i]
                self.last_snapshot_ms[g] = snap[i]
        self._win.load(w_t, hw_rows, rows_c)
