"""What the model carries from tick to tick gives the numbers computing everything again
would: the time lags kept for partitions that did not move, the rate window's buffers."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.model.config import LagConfig
from pipeline.model.events import TopicObservation
from pipeline.model.fits import Fit
from pipeline.model.history import first_beyond, time_lag_s
from pipeline.model.lag import TopicModel


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 70),
    st.integers(1, 6),
    st.lists(st.integers(-2, 400), min_size=1, max_size=40),
    st.randoms(use_true_random=False),
)
def test_the_lockstep_search_finds_what_searchsorted_finds(rows, width, offsets, rnd) -> None:
    hw = np.sort(np.array([[rnd.randint(0, 300) for _ in range(width)] for _ in range(rows)]), 0)
    pi = np.array([rnd.randrange(width) for _ in offsets], np.int64)
    c = np.array(offsets, np.int64)
    want = [np.searchsorted(hw[:, p], v, side="right") for p, v in zip(pi, c, strict=True)]
    assert first_beyond(hw, pi, c).tolist() == want


def _run(seed: int, ticks: int, check: Callable[[TopicModel, TopicObservation, int], None]) -> None:
    """A topic of 3 partitions, 4 groups committing at random, some idle, one joining late,
    one forgetting a partition, group 3 now and then committing past the HWM the next
    sample shows (its commit seen before the sample of what it read); samples every
    250 ms, compaction and growth included."""
    rnd = np.random.default_rng(seed)
    cfg = LagConfig(history_min_gap_s=0.3, history_error_ratio=0.05)
    m = TopicModel("t", cfg)
    hw = np.zeros(3, np.int64)
    committed = np.zeros((4, 3), np.int64)
    t = 1_000_000
    for i in range(ticks):
        t += 250
        hw += rnd.integers(0, 30, 3) * (rnd.random(3) < 0.7)
        rows = []
        for g in range(4 if i > 40 else 3):
            if rnd.random() < 0.25:
                p = int(rnd.integers(0, 3))
                ahead = 8 if g == 3 and rnd.random() < 0.3 else 0
                committed[g, p] = min(hw[p] + ahead, committed[g, p] + int(rnd.integers(0, 60)))
                # up to 3 samples late: corrected into the rows it should have been in
                rows.append([f"g{g}", p, int(committed[g, p]), t - int(rnd.integers(1, 800))])
        if i % 2:  # one at a time, or as a batch (commit_columns: late ones corrected at once)
            for row in rows:
                m.commit(*row)
        else:
            m.commit_many(rows)
        if i == 120:
            m.forget("g1", 2)
        m.add_sample(t, hw.tolist())
        check(m, m.observe(t), t)


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000))
def test_time_lags_carried_between_ticks_equal_time_lags_computed_afresh(seed: int) -> None:
    def check(m: TopicModel, obs: TopicObservation, t: int) -> None:
        tl, how = time_lag_s(m.t_ms, m.hw, obs.committed, t)
        assert np.array_equal(obs.time_lag_s, tl)
        assert np.array_equal(obs.time_lag_source, how)

    _run(seed, 200, check)


def rates_afresh(m: TopicModel, now_ms: int) -> dict[str, np.ndarray]:
    """The fits as the model computed them before its window kept buffers: from the window's
    rows, every mask and difference rebuilt (``Fit`` over the rows, rows last)."""
    width, cfg = m.width, m.cfg
    hw_now, c = m.hw[-1], m.committed[:, :width]
    x = (m.w_t - now_ms) / 1000.0
    w_c = np.ascontiguousarray(m.w_c[:, :, :width].transpose(0, 2, 1))
    w_hw = np.ascontiguousarray(m.w_hw.T)
    valid = w_c >= 0
    mask = valid.astype(np.float64)
    fit = Fit(x, mask)
    wlag = np.where(valid, np.maximum(w_hw[None, :, :] - w_c, 0), 0).astype(np.float64)
    is_recent = x >= -cfg.recent_s
    recent = Fit(x, mask * is_recent)
    return {
        "produce": Fit(x, np.ones_like(w_hw, np.float64)).slope(w_hw - hw_now[:, None]),
        "consume": fit.slope(np.where(valid, w_c - c[:, :, None], 0).astype(np.float64)),
        "lag_rate": fit.slope(wlag),
        "accel": fit.accel(wlag),
        "recent_rate": np.where(recent.s[0] >= 4, recent.slope(wlag * is_recent), np.nan),
    }


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000))
def test_the_window_buffers_fit_what_the_rows_rebuilt_each_tick_fit(seed: int) -> None:
    """Late commits, a forgotten partition, a group joining, the buffers moving: the rates
    and acceleration from the kept buffers are those of the rows rebuilt from scratch."""

    def check(m: TopicModel, obs: TopicObservation, t: int) -> None:
        want = rates_afresh(m, t)
        got = m._win.fits(t, m.hw[-1], m.committed[:, : m.width], m.cfg.recent_s)
        for k, v in want.items():
            assert np.allclose(getattr(got, k), v, rtol=1e-9, atol=1e-6, equal_nan=True), k
        assert np.array_equal(obs.lag_rate_per_s, got.lag_rate)
        assert np.array_equal(obs.consume_rate_per_s, got.consume)

    _run(seed, 160, check)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10_000))
def test_the_running_sums_stay_exact_across_new_time_references(seed: int) -> None:
    """The window's running sums are moved to a new time reference (recomputed from the
    rows) every ``REBASE_MS``: with a reference moved every 2 s, over 40 s of ticks with
    lags in the billions, the fits are still those of the rows rebuilt from scratch."""
    import pipeline.model.window as window

    rebase_ms, window.REBASE_MS = window.REBASE_MS, 2_000
    try:
        rnd = np.random.default_rng(seed)
        m = TopicModel("t", LagConfig())
        hw = np.full(3, 5_000_000_000, np.int64)
        t = 1_000_000
        for _ in range(160):
            t += 250
            hw += rnd.integers(0, 50_000, 3)
            if rnd.random() < 0.3:
                m.commit("g", int(rnd.integers(0, 3)), int(rnd.integers(0, 1_000)), t - 5)
            m.add_sample(t, hw.tolist())
            obs = m.observe(t)
            want = rates_afresh(m, t)
            assert np.allclose(obs.lag_rate_per_s, want["lag_rate"], rtol=1e-9, atol=1e-6)
            assert np.allclose(obs.lag_accel_per_s2, want["accel"], rtol=1e-7, atol=1e-4)
    finally:
        window.REBASE_MS = rebase_ms


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000))
def test_status_limits_kept_between_ticks_equal_limits_derived_afresh(seed: int) -> None:
    """The status rules' thresholds the model keeps (updated where commits teach an
    interval) judge as the thresholds derived from the intervals every tick would."""
    from pipeline.model.status import Limits, StatusInputs, usual_interval_s

    class Afresh(TopicModel):
        def _status_limits(self, inputs: StatusInputs) -> Limits:
            usual = usual_interval_s(inputs.interval_s, self.cfg)
            return Limits.of(usual, self.cfg, inputs.warn_min_s, inputs.stop_min_s)

    rnd = np.random.default_rng(seed)
    cfg = LagConfig()
    kept, afresh = TopicModel("t", cfg), Afresh("t", cfg)
    hw = np.zeros(4, np.int64)
    committed = np.zeros((5, 4), np.int64)
    t = 1_000_000
    for i in range(240):
        t += 250
        hw += rnd.integers(0, 20, 4) * (rnd.random(4) < 0.6)
        rows = []  # one batch a tick, as the commits source sends them (commit_columns)
        for g in range(5 if i > 60 else 4):
            if rnd.random() < (0.05 if g == 0 else 0.3):  # group 0 slow, others brisk
                p = int(rnd.integers(0, 4))
                committed[g, p] = min(hw[p], committed[g, p] + int(rnd.integers(0, 40)))
                rows.append([f"g{g}", p, int(committed[g, p]), t - 10])
        for m in (kept, afresh):
            m.commit_many(rows)
        if i == 150:
            for m in (kept, afresh):
                m.forget("g2", 1)
        for m in (kept, afresh):
            m.add_sample(t, hw.tolist())
        a, b = kept.observe(t), afresh.observe(t)
        assert np.array_equal(a.status, b.status), i
