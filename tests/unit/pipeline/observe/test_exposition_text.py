"""The lag families' text: the same bytes as the renderer before issue 16's /metrics work
(``bench.support.baselines.exposition_before_16``, one f-string and ``repr`` per line) for random
observations, and ``format_floats`` equal to ``repr`` wherever orjson and ``repr`` part."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from bench.support.baselines.exposition_before_16 import render_lag_before
from pipeline.model.events import TopicObservation
from pipeline.observe.exposition import (
    FAMILIES,
    LabelCache,
    LagColumns,
    format_floats,
    render_chunks,
    render_lag,
)

NAMES = ["g0", 'we"ird', "back\\slash", "new\nline", "ünï", "", "a,b=c}"]


def values(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Floats of every kind the text must get right: all magnitudes (orjson's range and
    beyond it on both sides), integers, 0 and -0.0, NaN and the infinities."""
    out = rng.normal(size=shape) * 10.0 ** rng.integers(-22, 22, shape)
    pick = rng.random(shape)
    out[pick < 0.1] = rng.integers(-1_000, 1_000, shape)[pick < 0.1]
    special = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1e16, 1e-4, 5e-324])
    out[pick > 0.9] = rng.choice(special, shape)[pick > 0.9]
    return out


def random_observation(rng: np.random.Generator, topic: str) -> TopicObservation:
    groups = int(rng.integers(1, 6))
    partitions = int(rng.integers(1, 9))
    shape = (groups, partitions)
    mask = rng.random(shape) < rng.choice([0.0, 0.5, 1.0])
    if groups > 1:
        mask[rng.integers(groups)] = False  # a group with nothing modelled here
    lag = rng.integers(-5, 1_000, shape)
    lag[rng.random(shape) < 0.1] = 10**17  # beyond float's exact integers and repr's range
    return TopicObservation(
        topic=topic,
        now_ms=1_000,
        groups=[str(rng.choice(NAMES)) + f"-{g}" for g in range(groups)],
        mask=mask,
        committed=np.zeros(shape, np.int64),
        high_watermark=np.zeros(partitions, np.int64),
        lag=lag,
        lag_rate_per_s=values(rng, shape),
        lag_accel_per_s2=values(rng, shape),
        produce_rate_per_s=values(rng, (partitions,)),
        consume_rate_per_s=values(rng, shape),
        time_lag_s=values(rng, shape),
        time_lag_source=np.zeros(shape, np.int8),
        eta_drain_s=np.full(shape, np.nan),
        status=rng.integers(0, 6, shape).astype(np.int8),
        last_commit_ms=np.zeros(shape, np.int64),
        leaders=np.zeros(partitions, np.int64),
        topic_partitions=partitions,
    )


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), topics=st.integers(0, 4), subset=st.booleans())
def test_the_text_is_the_bytes_the_renderer_before_wrote(seed, topics, subset):
    rng = np.random.default_rng(seed)
    observations = [random_observation(rng, f"t{i}{rng.choice(NAMES)}") for i in range(topics)]
    names = None
    if subset:
        names = frozenset(str(n) for n in rng.choice([n for n, _ in FAMILIES], 3))
    assert render_lag(observations, names) == render_lag_before(observations, names)


def test_a_warm_cache_and_changed_groups_give_the_text_of_a_cold_one():
    rng = np.random.default_rng(7)
    cache = LabelCache()
    first = [random_observation(rng, "orders"), random_observation(rng, "billing")]
    assert render_lag(first, None, cache) == render_lag_before(first)
    # the same topics with other groups and widths: the cache must not serve the old labels
    second = [random_observation(rng, "orders"), random_observation(rng, "billing")]
    assert render_lag(second, None, cache) == render_lag_before(second)
    cache.keep(["billing"])
    assert render_lag(second, None, cache) == render_lag_before(second)


def test_the_text_parses_as_prometheus_text():
    rng = np.random.default_rng(3)
    observations = [random_observation(rng, f"t{i}") for i in range(3)]
    text = render_lag(observations).decode()
    families = {f.name for f in text_string_to_metric_families(text)}
    assert families == {n for n, _ in FAMILIES}


def test_the_text_comes_a_family_and_topic_at_a_time():
    rng = np.random.default_rng(5)
    observations = [random_observation(rng, f"t{i}") for i in range(3)]
    for o in observations:
        o.mask[0, 0] = True  # every topic has a modelled cell
    chunks = list(render_chunks(observations))
    # a header per family, a chunk per (family, topic), the closing newline
    assert len(chunks) == len(FAMILIES) * (1 + len(observations)) + 1
    assert b"".join(chunks) == render_lag(observations)
    # the columns the render process gets give the same text as the observations
    assert render_lag([LagColumns.of(o) for o in observations]) == render_lag(observations)


def test_no_family_asked_is_no_text():
    assert render_lag([random_observation(np.random.default_rng(1), "t")], frozenset({"x"})) == b""


BOUNDARIES = [
    v
    for b in (1e-4, 1e16, 2.0**53, 1e15, 1e-3)
    for v in (b, np.nextafter(b, 0.0), np.nextafter(b, np.inf), -b)
]


@pytest.mark.parametrize("value", [*BOUNDARIES, 0.0, -0.0, np.nan, np.inf, -np.inf, 5e-324])
def test_format_floats_is_repr_at_the_edges_of_orjsons_range(value):
    assert format_floats(np.array([value, 1.5])) == [repr(float(value)).encode(), b"1.5"]


def test_format_floats_is_repr_for_a_million_random_doubles():
    rng = np.random.default_rng(16)
    bits = rng.integers(0, 2**64, 500_000, dtype=np.uint64, endpoint=False).view(np.float64)
    scaled = rng.normal(size=500_000) * 10.0 ** rng.integers(-8, 20, 500_000)
    a = np.concatenate([bits, scaled])
    assert format_floats(a) == [repr(v).encode() for v in a.tolist()]
    assert format_floats(np.zeros(0)) == []
