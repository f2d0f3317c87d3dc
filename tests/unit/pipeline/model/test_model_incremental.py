"""What the model carries from tick to tick gives the numbers computing everything again
would: the time lags kept for partitions that did not move, the rate window's buffers."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.model.config import LagConfig
from pipeline.model.events import TopicObservation
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
    one forgetting a partition; samples every 250 ms, compaction and growth included."""
    rnd = np.random.default_rng(seed)
    cfg = LagConfig(history_min_gap_s=0.3, history_error_ratio=0.05)
    m = TopicModel("t", cfg)
    hw = np.zeros(3, np.int64)
    committed = np.zeros((4, 3), np.int64)
    t = 1_000_000
    for i in range(ticks):
        t += 250
        hw += rnd.integers(0, 30, 3) * (rnd.random(3) < 0.7)
        for g in range(4 if i > 40 else 3):
            if rnd.random() < 0.25:
                p = int(rnd.integers(0, 3))
                committed[g, p] = min(hw[p], committed[g, p] + int(rnd.integers(0, 60)))
                m.commit(f"g{g}", p, int(committed[g, p]), t - int(rnd.integers(1, 400)))
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
