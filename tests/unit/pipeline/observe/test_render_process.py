"""The lag families written in a child process: the same text as in-process, a ``name[]``
subset, a scrape that still answers when the child dies or fails before its first chunk
and fails (rather than look whole) when the child fails after it, a stream left early
that leaves the child ready, and one scrape at a time."""

from __future__ import annotations

import dataclasses
import urllib.request
from collections.abc import Iterator

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.perf.metrics_render import synthetic_observations
from pipeline.model.config import LagConfig
from pipeline.model.events import TopicObservation
from pipeline.model.lag import TopicModel
from pipeline.observe.exposition import FAMILIES, LagColumns, render_lag
from pipeline.observe.metrics import HealthServer, LagCollector, PipelineMetrics
from pipeline.observe.render_process import FRAME_BYTES, RenderError, RenderProcess


def observation(topic: str = "orders", groups: int = 3, partitions: int = 4) -> TopicObservation:
    m = TopicModel(topic, LagConfig())
    for g in range(groups):
        for p in range(partitions):
            m.commit(f"g{g}", p, 10 * p + g, 1_000)
    for i in range(1, 9):
        m.add_sample(1_000 + i * 250, [50 + i * (p + 1) for p in range(partitions)])
        obs = m.observe(1_000 + i * 250)
    return obs


@pytest.fixture
def process():
    p = RenderProcess(timeout_s=30)
    yield p
    p.close()


def test_the_child_writes_what_the_process_itself_would(process):
    observations = [observation("orders"), observation("billing", groups=2, partitions=7)]
    assert process.render(observations) == render_lag(observations)
    # twice: the child's label cache gives the same text
    assert process.render(observations) == render_lag(observations)


def test_a_name_subset_holds_only_those_families(process):
    observations = [observation()]
    names = frozenset({"lagpilot_lag_offsets", "lagpilot_group_status_code"})
    text = process.render(observations, names).decode()
    families = {f.name for f in text_string_to_metric_families(text)}
    assert families == names
    assert render_lag(observations, frozenset({"lagpilot_not_a_family"})) == b""
    assert {f.name for f in text_string_to_metric_families(render_lag(observations).decode())} == {
        n for n, _ in FAMILIES
    }


def test_a_dead_child_is_replaced_on_the_next_scrape(process):
    observations = [observation()]
    first = process.render(observations)
    process._proc.kill()
    process._proc.join(5)
    assert process.render(observations) == first  # a new child answered


def test_a_failing_render_raises_and_the_child_still_serves(process):
    bad = dataclasses.replace(LagColumns.of(observation()), status=np.full((3, 4), 9, np.int8))
    with pytest.raises(RenderError, match="render process: IndexError"):
        process.render([bad])  # a status code no family knows
    assert process.render([observation()]) == render_lag([observation()])  # still serving


def test_a_scrape_without_the_child_is_written_in_process():
    class Silent:
        def stream(self, *_: object) -> Iterator[bytes]:
            raise RenderError("no answer in 60s")
            yield b""  # a generator, as RenderProcess.stream

    obs = observation()
    collector = LagCollector(process=Silent())  # type: ignore[arg-type]
    collector.update(obs)
    assert collector.render() == render_lag([obs])


def test_metrics_name_filter_serves_only_the_asked_families():
    metrics = PipelineMetrics()
    metrics.model_inputs.labels("commit").inc(3)
    metrics.lag.update(observation())
    server = HealthServer(
        0, metrics.registry, lambda: (True, "ok"), host="127.0.0.1", extra=metrics.lag.render
    ).start()
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        query = "?name[]=lagpilot_model_inputs_total&name[]=lagpilot_lag_offsets"
        with urllib.request.urlopen(url + query, timeout=10) as r:
            text = r.read().decode()
        assert {f.name for f in text_string_to_metric_families(text)} == {
            "lagpilot_model_inputs",
            "lagpilot_lag_offsets",
        }
        with urllib.request.urlopen(url, timeout=10) as r:
            full = {f.name for f in text_string_to_metric_families(r.read().decode())}
        assert {n for n, _ in FAMILIES} <= full and "lagpilot_watermark_samples" in full
    finally:
        server.stop()


def test_a_large_text_comes_in_frames_and_is_the_same_bytes(process):
    observations = synthetic_observations(topics=2, partitions=60, groups=60)
    # each chunk copied as it comes: the next one is read into the same buffer
    chunks = [bytes(chunk) for chunk in process.stream(observations)]
    text = render_lag(observations)
    assert len(text) > 3 * FRAME_BYTES and len(chunks) >= 3  # streamed, not one message
    assert b"".join(chunks) == text


def test_a_stream_left_early_leaves_the_same_child_ready(process):
    observations = synthetic_observations(topics=2, partitions=60, groups=60)
    stream = process.stream(observations)
    next(stream)
    pid = process.pid
    stream.close()  # the client went away after the first chunk
    assert process.render(observations) == render_lag(observations)
    assert process.pid == pid  # the rest was read, not the child replaced


def test_a_child_killed_midway_fails_that_scrape_and_the_next_gets_a_new_one(process):
    observations = synthetic_observations(topics=2, partitions=60, groups=60)
    stream = process.stream(observations)
    next(stream)
    process._proc.kill()
    with pytest.raises(RenderError):
        list(stream)
    assert process.render(observations) == render_lag(observations)


def test_one_scrape_at_a_time_and_the_second_is_written_in_process():
    process = RenderProcess(timeout_s=0.5)
    observations = synthetic_observations(topics=2, partitions=60, groups=60)
    try:
        first = process.stream(observations)
        next(first)  # a slow client holds the child
        with pytest.raises(RenderError, match="busy"):
            process.render(observations)
        collector = LagCollector(stale_after_s=3_600, process=process)
        for o in observations:
            collector.update(o)
        assert collector.render() == render_lag(observations)  # written here instead
        first.close()
        assert process.render(observations) == render_lag(observations)
    finally:
        process.close()


class Failing:
    """A render process that sends ``good`` chunks, then fails."""

    def __init__(self, good: int) -> None:
        self.good = good
        self.calls = 0

    def stream(self, *_: object) -> Iterator[bytes]:
        self.calls += 1
        for _ in range(self.good):
            yield b"# a chunk\n"
        raise RenderError("render process: IndexError()")


def test_a_failure_after_the_first_chunk_fails_the_scrape():
    collector = LagCollector(process=Failing(good=1))  # type: ignore[arg-type]
    collector.update(observation())
    stream = collector.stream()
    assert next(stream) == b"# a chunk\n"
    with pytest.raises(RenderError):
        next(stream)  # not the in-process text after half of the child's


def test_a_scrape_of_other_families_does_not_reach_the_child():
    failing = Failing(good=0)
    collector = LagCollector(process=failing)  # type: ignore[arg-type]
    collector.update(observation())
    assert collector.render(frozenset({"lagpilot_model_inputs_total"})) == b""
    assert failing.calls == 0
    assert collector.render(frozenset({"lagpilot_lag_offsets"})).startswith(
        b"# HELP lagpilot_lag_offsets"
    )  # the child failed first: written here
    assert failing.calls == 1
