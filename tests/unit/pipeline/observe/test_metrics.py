"""The lag families on /metrics, rendered from the model's arrays: valid Prometheus text
with the numbers of each modelled group-partition, and only those."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from pipeline.model.config import LagConfig
from pipeline.model.lag import TopicModel
from pipeline.observe.metrics import FAMILIES, LagCollector


def observed() -> TopicModel:
    m = TopicModel("orders", LagConfig())
    m.commit('we"ird\\group', 0, 90, 1_000)
    m.commit("billing", 1, 40, 1_000)
    m.commit("billing", 2, 10, 1_000)
    for i in range(1, 9):
        m.add_sample(1_000 + i * 250, [100, 50 + i, 10])
        if i < 8:
            m.observe(1_000 + i * 250)  # the rate window fills at each tick
    return m


def test_every_family_parses_and_holds_each_modelled_partition_once():
    m = observed()
    obs = m.observe(m.last_sample_ms)
    collector = LagCollector()
    collector.update(obs)
    families = {f.name: f for f in text_string_to_metric_families(collector.render().decode())}
    assert set(families) == {name for name, _ in FAMILIES}
    lag = {
        (s.labels["group"], s.labels["partition"]): s.value
        for s in families["lagpilot_lag_offsets"].samples
    }
    # the escaped group name survives, and only committed partitions appear
    assert lag == {('we"ird\\group', "0"): 10.0, ("billing", "1"): 18.0, ("billing", "2"): 0.0}
    status = {
        (s.labels["group"], s.labels["partition"]): s.labels["status"]
        for s in families["lagpilot_partition_status"].samples
    }
    assert status[("billing", "2")] == "OK"
    group_lag = {s.labels["group"]: s.value for s in families["lagpilot_group_lag_offsets"].samples}
    assert group_lag == {'we"ird\\group': 10.0, "billing": 18.0}
    produce = {
        s.labels["partition"]: s.value
        for s in families["lagpilot_produce_rate_messages_per_second"].samples
        if s.labels["group"] == "billing"
    }
    assert produce["1"] > 3.5 and produce["2"] == 0.0  # 1 msg per 250 ms; none


def test_a_topic_not_refreshed_drops_out_and_a_deleted_one_at_once():
    m = observed()
    collector = LagCollector(stale_after_s=0.0)
    collector.update(m.observe(m.last_sample_ms))
    assert "orders" not in collector.render().decode()
    collector = LagCollector()
    collector.update(m.observe(m.last_sample_ms))
    collector.forget_topic("orders")
    assert 'topic="orders"' not in collector.render().decode()


def test_a_share_group_is_marked_on_its_topic_and_unmarked_when_it_goes():
    from prometheus_client import generate_latest

    from pipeline.observe.metrics import PipelineMetrics

    def marked(metrics: PipelineMetrics) -> set[tuple[str, str]]:
        text = generate_latest(metrics.registry).decode()
        families = text_string_to_metric_families(text)
        [family] = [f for f in families if f.name == "lagpilot_share_group"]
        return {(s.labels["group"], s.labels["topic"]) for s in family.samples if s.value == 1}

    metrics = PipelineMetrics()
    m = observed()
    metrics.share_groups_of(m.observe(m.last_sample_ms))
    assert marked(metrics) == set()  # consumer groups only: no series
    m.share_groups = frozenset({"billing"})
    metrics.share_groups_of(m.observe(m.last_sample_ms))
    assert marked(metrics) == {("billing", "orders")}
    m.share_groups = frozenset({"gone-elsewhere"})  # not among the topic's groups
    metrics.share_groups_of(m.observe(m.last_sample_ms))
    assert marked(metrics) == set()
    m.share_groups = frozenset({"billing"})
    metrics.share_groups_of(m.observe(m.last_sample_ms))
    metrics.forget_share_groups("orders")  # the topic was deleted
    assert marked(metrics) == set()
