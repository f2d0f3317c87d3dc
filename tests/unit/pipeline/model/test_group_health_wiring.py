"""Group health through the lag operator, the metrics and ``lagpilot status`` (no broker)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from pipeline.commands.status import render
from pipeline.model.config import LagConfig
from pipeline.model.group_health import GroupHealth
from pipeline.model.model_op import LagOperator, lag_key
from pipeline.observe.metrics import PipelineMetrics
from schemas import GroupMember, GroupMetadata, GroupRemoved, TopicAssignment, validate
from tests.support.state import MemoryState
from tests.unit.pipeline.model.test_model_op import T0, TICK_MS, commits, sample


def _health_events() -> tuple[GroupHealth, list[dict[str, Any]]]:
    h = GroupHealth()
    m = GroupMember("m-1", "worker-a", "/10.0.0.5", assignment=(TopicAssignment("t", (0, 1)),))
    h.apply(GroupMetadata("g0", "consumer", 4, "range", "m-1", T0, (m,)), T0)
    return h, h.due(T0)


def test_operator_publishes_group_health_and_puts_owners_on_partition_lag() -> None:
    h, events = _health_events()
    seen: list[dict[str, Any]] = []
    op = LagOperator(LagConfig(window_s=5), snapshot_interval_ms=500, on_group_health=seen.append)
    state = MemoryState()
    (ev,) = events
    assert op(ev, "group_health|g0", T0, None, state) == [ev] and seen == [ev]
    assert lag_key(ev) == "g0"
    owners = {"event": "owners", "v": 1, "topic": "t", "owners": h.owners("t")}
    validate(owners)
    assert op(owners, "t", T0, None, state) == []
    assert op.topics == 0  # neither message made a topic model
    out = []
    for i in range(8):
        t = T0 + i * TICK_MS
        op(commits([("g0", 0, i * 10, t - 5), ("g0", 1, i * 10, t - 5)]), "t", t, None, state)
        out += op(sample(t, [i * 10 + 5, i * 10 + 5]), "t", t, None, state)
    lagged = [e for e in out if e["event"] == "partition_lag"]
    assert lagged
    for e in lagged:
        validate(e)
        assert e["owner"] == {
            "member_id": "m-1",
            "client_id": "worker-a",
            "client_host": "/10.0.0.5",
        }


def test_metrics_follow_group_health_and_forget_a_deleted_group() -> None:
    metrics = PipelineMetrics(CollectorRegistry())
    h, (ev,) = _health_events()
    metrics.group_health(ev)
    metrics.group_health({**ev, "rebalances_total": 3, "status": "STORM"})
    r = metrics.registry
    assert r.get_sample_value("lagpilot_group_members", {"group": "g0"}) == 1
    assert r.get_sample_value("lagpilot_group_generation", {"group": "g0"}) == 4
    assert r.get_sample_value("lagpilot_group_rebalances_total", {"group": "g0"}) == 3
    assert r.get_sample_value("lagpilot_group_storm", {"group": "g0"}) == 1
    h.apply(GroupRemoved("g0"), T0 + 1000)
    (gone,) = h.due(T0 + 1000)
    metrics.group_health(gone)
    assert r.get_sample_value("lagpilot_group_members", {"group": "g0"}) is None
    assert r.get_sample_value("lagpilot_group_storm", {"group": "g0"}) is None


def test_status_shows_owners_and_group_health() -> None:
    _, (ev,) = _health_events()
    storm = {**ev, "status": "STORM", "storm": {"client_id": "worker-a", "client_host": "/h"}}
    part = {
        "group": "g0", "topic": "t", "partition": 1, "status": "STOP", "committed_offset": 1,
        "high_watermark": 9, "lag_offsets": 8, "time_lag_s": 3.0, "lag_rate_per_s": 0.0,
        "eta_drain_s": None,
        "owner": {"member_id": "m-1", "client_id": "worker-a", "client_host": "/10.0.0.5"},
    }  # fmt: skip
    text = render({}, {"g0|t|1": part}, {"g0": storm})
    assert "worker-a@/10.0.0.5 (m-1)" in text
    (row,) = [line for line in text.splitlines() if line.startswith("g0 ") and "STORM" in line]
    assert "classic" in row and "worker-a@/h" in row
