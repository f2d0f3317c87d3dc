"""A tick's events (``pipeline.model.events``): built column-wise, equal to the per-object
path the lag oracle takes."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from support.lag_oracle import partition_lag, summary

from pipeline.model.events import TopicObservation
from schemas import LagStatus, to_dict


@st.composite
def observations(draw: st.DrawFn) -> TopicObservation:
    """Any topic observation: masks with empty groups, statuses and time lags with ties
    (the worst-partition order), floats that round at the third decimal."""
    g = draw(st.integers(1, 5))
    p = draw(st.integers(1, 7))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    mask = rng.random((g, p)) < draw(st.sampled_from([0.0, 0.5, 0.9, 1.0]))

    def floats(*shape: int) -> np.ndarray:
        return np.round(rng.normal(0, 50, shape), int(rng.integers(0, 6)))

    return TopicObservation(
        topic="t",
        now_ms=1_000,
        groups=[f"g{i}" for i in range(g)],
        mask=mask,
        committed=rng.integers(0, 1000, (g, p)),
        high_watermark=rng.integers(1000, 2000, p),
        lag=rng.integers(0, 10, (g, p)),
        lag_rate_per_s=floats(g, p),
        lag_accel_per_s2=floats(g, p),
        produce_rate_per_s=floats(p),
        consume_rate_per_s=floats(g, p),
        time_lag_s=rng.choice([0.0, 0.25, 1.5, 7.0005], (g, p)),
        time_lag_source=rng.integers(0, 4, (g, p)).astype(np.int8),
        eta_drain_s=np.where(rng.random((g, p)) < 0.5, np.nan, np.abs(floats(g, p))),
        status=np.where(mask, rng.integers(0, len(LagStatus), (g, p)), 0).astype(np.int8),
        last_commit_ms=rng.integers(0, 1000, (g, p)),
        leaders=rng.integers(-1, 3, p),
        topic_partitions=p,
    )


@settings(max_examples=300, deadline=None)
@given(observations(), st.integers(1, 6))
def test_events_built_column_wise_equal_the_dataclass_path(obs: TopicObservation, n: int):
    gs = obs.active.tolist()
    assert obs.group_events(gs, n) == [to_dict(summary(obs.view(g), n)) for g in gs]
    gi, pi = np.nonzero(obs.mask)
    expected = []
    for g, p in zip(gi.tolist(), pi.tolist(), strict=True):
        view = obs.view(g)
        expected.append(to_dict(partition_lag(view, view.partitions.tolist().index(p))))
    assert obs.partition_events(gi, pi) == expected
