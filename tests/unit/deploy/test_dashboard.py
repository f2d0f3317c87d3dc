"""deploy/grafana/lagpilot.json is a valid Grafana dashboard that queries only what lagpilot
exports, covers what on-call needs, and is explained panel by panel in docs/runbook.md.

The metric check here reads the processes' registries in-process (fast, no broker); the
integration test tests/integration/deploy/test_health.py repeats it against /metrics of a
running pipeline and actuator.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest

from actuators.metrics import Metrics
from pipeline.observe.metrics import PipelineMetrics
from tests.unit.deploy.facts import (
    ROOT,
    dashboard_metrics,
    dashboard_queries,
    exported_names,
    worker_exported_names,
)

DASHBOARD = ROOT / "deploy" / "grafana" / "lagpilot.json"
PROVISIONING = ROOT / "deploy" / "grafana" / "provisioning"
PANEL_TYPES = {"row", "timeseries", "stat", "table", "state-timeline", "gauge", "bargauge"}


@pytest.fixture(scope="module")
def dash() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def _panels(dash: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in dash["panels"] if p["type"] != "row"]


def test_dashboard_is_grafana_json(dash: dict[str, Any]) -> None:
    assert dash["uid"] == "lagpilot" and dash["title"]
    assert isinstance(dash["schemaVersion"], int) and dash["schemaVersion"] >= 36
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in dash["panels"]:
        assert p["type"] in PANEL_TYPES, p["title"]
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24, p["title"]
    for p in _panels(dash):
        assert p.get("description"), f"panel {p['title']!r} says what it means"
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs)), p["title"]
        assert all(t["expr"].strip() for t in p["targets"]), p["title"]


def test_panels_do_not_overlap(dash: dict[str, Any]) -> None:
    cells: dict[tuple[int, int], str] = {}
    for p in dash["panels"]:
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = p["title"]


def test_every_query_uses_the_provisioned_prometheus(dash: dict[str, Any]) -> None:
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    ds_var = variables["datasource"]
    assert ds_var["type"] == "datasource" and ds_var["query"] == "prometheus"
    provisioned = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yaml").read_text())
    uids = {d["uid"] for d in provisioned["datasources"] if d["type"] == "prometheus"}
    assert ds_var["current"]["value"] in uids
    for p in _panels(dash):
        for t in [p, *p["targets"]]:
            assert t["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]


def test_template_variables_are_used_and_defined(dash: dict[str, Any]) -> None:
    names = {v["name"] for v in dash["templating"]["list"]}
    used = {m for q in dashboard_queries(dash) for m in re.findall(r"\$(\w+)", q)}
    assert used <= names, f"undefined variables {used - names}"
    assert {"group", "topic"} <= used


def test_dashboard_provider_loads_the_path_compose_mounts() -> None:
    provider = yaml.safe_load((PROVISIONING / "dashboards" / "lagpilot.yaml").read_text())
    compose = yaml.safe_load((ROOT / "deploy" / "compose" / "compose.yaml").read_text())
    mounts = compose["services"]["grafana"]["volumes"]
    target = next(m.split(":")[1] for m in mounts if m.split(":")[0] == "../grafana/lagpilot.json")
    assert any(target.startswith(p["options"]["path"] + "/") for p in provider["providers"])


def test_every_metric_queried_is_exported() -> None:
    dash = json.loads(DASHBOARD.read_text())
    pipeline = PipelineMetrics()
    exported = exported_names(generate_latest(pipeline.registry).decode())
    exported |= exported_names(pipeline.lag.render().decode())  # served after the registry
    exported |= exported_names(generate_latest(Metrics().registry).decode())
    exported |= worker_exported_names()
    queried = dashboard_metrics(dash)
    assert queried, "the dashboard queries lagpilot metrics"
    assert queried <= set(exported), f"not exported: {sorted(queried - set(exported))}"


#: What the issue asks the dashboard to show, and the series that shows it.
REQUIRED = {
    "per-group time lag": "lagpilot_group_max_time_lag_seconds",
    "per-group offset lag": "lagpilot_group_lag_offsets",
    "lag rate": "lagpilot_lag_rate_messages_per_second",
    "acceleration": "lagpilot_lag_acceleration_messages_per_second_squared",
    "worst partitions": "lagpilot_time_lag_seconds",
    "status": "lagpilot_group_status_code",
    "actions over time": "lagpilot_actions_total",
    "outcomes over time": "lagpilot_actuator_events_total",
    "throttles in force": "lagpilot_actuator_throttles_active",
    "processing delay": "lagpilot_processing_delay_seconds_bucket",
    "decode errors by kind": "lagpilot_decode_skipped_total",
    "rebalance storms": "lagpilot_group_storm",
    "rebalances per minute": "lagpilot_group_rebalances_total",
    "members per group": "lagpilot_group_members",
    "generation": "lagpilot_group_generation",
}


@pytest.mark.parametrize("need", sorted(REQUIRED))
def test_dashboard_shows(dash: dict[str, Any], need: str) -> None:
    assert REQUIRED[need] in dashboard_metrics(dash), need


def test_worst_partitions_is_a_ranked_table(dash: dict[str, Any]) -> None:
    panel = next(p for p in _panels(dash) if p["title"] == "Worst partitions")
    assert panel["type"] == "table"
    assert panel["targets"][0]["expr"].startswith("topk(")


def test_decode_errors_are_split_by_kind(dash: dict[str, Any]) -> None:
    panel = next(p for p in _panels(dash) if "lagpilot_decode_skipped_total" in str(p["targets"]))
    expr = next(t["expr"] for t in panel["targets"] if "decode_skipped" in t["expr"])
    assert re.search(r"by \(reason, record_type, version\)", expr)


def test_runbook_explains_every_panel(dash: dict[str, Any]) -> None:
    runbook = (ROOT / "docs" / "runbook.md").read_text()
    missing = [p["title"] for p in _panels(dash) if f"**{p['title']}**" not in runbook]
    assert not missing, f"docs/runbook.md does not explain panels {missing}"


#: A row per stage of the flow, in its order, and the runbook section each row's panels link.
ROWS = {
    "Detection: consumer lag": "detection-consumer-lag",
    "Decisions": "decisions",
    "Actions": "actions",
    "Workers": "workers",
    "Group health": "group-health",
    "lagpilot health": "lagpilot-health",
}


def _rows(dash: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Each row with the panels below it (up to the next row), in layout order."""
    out: list[tuple[str, list[dict[str, Any]]]] = []
    for p in sorted(dash["panels"], key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"])):
        if p["type"] == "row":
            out.append((p["title"], list(p.get("panels", []))))
        else:
            assert out, f"panel {p['title']!r} sits above the first row"
            out[-1][1].append(p)
    return out


def test_a_row_per_stage_in_flow_order(dash: dict[str, Any]) -> None:
    rows = _rows(dash)
    assert [title for title, _ in rows] == list(ROWS)
    assert all(panels for _, panels in rows), "every row holds panels"


def test_every_panel_has_a_unit(dash: dict[str, Any]) -> None:
    for p in _panels(dash):
        assert p.get("fieldConfig", {}).get("defaults", {}).get("unit"), p["title"]


def test_every_panel_links_its_rows_runbook_section(dash: dict[str, Any]) -> None:
    runbook = (ROOT / "docs" / "runbook.md").read_text()
    anchors = {
        re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
        for h in re.findall(r"^#+ (.+)$", runbook, re.M)
    }
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["runbook"]["query"] == "docs/runbook.md"
    for row, panels in _rows(dash):
        assert ROWS[row] in anchors, f"docs/runbook.md has no section #{ROWS[row]}"
        for p in panels:
            urls = [link["url"] for link in p.get("links", [])]
            assert urls == [f"${{runbook}}#{ROWS[row]}"], p["title"]


def test_template_variables_query_the_datasource_variable(dash: dict[str, Any]) -> None:
    """Like every panel: one datasource uid (the variable) for the whole dashboard."""
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            assert v["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, v["name"]
