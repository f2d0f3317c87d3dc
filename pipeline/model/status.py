"""The status rules of the lag model: Burrow's vocabulary, judged every sample.

Pure and numpy-based: one status code per group-partition (``SEVERITY``), the first rule
that holds wins, most severe first (see ``classify``). What the rules judge arrives as one
``StatusInputs``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.model.config import LagConfig
from schemas.lag import SEVERITY, LagStatus

STATUS_BY_CODE = list(LagStatus)  # code = SEVERITY[status]


@dataclass(frozen=True, eq=False)
class StatusInputs:
    """What the status rules judge, per cell: every array of one shape (groups x partitions
    in the model; ``produce_rate_per_s`` may be one row, broadcast). Optional inputs left
    None skip the rules that need them, or take the config's value."""

    #: offsets waiting to be consumed (high watermark - committed offset)
    lag_offsets: np.ndarray
    #: how long the oldest waiting message has waited
    time_lag_s: np.ndarray
    #: since the committed offset last advanced
    since_progress_s: np.ndarray
    #: since the group last committed
    since_commit_s: np.ndarray
    #: the usual time between advances, as learned (nan: not learned yet)
    interval_s: np.ndarray
    #: since the committed offset went back (None: it never did)
    since_rewind_s: np.ndarray | None = None
    #: the lag's least-squares slope over the rate window
    lag_rate_per_s: np.ndarray | None = None
    produce_rate_per_s: np.ndarray | None = None
    #: the lag's slope over the last ``recent_s``
    recent_lag_rate_per_s: np.ndarray | None = None
    #: per-cell WARN floor where worker reports judge (None: ``cfg.warn_min_s``)
    warn_min_s: np.ndarray | None = None
    #: per-cell STOP/STALL floor where worker reports judge (None: ``cfg.stop_min_s``)
    stop_min_s: np.ndarray | None = None
    #: cells whose worker released them and that no member has taken since
    released: np.ndarray | None = None


def usual_interval_s(interval_s: np.ndarray, cfg: LagConfig) -> np.ndarray:
    """The usual progress interval the rules scale by: the learned one, or the initial
    guess where none is learned yet, capped at ``max_interval_s``."""
    usual = np.where(np.isnan(interval_s), cfg.initial_interval_s, interval_s)
    np.maximum(usual, 0.0, out=usual)
    return np.minimum(usual, cfg.max_interval_s, out=usual)


@dataclass
class Limits:
    """What the rules compare against, per cell, from the usual interval alone (and the
    floors): the same from tick to tick until a commit teaches a cell a new interval, so
    the model keeps them (``update`` the cells commits changed) instead of deriving them
    again every sample."""

    usual: np.ndarray
    stop_after: np.ndarray  # STOP/STALL: no progress for this long
    warn_after: np.ndarray  # WARN: no progress for this long
    behind_after: np.ndarray  # WARN: the oldest waiting message waited this long
    spans_window: np.ndarray  # the growth rule's window holds more than two intervals
    spans_recent: np.ndarray  # ...and the last recent_s does

    @classmethod
    def of(
        cls,
        usual: np.ndarray,
        cfg: LagConfig,
        warn_min_s: np.ndarray | None = None,
        stop_min_s: np.ndarray | None = None,
    ) -> Limits:
        slack = cfg.commit_visibility_s
        # the STOP/STALL floor: per cell where worker progress judges (a paused whole worker)
        stop_floor = cfg.stop_min_s if stop_min_s is None else stop_min_s
        # the WARN floor: per cell where worker progress judges (its own floors)
        floor = cfg.warn_min_s if warn_min_s is None else warn_min_s
        # 1.5 intervals + 0.1 s, never later than the 2 intervals of before (fast committers)
        behind = np.minimum(cfg.time_lag_factor * usual + cfg.time_lag_allowance_s, 2.0 * usual)
        return cls(
            usual=usual,
            stop_after=np.maximum(stop_floor, cfg.stop_factor * usual) + slack,
            warn_after=np.maximum(floor, cfg.warn_factor * usual) + slack,
            behind_after=np.maximum(floor, behind) + slack,
            spans_window=2.0 * usual < cfg.window_s,
            spans_recent=2.0 * usual < cfg.recent_s,
        )

    def update(self, g: np.ndarray, p: np.ndarray, interval_s: np.ndarray, cfg: LagConfig) -> None:
        """The cells ``(g, p)`` with their new intervals (no per-cell floors)."""
        cells = Limits.of(usual_interval_s(interval_s, cfg), cfg)
        for name in ("usual", "stop_after", "warn_after", "behind_after"):
            getattr(self, name)[g, p] = getattr(cells, name)
        self.spans_window[g, p] = cells.spans_window
        self.spans_recent[g, p] = cells.spans_recent


def classify(x: StatusInputs, cfg: LagConfig, limits: Limits | None = None) -> np.ndarray:
    """Status codes per partition; the first rule that holds wins, most severe first.

    1. REWIND: the committed offset went back (an offset reset) within ``rewind_hold_s``.
    2. STOP, released: data waits on a partition its worker gave up and no member has taken
       since (``released``, from worker progress): nobody consumes it, from the first moment.
    3. STALL: data waits, the group keeps committing, but the offset does not move.
    4. STOP: data waits, and neither the offset has moved nor has the oldest waiting message
       been waiting for ``stop_factor`` x the usual progress interval (>= ``stop_min_s``):
       seen from the growing time lag, without waiting for another commit.
    5. ERR: the oldest waiting message waited ``err_time_lag_s`` beyond the usual progress
       interval (a group that commits every 5 s shows up to 5 s of time lag while it keeps
       up: that much is its commit cadence, not lag).
    6. WARN: no progress for ``warn_factor`` x the usual interval, or the oldest waiting
       message waited ``time_lag_factor`` x the usual interval + ``time_lag_allowance_s``
       (or 2 intervals, if that is less)
       (a stall seen from the time it began, not from the last commit; a partition that still
       progresses but falls behind: a hotspot), or ``warn_time_lag_s`` beyond it,
       or the lag keeps growing (Burrow's WARN: a least-squares lag rate above
       ``growth_ratio`` of the produce rate) with data waiting longer than the warn level,
       over a span holding more than two usual intervals.
    7. OK: otherwise. A caught-up consumer (no data waiting) is OK however long it has been
       idle: Burrow's false alarm on idle topics does not happen here.

    ``limits``: ``Limits.of(usual_interval_s(x.interval_s, cfg), cfg)`` when the caller
    keeps them between ticks (then ``x.warn_min_s`` and ``x.stop_min_s`` must be None).
    ``x.since_rewind_s`` None: no offset went back (the REWIND rule is skipped).
    """
    if limits is None:
        usual_s = usual_interval_s(x.interval_s, cfg)
        limits = Limits.of(usual_s, cfg, x.warn_min_s, x.stop_min_s)
    lag, time_lag, since_progress_s = x.lag_offsets, x.time_lag_s, x.since_progress_s
    lag_rate, produce_rate, recent_lag_rate = (
        x.lag_rate_per_s,
        x.produce_rate_per_s,
        x.recent_lag_rate_per_s,
    )
    usual, stop_after, warn_after = limits.usual, limits.stop_after, limits.warn_after
    slack = cfg.commit_visibility_s
    waiting = lag > 0
    # the time lag beyond what the commit cadence explains: committing every 5 s, a group
    # that keeps up shows a 0-5 s sawtooth of time lag (and of lag growing between commits)
    beyond_cadence = time_lag - usual
    stuck = np.minimum(since_progress_s, time_lag)  # how long data has waited with no progress
    growing = np.zeros_like(waiting)
    # A lag slope says something only over several commits: between two commits the lag
    # grows by design (a group committing every 5 s shows the produce rate as its lag rate
    # for 5 s). So each growth rule needs its span to hold more than two usual intervals.
    if lag_rate is not None and produce_rate is not None:
        growing = (
            (lag_rate > np.maximum(1.0, cfg.growth_ratio * produce_rate))
            & (time_lag > warn_after)
            & limits.spans_window
        )
        if recent_lag_rate is not None:
            # the last second alone: an avalanche shows within a few samples, long before
            # the full window's slope turns; half the produce rate is far above the noise
            # of a healthy consumer's commit sawtooth
            floor = np.maximum(cfg.recent_growth_min_per_s, cfg.recent_growth_ratio * produce_rate)
            growing |= (
                (recent_lag_rate > floor)
                & (time_lag > cfg.warn_min_s + slack)
                & limits.spans_recent
            )
    rewound = (
        np.zeros_like(waiting) if x.since_rewind_s is None else x.since_rewind_s < cfg.rewind_hold_s
    )
    rules = [
        (rewound, LagStatus.REWIND),
        (
            waiting & x.released if x.released is not None else np.zeros_like(waiting),
            LagStatus.STOP,
        ),
        (waiting & (stuck > stop_after) & (x.since_commit_s < stop_after), LagStatus.STALL),
        (waiting & (stuck > stop_after), LagStatus.STOP),
        (waiting & (beyond_cadence >= cfg.err_time_lag_s), LagStatus.ERR),
        (
            waiting
            & (
                (stuck > warn_after)
                | (time_lag > limits.behind_after)
                | (beyond_cadence >= cfg.warn_time_lag_s)
                | growing
            ),
            LagStatus.WARN,
        ),
    ]
    return np.select(
        [cond for cond, _ in rules], [SEVERITY[s] for _, s in rules], SEVERITY[LagStatus.OK]
    ).astype(np.int8)
