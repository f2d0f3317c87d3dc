"""Series the dashboard and the alerts take increase()/rate() of exist at 0 from the start:
Prometheus sees no increase for a counter born at 1, so the first action, outcome or bad
message would never show. Found by evaluating the dashboard in a real Prometheus
(tests/integration/deploy/test_prometheus_dashboard.py), pinned here without one."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from actuators.metrics import Metrics
from pipeline.model.config import LagConfig
from pipeline.model.lag import TopicModel
from pipeline.observe.metrics import BAD_MESSAGE_STAGES, PipelineMetrics
from schemas import ActionType, OutcomeResult


def _values(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(s.labels.items())): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == name
    }


def test_actions_and_bad_messages_start_at_zero_for_every_label_value() -> None:
    text = generate_latest(PipelineMetrics().registry).decode()
    actions = _values(text, "lagpilot_actions_total")
    assert len(actions) == len(ActionType) * 2
    assert set(actions.values()) == {0.0}
    assert actions[(("mode", "act"), ("type", "spread_partition"))] == 0
    bad = _values(text, "lagpilot_bad_messages_total")
    assert {dict(k)["stage"] for k in bad} == set(BAD_MESSAGE_STAGES)


def test_outcomes_start_at_zero_for_every_result_and_type() -> None:
    events = _values(generate_latest(Metrics().registry).decode(), "lagpilot_actuator_events_total")
    assert len(events) == len(OutcomeResult) * len(ActionType)
    assert events[(("result", "failed"), ("type", "throttle_producer"))] == 0


def test_topics_modelled_counts_the_fresh_topics() -> None:
    metrics = PipelineMetrics()

    def gauge() -> float:
        text = generate_latest(metrics.registry).decode()
        return _values(text, "lagpilot_topics_modelled")[()]

    assert gauge() == 0
    for topic in ("a", "b"):
        model = TopicModel(topic, LagConfig())
        model.commit("g", 0, 4, 1_000)
        model.add_sample(1_250, [10])
        metrics.lag.update(model.observe(1_250))
    assert gauge() == 2
    metrics.lag.stale_after_s = 0.0  # nothing refreshed since: the replica no longer owns them
    assert gauge() == 0
