"""The lag model: from watermark samples and commits to lag, rates, time lag and status.

Pure and numpy-based: no Kafka, no Quix, no clock (``now_ms`` is the sample's event time),
so the same inputs always give the same outputs and every rule is unit-tested.

One ``TopicModel`` per topic holds
- the topic's high-watermark history: rows of (sample time, every partition's HWM). The
  last ``window_s`` are kept at full rate (rates and acceleration are fitted there); older
  rows are thinned by halves when the table is full, so time lag can be interpolated far
  back in bounded memory (kafka-lag-exporter's offset->time table, without its 30 s poll);
- per consumer group on the topic, a ``GroupModel``: committed offset, last commit time,
  last progress time and the usual interval between progress per partition, and the window
  of (time, HWM, committed) rows the rates are fitted on.

Every sample updates every group on the topic, so lag is observed every tick, not only when
consumers commit (Burrow's blind spot), and a consumer that stopped committing is seen from
its growing time lag without waiting for another commit.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from schemas.lag import SEVERITY, GroupLag, LagStatus, PartitionLag, WorstPartition

_STATUS_BY_CODE = list(LagStatus)  # code = SEVERITY[status]


@dataclass(frozen=True, slots=True)
class LagConfig:
    """Model knobs. Defaults suit 250 ms sampling; see docs/lag-model.md for each."""

    window_s: float = 10.0  # rates and acceleration are least-squares fits over this window
    history_rows: int = 256  # HWM rows kept per topic for time-lag interpolation
    warn_time_lag_s: float = 5.0  # WARN when the oldest unconsumed message waited this long
    err_time_lag_s: float = 30.0  # ERR beyond this
    warn_factor: float = 1.5  # WARN: no progress for warn_factor x the usual interval
    time_lag_factor: float = 2.0  # WARN: the oldest waiting message waited this x the interval
    stop_factor: float = 4.0  # STOP: no progress for stop_factor x the usual interval...
    stop_min_s: float = 0.5  # ...and at least this long
    warn_min_s: float = 0.15
    # a commit reaches the model tens of ms after it was written (offsets topic -> source ->
    # model) while samples are fresh: that much "no progress" is not evidence of a stall
    commit_visibility_s: float = 0.05
    initial_interval_s: float = 1.0  # usual progress interval before one is learned
    max_interval_s: float = 60.0
    interval_alpha: float = 0.3  # EWMA weight of the newest progress interval
    growth_ratio: float = 0.05  # WARN when the lag grows faster than this share of produce
    recent_s: float = 1.0  # ...or over the last second alone, faster than this share:
    recent_growth_ratio: float = 0.5
    recent_growth_min_per_s: float = 2.0
    rewind_hold_s: float = 5.0  # REWIND is reported this long after an offset went back
    worst_n: int = 5

    @property
    def window_ms(self) -> int:
        return int(self.window_s * 1000)


def _enc(a: np.ndarray) -> dict[str, Any]:
    return {"d": str(a.dtype), "s": list(a.shape), "b": base64.b64encode(a.tobytes()).decode()}


def _dec(d: dict[str, Any]) -> np.ndarray:
    raw = base64.b64decode(d["b"])
    return np.frombuffer(raw, dtype=np.dtype(d["d"])).reshape(d["s"]).copy()


def _widen(a: np.ndarray, width: int, fill: float | int) -> np.ndarray:
    """``a`` with its last axis padded to ``width`` columns of ``fill``."""
    if a.shape[-1] >= width:
        return a
    pad = [(0, 0)] * (a.ndim - 1) + [(0, width - a.shape[-1])]
    return np.pad(a, pad, constant_values=fill)


def _slopes(t_s: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least-squares slope of each column of ``y`` (rows at times ``t_s``), per second."""
    if len(t_s) < 2:
        return np.zeros(y.shape[1])
    x = t_s - t_s.mean()
    den = float(x @ x)
    if den == 0.0:
        return np.zeros(y.shape[1])
    return (x @ (y - y.mean(axis=0))) / den


def _accels(t_s: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Second derivative (per s^2) of a least-squares parabola through each column."""
    if len(t_s) < 3 or np.ptp(t_s) == 0.0:
        return np.zeros(y.shape[1])
    x = t_s - t_s.mean()
    # normal equations of [x^2, x, 1]: a 3x3 solve for every column at once (np.polyfit
    # does an SVD per call, ten times the cost, on the hot path of every sample)
    v = np.stack([x * x, x, np.ones_like(x)], axis=1)
    gram = v.T @ v
    if abs(np.linalg.det(gram)) < 1e-12:
        return np.zeros(y.shape[1])
    coef = np.linalg.solve(gram, v.T @ y.astype(np.float64))
    return 2.0 * coef[0]


@dataclass
class GroupModel:
    """One consumer group's progress on the partitions of one topic."""

    width: int
    committed: np.ndarray = field(init=False)  # -1: no commit seen on this partition
    commit_ms: np.ndarray = field(init=False)
    progress_ms: np.ndarray = field(init=False)  # when the committed offset last advanced
    interval_s: np.ndarray = field(init=False)  # EWMA of the time between advances (nan: unknown)
    rewind_ms: np.ndarray = field(init=False)
    w_t: np.ndarray = field(init=False)  # window rows: sample times (ms)
    w_hw: np.ndarray = field(init=False)  # window rows: HWM per partition
    w_c: np.ndarray = field(init=False)  # window rows: committed per partition
    last_snapshot_ms: int = 0
    last_status: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        w = self.width
        self.committed = np.full(w, -1, np.int64)
        self.commit_ms = np.zeros(w, np.int64)
        self.progress_ms = np.zeros(w, np.int64)
        self.interval_s = np.full(w, np.nan)
        self.rewind_ms = np.zeros(w, np.int64)
        self.w_t = np.zeros(0, np.int64)
        self.w_hw = np.zeros((0, w), np.int64)
        self.w_c = np.zeros((0, w), np.int64)
        self.last_status = np.zeros(w, np.int8)

    def widen(self, width: int) -> None:
        if width <= self.width:
            return
        self.committed = _widen(self.committed, width, -1)
        self.commit_ms = _widen(self.commit_ms, width, 0)
        self.progress_ms = _widen(self.progress_ms, width, 0)
        self.interval_s = _widen(self.interval_s, width, np.nan)
        self.rewind_ms = _widen(self.rewind_ms, width, 0)
        self.w_hw = _widen(self.w_hw, width, 0)
        self.w_c = _widen(self.w_c, width, -1)
        self.last_status = _widen(self.last_status, width, 0)
        self.width = width

    def commit(self, partition: int, offset: int, ts_ms: int, alpha: float) -> None:
        """Apply one commit. Replays (older than the last commit seen) change nothing."""
        self.widen(partition + 1)
        p = partition
        if ts_ms < self.commit_ms[p]:
            return
        prev = int(self.committed[p])
        if prev >= 0 and offset < prev:
            self.rewind_ms[p] = ts_ms
            self.progress_ms[p] = ts_ms
        elif offset > prev:
            if prev >= 0 and self.progress_ms[p] > 0:
                dt_s = (ts_ms - int(self.progress_ms[p])) / 1000.0
                old = self.interval_s[p]
                self.interval_s[p] = dt_s if np.isnan(old) else (1 - alpha) * old + alpha * dt_s
            self.progress_ms[p] = ts_ms
            if len(self.w_t) and self.w_t[-1] >= ts_ms:
                # a commit that arrives after samples taken later than it (a replay after a
                # restart, a slow coordinator): correct the window rows it should have been in
                late = self.w_t >= ts_ms
                self.w_c[late, p] = np.maximum(self.w_c[late, p], offset)
        self.commit_ms[p] = ts_ms
        self.committed[p] = offset

    def forget(self, partition: int) -> None:
        """The offset was deleted (tombstone): stop modelling this partition."""
        if partition < self.width:
            self.committed[partition] = -1
            self.interval_s[partition] = np.nan
            self.rewind_ms[partition] = 0

    @property
    def empty(self) -> bool:
        return not bool((self.committed >= 0).any())

    _POSITION = ("committed", "commit_ms", "progress_ms", "interval_s", "rewind_ms")
    _WINDOW = ("w_t", "w_hw", "w_c", "last_status")

    def position_state(self) -> dict[str, Any]:
        """What a commit changes: small, written on every commit batch."""
        return {"width": self.width, **{k: _enc(getattr(self, k)) for k in self._POSITION}}

    def window_state(self) -> dict[str, Any]:
        """The rate window: larger, written periodically (a lost row only thins the fit)."""
        return {
            "width": self.width,
            "last_snapshot_ms": self.last_snapshot_ms,
            **{k: _enc(getattr(self, k)) for k in self._WINDOW},
        }

    @classmethod
    def from_state(
        cls, position: dict[str, Any], window: dict[str, Any] | None = None
    ) -> GroupModel:
        g = cls(int(position["width"]))
        for k in cls._POSITION:
            setattr(g, k, _dec(position[k]))
        if window:
            g.last_snapshot_ms = int(window.get("last_snapshot_ms", 0))
            for k in cls._WINDOW:
                setattr(g, k, _dec(window[k]))
        width = max(int(position["width"]), int(window["width"]) if window else 0)
        g.width = -1  # arrays saved at different widths: pad every one of them to ``width``
        g.widen(width)
        return g


@dataclass
class Observation:
    """Everything one tick computed for one group on one topic (arrays per partition)."""

    group: str
    topic: str
    now_ms: int
    partitions: np.ndarray  # which partitions the group has committed on
    committed: np.ndarray
    high_watermark: np.ndarray
    lag: np.ndarray
    lag_rate_per_s: np.ndarray
    lag_accel_per_s2: np.ndarray
    produce_rate_per_s: np.ndarray
    consume_rate_per_s: np.ndarray
    time_lag_s: np.ndarray
    eta_drain_s: np.ndarray  # nan: not draining
    status: np.ndarray  # int8 codes: SEVERITY
    last_commit_ms: np.ndarray
    leaders: np.ndarray
    topic_partitions: int

    def partition_lag(self, i: int) -> PartitionLag:
        eta = float(self.eta_drain_s[i])
        return PartitionLag(
            group=self.group,
            topic=self.topic,
            partition=int(self.partitions[i]),
            observed_at_ms=self.now_ms,
            committed_offset=int(self.committed[i]),
            high_watermark=int(self.high_watermark[i]),
            lag_offsets=int(self.lag[i]),
            lag_rate_per_s=round(float(self.lag_rate_per_s[i]), 3),
            lag_accel_per_s2=round(float(self.lag_accel_per_s2[i]), 3),
            produce_rate_per_s=round(float(self.produce_rate_per_s[i]), 3),
            consume_rate_per_s=round(float(self.consume_rate_per_s[i]), 3),
            time_lag_s=round(float(self.time_lag_s[i]), 3),
            eta_drain_s=None if np.isnan(eta) else round(eta, 3),
            status=_STATUS_BY_CODE[int(self.status[i])],
            last_commit_ms=int(self.last_commit_ms[i]),
            leader=int(self.leaders[i]),
        )

    def summary(self, worst_n: int) -> GroupLag:
        n = len(self.partitions)
        order = np.lexsort((-self.time_lag_s, -self.status.astype(np.int64)))[:worst_n]
        worst = tuple(
            WorstPartition(
                partition=int(self.partitions[i]),
                lag_offsets=int(self.lag[i]),
                time_lag_s=round(float(self.time_lag_s[i]), 3),
                lag_rate_per_s=round(float(self.lag_rate_per_s[i]), 3),
                lag_accel_per_s2=round(float(self.lag_accel_per_s2[i]), 3),
                produce_rate_per_s=round(float(self.produce_rate_per_s[i]), 3),
                consume_rate_per_s=round(float(self.consume_rate_per_s[i]), 3),
                status=_STATUS_BY_CODE[int(self.status[i])],
                leader=int(self.leaders[i]),
            )
            for i in order
        )
        return GroupLag(
            group=self.group,
            topic=self.topic,
            observed_at_ms=self.now_ms,
            status=_STATUS_BY_CODE[int(self.status.max())] if n else LagStatus.OK,
            total_lag_offsets=int(self.lag.sum()),
            max_time_lag_s=round(float(self.time_lag_s.max()), 3) if n else 0.0,
            lag_rate_per_s=round(float(self.lag_rate_per_s.sum()), 3),
            partitions=n,
            topic_partitions=self.topic_partitions,
            worst=worst,
        )


def time_lag_s(t_ms: np.ndarray, hw: np.ndarray, committed: np.ndarray, now_ms: int) -> np.ndarray:
    """Seconds since the high watermark passed each committed offset (0 when caught up).

    ``hw`` rows are samples at ``t_ms`` (ascending; HWMs non-decreasing down each column).
    The message at offset c was written when the HWM went from <= c to c + 1: between the
    last row with hw <= c and the first with hw > c, interpolated linearly. Older than the
    table: extrapolated at the table's average produce rate. Never NaN, never negative.
    """
    n, width = hw.shape
    out = np.zeros(width)
    if n == 0:
        return out
    cur = hw[-1]
    behind = committed < cur
    if not behind.any():
        return out
    # first row whose HWM is beyond c (exists: the last row is, for partitions behind)
    idx = (hw <= committed[None, :]).sum(axis=0)
    cols = np.nonzero(behind)[0]
    i = idx[cols]
    inside = i > 0
    t_star = np.empty(len(cols))
    # interpolated between rows i-1 and i
    ci = cols[inside]
    ii = i[inside]
    h0, h1 = hw[ii - 1, ci].astype(np.float64), hw[ii, ci].astype(np.float64)
    t0, t1 = t_ms[ii - 1].astype(np.float64), t_ms[ii].astype(np.float64)
    frac = np.clip((committed[ci] + 1 - h0) / np.maximum(h1 - h0, 1.0), 0.0, 1.0)
    t_star[inside] = t0 + frac * (t1 - t0)
    # before the oldest row: extrapolate with the table's mean produce rate
    co = cols[~inside]
    if len(co):
        span_ms = float(t_ms[-1] - t_ms[0])
        grown = (hw[-1, co] - hw[0, co]).astype(np.float64)
        rate_per_ms = np.where(span_ms > 0, grown / max(span_ms, 1.0), 0.0)
        missing = (hw[0, co] - committed[co]).astype(np.float64)
        safe_rate = np.where(rate_per_ms > 0, rate_per_ms, 1.0)
        back_ms = np.where(rate_per_ms > 0, missing / safe_rate, 0.0)
        t_star[~inside] = float(t_ms[0]) - back_ms
    out[cols] = np.maximum(0.0, (now_ms - t_star) / 1000.0)
    return out


def classify(
    *,
    lag: np.ndarray,
    time_lag: np.ndarray,
    since_progress_s: np.ndarray,
    since_commit_s: np.ndarray,
    since_rewind_s: np.ndarray,
    interval_s: np.ndarray,
    cfg: LagConfig,
    lag_rate: np.ndarray | None = None,
    produce_rate: np.ndarray | None = None,
    recent_lag_rate: np.ndarray | None = None,
) -> np.ndarray:
    """Status codes per partition; the first rule that holds wins, most severe first.

    1. REWIND: the committed offset went back (an offset reset) within ``rewind_hold_s``.
    2. STALL: data waits, the group keeps committing, but the offset does not move.
    3. STOP: data waits, and neither the offset has moved nor has the oldest waiting message
       been waiting for ``stop_factor`` x the usual progress interval (>= ``stop_min_s``):
       seen from the growing time lag, without waiting for another commit.
    4. ERR: the oldest waiting message waited ``err_time_lag_s``.
    5. WARN: no progress for ``warn_factor`` x the usual interval, or the oldest waiting
       message waited ``time_lag_factor`` x the usual interval (a partition that still
       progresses but falls behind: a hotspot), or ``warn_time_lag_s``,
       or the lag keeps growing (Burrow's WARN: a least-squares lag rate above
       ``growth_ratio`` of the produce rate) with data waiting longer than the warn level.
    6. OK: otherwise. A caught-up consumer (no data waiting) is OK however long it has been
       idle: Burrow's false alarm on idle topics does not happen here.
    """
    usual = np.clip(np.nan_to_num(interval_s, nan=cfg.initial_interval_s), 0.0, cfg.max_interval_s)
    slack = cfg.commit_visibility_s
    stop_after = np.maximum(cfg.stop_min_s, cfg.stop_factor * usual) + slack
    warn_after = np.maximum(cfg.warn_min_s, cfg.warn_factor * usual) + slack
    behind_after = np.maximum(cfg.warn_min_s, cfg.time_lag_factor * usual) + slack
    waiting = lag > 0
    stuck = np.minimum(since_progress_s, time_lag)  # how long data has waited with no progress
    growing = np.zeros_like(waiting)
    if lag_rate is not None and produce_rate is not None:
        growing = (lag_rate > np.maximum(1.0, cfg.growth_ratio * produce_rate)) & (
            time_lag > warn_after
        )
        if recent_lag_rate is not None:
            # the last second alone: an avalanche shows within a few samples, long before
            # the full window's slope turns; half the produce rate is far above the noise
            # of a healthy consumer's commit sawtooth
            floor = np.maximum(cfg.recent_growth_min_per_s, cfg.recent_growth_ratio * produce_rate)
            growing |= (recent_lag_rate > floor) & (time_lag > cfg.warn_min_s + slack)
    rules = [
        (since_rewind_s < cfg.rewind_hold_s, LagStatus.REWIND),
        (waiting & (stuck > stop_after) & (since_commit_s < stop_after), LagStatus.STALL),
        (waiting & (stuck > stop_after), LagStatus.STOP),
        (waiting & (time_lag >= cfg.err_time_lag_s), LagStatus.ERR),
        (
            waiting
            & (
                (stuck > warn_after)
                | (time_lag > behind_after)
                | (time_lag >= cfg.warn_time_lag_s)
                | growing
            ),
            LagStatus.WARN,
        ),
    ]
    return np.select(
        [cond for cond, _ in rules], [SEVERITY[s] for _, s in rules], SEVERITY[LagStatus.OK]
    ).astype(np.int8)


class TopicModel:
    """The model of one topic: its HWM history and every group that commits on it."""

    def __init__(self, topic: str, cfg: LagConfig) -> None:
        self.topic = topic
        self.cfg = cfg
        self.t_ms = np.zeros(0, np.int64)
        self.hw = np.zeros((0, 0), np.int64)
        self.leaders = np.zeros(0, np.int64)
        self.groups: dict[str, GroupModel] = {}

    @property
    def width(self) -> int:
        return int(self.hw.shape[1])

    @property
    def last_sample_ms(self) -> int:
        return int(self.t_ms[-1]) if len(self.t_ms) else 0

    # -- inputs ---------------------------------------------------------------------------

    def commit(self, group: str, partition: int, offset: int, ts_ms: int) -> None:
        g = self.groups.get(group)
        if g is None:
            g = self.groups[group] = GroupModel(max(self.width, partition + 1))
        g.commit(partition, offset, ts_ms, self.cfg.interval_alpha)

    def forget(self, group: str, partition: int) -> None:
        g = self.groups.get(group)
        if g is None:
            return
        g.forget(partition)
        if g.empty:
            del self.groups[group]

    def add_sample(
        self, sampled_at_ms: int, high_watermarks: list[int] | tuple[int, ...], leaders: Any = ()
    ) -> bool:
        """Append one sample; False (and nothing changes) for a replayed or older sample."""
        if sampled_at_ms <= self.last_sample_ms:
            return False
        row = np.asarray(high_watermarks, dtype=np.int64)
        width = max(len(row), self.width)
        if width > self.width:
            self.hw = _widen(self.hw, width, 0)
        row = _widen(row, width, -1)
        if len(self.t_ms):
            # a partition whose ListOffsets failed (-1) keeps its last known HWM
            row = np.where(row < 0, self.hw[-1], row)
            row = np.maximum(row, self.hw[-1])  # HWMs never go back (truncation aside)
        else:
            row = np.maximum(row, 0)
        if len(leaders):
            self.leaders = _widen(np.asarray(leaders, dtype=np.int64), width, -1)
        else:
            self.leaders = _widen(self.leaders, width, -1)
        if len(self.t_ms) >= self.cfg.history_rows:
            self._thin(sampled_at_ms)
        self.t_ms = np.append(self.t_ms, sampled_at_ms)
        self.hw = np.vstack([self.hw, row[None, :]])
        return True

    def _thin(self, now_ms: int) -> None:
        """Halve the rows older than the window (keeping the oldest); never drop the window."""
        old = self.t_ms < now_ms - self.cfg.window_ms
        n_old = int(old.sum())
        if n_old >= 2:
            keep = np.ones(len(self.t_ms), bool)
            keep[1:n_old:2] = False  # drop every other old row after the oldest
        else:
            keep = np.ones(len(self.t_ms), bool)
            keep[0] = False
        self.t_ms, self.hw = self.t_ms[keep], self.hw[keep]

    # -- the tick -------------------------------------------------------------------------

    def observe(self, now_ms: int) -> list[Observation]:
        """Model every group at the latest sample: one Observation per group."""
        if not len(self.t_ms):
            return []
        cfg = self.cfg
        width = self.width
        hw_now = self.hw[-1]
        out = []
        for name, g in self.groups.items():
            g.widen(width)
            c_all = g.committed[:width]
            # the window rows for rates: append this tick, drop rows older than the window
            g.w_t = np.append(g.w_t, now_ms)
            g.w_hw = np.vstack([_widen(g.w_hw, width, 0)[:, :width], hw_now[None, :]])
            g.w_c = np.vstack([_widen(g.w_c, width, -1)[:, :width], c_all[None, :]])
            keep = g.w_t >= now_ms - cfg.window_ms
            g.w_t, g.w_hw, g.w_c = g.w_t[keep], g.w_hw[keep], g.w_c[keep]

            cols = np.nonzero(c_all >= 0)[0]
            if not len(cols):
                continue
            c = c_all[cols]
            hw = hw_now[cols]
            lag = np.maximum(hw - c, 0)
            t_s = g.w_t / 1000.0
            wc = g.w_c[:, cols]
            valid_rows = (wc >= 0).all(axis=1)
            t_s_v, whw, wc = t_s[valid_rows], g.w_hw[valid_rows][:, cols], wc[valid_rows]
            produce = _slopes(t_s_v, whw.astype(np.float64))
            consume = _slopes(t_s_v, wc.astype(np.float64))
            wlag = np.maximum(whw - wc, 0).astype(np.float64)
            lag_rate = _slopes(t_s_v, wlag)
            recent = t_s_v >= t_s_v[-1] - cfg.recent_s if len(t_s_v) else t_s_v.astype(bool)
            recent_rate = _slopes(t_s_v[recent], wlag[recent]) if recent.sum() >= 4 else None
            accel = _accels(t_s_v, wlag)
            tl = time_lag_s(self.t_ms, self.hw[:, cols], c, now_ms)
            with np.errstate(divide="ignore", invalid="ignore"):
                eta = np.where((lag_rate < 0) & (lag > 0), lag / -lag_rate, np.nan)
            eta = np.where(lag == 0, 0.0, eta)
            rew = g.rewind_ms[cols]
            status = classify(
                lag=lag,
                time_lag=tl,
                since_progress_s=(now_ms - g.progress_ms[cols]) / 1000.0,
                since_commit_s=(now_ms - g.commit_ms[cols]) / 1000.0,
                since_rewind_s=np.where(rew > 0, (now_ms - rew) / 1000.0, np.inf),
                interval_s=g.interval_s[cols],
                cfg=cfg,
                lag_rate=lag_rate,
                produce_rate=produce,
                recent_lag_rate=recent_rate,
            )
            out.append(
                Observation(
                    group=name,
                    topic=self.topic,
                    now_ms=now_ms,
                    partitions=cols,
                    committed=c,
                    high_watermark=hw,
                    lag=lag,
                    lag_rate_per_s=lag_rate,
                    lag_accel_per_s2=accel,
                    produce_rate_per_s=produce,
                    consume_rate_per_s=consume,
                    time_lag_s=tl,
                    eta_drain_s=eta,
                    status=status,
                    last_commit_ms=g.commit_ms[cols],
                    leaders=_widen(self.leaders, width, -1)[cols],
                    topic_partitions=width,
                )
            )
        return out

    # -- persistence ----------------------------------------------------------------------

    def hw_state(self) -> dict[str, Any]:
        return {"t_ms": _enc(self.t_ms), "hw": _enc(self.hw), "leaders": _enc(self.leaders)}

    def load_hw_state(self, d: dict[str, Any]) -> None:
        self.t_ms, self.hw, self.leaders = _dec(d["t_ms"]), _dec(d["hw"]), _dec(d["leaders"])
