"""The lag families written in a child process: the same text as in-process, a ``name[]``
subset, and a scrape that still answers when the child dies or fails."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pipeline.exposition import FAMILIES, RenderError, RenderProcess, render_lag
from pipeline.metrics import HealthServer, LagCollector, PipelineMetrics
from pipeline.model.config import LagConfig
from pipeline.model.events import TopicObservation
from pipeline.model.lag import TopicModel


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


def test_a_failing_render_raises_and_the_collector_renders_in_process(process):
    with pytest.raises(RenderError, match="render process"):
        process.render(["not an observation"])  # type: ignore[list-item]
    assert process.render([observation()]) == render_lag([observation()])  # still serving


def test_a_scrape_without_the_child_is_written_in_process():
    class Silent:
        def render(self, *_: object) -> bytes:
            raise RenderError("no answer in 60s")

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
