"""The HWM history against the exact answer: produce-rate curves, consumer lags 1 s-24 h.

Each curve is a produce rate (messages/s) per partition; its integral H(t) is the exact
high watermark (floor). The model samples H every second for a day (as the sampler would,
at a coarser interval to keep the test fast), and is then asked the time lag of an offset
c = HWM(now - L) for lags L from 1 s to 24 h. The exact answer is now - T where H(T) = c + 1
(the message at c was written when the HWM reached c + 1). The stated bound must hold for
every one: |error| <= max(1 s, 1% of the true lag).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from pipeline.model.config import LagConfig
from pipeline.model.history import (
    EXTRAPOLATED,
    INTERPOLATED,
    SOURCE_NAMES,
    HistoryBound,
    compact,
    time_lag_s,
)
from pipeline.model.lag import TopicModel

DAY_S = 86_400.0
GRID_S = 0.05  # the curves are integrated on this grid
SAMPLE_S = 1.0  # the model's sample interval here (the pipeline's is 0.25 s)
START_MS = 1_800_000_000_000
LAGS_S = [1, 2, 5, 10, 30, 60, 120, 240, 330, 420, 600, 1_800, 3_600, 7_200, 21_600, 43_200]
LAGS_S += [86_000]

Rate = Callable[[np.ndarray], np.ndarray]


def constant(t: np.ndarray) -> np.ndarray:
    return np.full_like(t, 40.0)


def diurnal(t: np.ndarray) -> np.ndarray:
    return 60.0 * (1.0 + 0.9 * np.sin(2 * np.pi * t / DAY_S + 1.0))


def bursts(t: np.ndarray) -> np.ndarray:
    """1 msg/s, and 5,000 messages within 2 s every 10 minutes."""
    return np.where(t % 600 < 2, 2_500.0, 1.0)


def idle_stretches(t: np.ndarray) -> np.ndarray:
    """30 minutes at 20 msgs/s, then two hours of nothing, and again."""
    return np.where(t % 9_000 < 1_800, 20.0, 0.0)


def trickle(t: np.ndarray) -> np.ndarray:
    """One message every 7 s or so: a sparse topic."""
    return np.where(t % 7 < 0.05, 20.0, 0.0)


def created_mid_run(t: np.ndarray) -> np.ndarray:
    """Nothing until 13 h in (the partition does not exist), then a diurnal rate."""
    return np.where(t < 13 * 3_600, 0.0, diurnal(t))


CURVES: dict[str, list[Rate]] = {
    "constant": [constant],
    "diurnal": [diurnal, constant],
    "bursts": [bursts],
    "idle": [idle_stretches, diurnal],
    "trickle": [trickle],
    "created_mid_run": [constant, created_mid_run],
}


def simulate(rates: list[Rate], run_s: float) -> tuple[TopicModel, np.ndarray, np.ndarray]:
    """A model fed a day of samples of these curves; the grid times and cumulative counts."""
    grid = np.arange(0.0, run_s + GRID_S, GRID_S)
    cum = np.stack([np.concatenate([[0.0], np.cumsum(r(grid[:-1]) * GRID_S)]) for r in rates])
    model = TopicModel("t", LagConfig())
    step = round(SAMPLE_S / GRID_S)
    for k in range(step, len(grid), step):
        hw = np.floor(cum[:, k]).astype(np.int64)
        if created_mid_run in rates and grid[k] < 13 * 3_600:
            hw = hw[: rates.index(created_mid_run)]  # the sampler does not see it yet
        model.add_sample(START_MS + round(float(grid[k]) * 1000), hw.tolist())
    return model, grid, cum


def written_at_s(grid: np.ndarray, cum: np.ndarray, c: int) -> float:
    """The exact time the message at offset c was written: H(T) = c + 1."""
    k = int(np.searchsorted(cum, c + 1, side="left"))
    lo, hi = cum[k - 1], cum[k]
    return float(grid[k - 1] + (c + 1 - lo) / (hi - lo) * (grid[k] - grid[k - 1]))


@pytest.mark.parametrize("name", sorted(CURVES))
def test_time_lag_holds_the_bound_from_1_s_to_24_h(name: str) -> None:
    rates = CURVES[name]
    run_s = DAY_S + 600
    model, grid, cum = simulate(rates, run_s)
    now_ms = int(model.t_ms[-1])
    now_s = (now_ms - START_MS) / 1000.0
    bound = HistoryBound()  # the stated bound: max(1 s, 1% of the lag)
    assert len(model.t_ms) <= 2_000, len(model.t_ms)  # bounded: ~1,500 rows for 24 h at most
    checked = 0
    for p in range(len(rates)):
        hw_now = int(model.hw[-1, p])
        for lag_s in LAGS_S:
            at = np.searchsorted(grid, now_s - lag_s, side="right") - 1
            c = int(np.floor(cum[p, at]))
            if c >= hw_now:
                continue  # nothing written since: caught up
            committed = np.full(model.width, -1, np.int64)
            committed[p] = c
            got, how = time_lag_s(model.t_ms, model.hw, committed, now_ms)
            truth = now_s - written_at_s(grid, cum[p], c)
            assert how[p] == INTERPOLATED, (name, p, lag_s)
            err = got[p] - truth
            assert abs(err) <= bound.error_s(truth) + 1e-6, (name, p, lag_s, truth, err)
            checked += 1
    assert checked >= len(LAGS_S) // 2  # the curves really were asked something


def test_a_lag_older_than_the_history_is_extrapolated_and_says_so() -> None:
    t = np.array([10_000, 11_000, 12_000], np.int64)
    hw = np.array([[1_000, 5], [2_000, 5], [3_000, 5]], np.int64)
    got, how = time_lag_s(t, hw, np.array([[500, 5]], np.int64), now_ms=12_000)
    assert how[0, 0] == EXTRAPOLATED and got[0, 0] == pytest.approx(2.5)
    assert how[0, 1] == 0 and got[0, 1] == 0.0  # caught up


def test_a_lone_message_is_dated_to_the_middle_of_its_sample_gap() -> None:
    t = np.array([0, 250], np.int64)
    hw = np.array([[7], [8]], np.int64)  # message 7 appeared between the two samples
    got, _ = time_lag_s(t, hw, np.array([7], np.int64), now_ms=1_000)
    assert got[0] == pytest.approx(0.875)


def test_compaction_never_widens_a_gap_beyond_its_bound_and_keeps_young_rows() -> None:
    rng = np.random.default_rng(7)
    bound = HistoryBound(full_rate_s=10.0, min_gap_s=1.0, error_ratio=0.01)
    t = np.cumsum(rng.integers(100, 400, 30_000)).astype(np.int64)
    hw = np.cumsum(rng.integers(0, 3, (30_000, 3)), axis=0)
    hw[5_000:9_000] = hw[4_999]  # an idle stretch: its rows go whatever their gaps
    now = int(t[-1])
    keep = np.ones(len(t), bool)
    for _ in range(20):  # as the model does, again and again
        idx = np.nonzero(keep)[0]
        keep[idx[~compact(t[idx], hw[idx], now, bound)]] = False
    kt, kh = t[keep], hw[keep]
    assert keep[t >= now - 10_000].all() and keep[-1]
    gaps = np.diff(kt)
    moved = (np.diff(kh, axis=0) != 0).any(axis=1)
    allowed = bound.gap_ms(now - kt[1:])
    assert (gaps[moved] <= allowed[moved]).all()
    assert keep.sum() < 0.1 * len(t)


def test_rows_beyond_the_horizon_go_but_one_floor_row_stays() -> None:
    bound = HistoryBound(horizon_s=100.0)
    t = np.arange(0, 300_000, 1_000, dtype=np.int64)
    hw = np.arange(len(t), dtype=np.int64)[:, None]
    keep = compact(t, hw, int(t[-1]), bound)
    assert t[keep][0] < t[-1] - 100_000 <= t[keep][1]


def test_time_lag_beyond_the_table_is_extrapolated_not_nan():
    t = np.array([10_000, 11_000], np.int64)
    hw = np.array([[1_000], [2_000]], np.int64)
    tl, how = time_lag_s(t, hw, np.array([0], np.int64), now_ms=11_000)
    assert SOURCE_NAMES[how[0]] == "extrapolated"
    # 1000 msgs/s: offset 0 was written ~1 s before the first row
    assert tl[0] == pytest.approx(2.0, abs=0.01)
    assert not np.isnan(time_lag_s(t, hw, np.array([5_000], np.int64), 11_000)[0]).any()
