"""The lag model's knobs (``LagConfig``): one place, read by the model and the settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.model.history import HistoryBound
from pipeline.model.progress import ProgressConfig


@dataclass(frozen=True, slots=True)
class LagConfig:
    """Model knobs. Defaults suit 250 ms sampling; see docs/lag-model.md for each."""

    window_s: float = 10.0  # rates and acceleration are least-squares fits over this window
    # the HWM history (pipeline/model/history.py): time lag within max(min gap, ratio x lag)
    history_rows: int = 4096  # hard cap on rows per topic (the bound needs ~1,500 for 24 h)
    history_min_gap_s: float = 1.0
    history_error_ratio: float = 0.01
    history_horizon_s: float = 86_400.0
    warn_time_lag_s: float = 5.0  # WARN when the oldest unconsumed message waited this long
    err_time_lag_s: float = 30.0  # ERR beyond this
    warn_factor: float = 1.5  # WARN: no progress for warn_factor x the usual interval
    # WARN: the oldest waiting message waited this x the usual interval, plus the allowance
    # (a consumer that keeps up shows at most one interval: the commit sawtooth). The time
    # lag counts from the stall itself, while "no progress" counts from the last commit,
    # which may come up to one interval after the stall and carry the work done before it:
    # this rule is what sees a stalled commit-only consumer 1.5 intervals after its stall
    time_lag_factor: float = 1.5
    time_lag_allowance_s: float = 0.1
    stop_factor: float = 4.0  # STOP: no progress for stop_factor x the usual interval...
    stop_min_s: float = 0.5  # ...and at least this long
    warn_min_s: float = 0.15
    # allowance on "no progress": the commits source holds each sample until the commits
    # written before it are in the model, so this covers only clock skew between the
    # coordinator (which stamps commits) and the sampler, and commit jitter beyond
    # warn_factor; every millisecond of it delays detection by as much
    commit_visibility_s: float = 0.02
    initial_interval_s: float = 5.0  # usual progress interval before one is learned
    max_interval_s: float = 60.0
    interval_alpha: float = 0.3  # EWMA weight of the newest progress interval
    growth_ratio: float = 0.05  # WARN when the lag grows faster than this share of produce
    recent_s: float = 1.0  # ...or over the last second alone, faster than this share:
    recent_growth_ratio: float = 0.5
    recent_growth_min_per_s: float = 2.0
    rewind_hold_s: float = 5.0  # REWIND is reported this long after an offset went back
    worst_n: int = 5
    # SDK workers' progress reports (pipeline/model/progress.py), where present
    progress: ProgressConfig = field(default_factory=ProgressConfig)

    @property
    def window_ms(self) -> int:
        return int(self.window_s * 1000)

    @property
    def history_bound(self) -> HistoryBound:
        return HistoryBound(
            full_rate_s=self.window_s,
            min_gap_s=self.history_min_gap_s,
            error_ratio=self.history_error_ratio,
            horizon_s=self.history_horizon_s,
            max_rows=self.history_rows,
        )
