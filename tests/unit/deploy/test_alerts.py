"""deploy/prometheus/alerts.yml: promtool accepts it, its own test file fires every alert and
shows it silent, each alert links a runbook section that exists and says what to do, and
compose and Kubernetes ship exactly these rules. (Prometheus evaluating them against live
processes: tests/integration/deploy/test_prometheus_dashboard.py.)"""

from __future__ import annotations

import re
import subprocess
from typing import Any

import pytest
import yaml

from tests.support.prometheus import binary
from tests.unit.deploy.facts import ROOT

RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "alerts.test.yml"
RUNBOOK = ROOT / "docs" / "runbook.md"

#: What the issue asks an alert for, and the alert that covers it.
REQUIRED = {
    "a group over its time-lag level": "LagpilotGroupLagging",
    "a partition over its time-lag level": "LagpilotPartitionTimeLagHigh",
    "a group in a rebalance storm": "LagpilotRebalanceStorm",
    "the pipeline behind (processing delay)": "LagpilotPipelineBehind",
    "sampler errors": "LagpilotSamplerErrors",
    "actuator failures": "LagpilotActionsFailed",
    "rejected events": "LagpilotActionsRejected",
    "a throttle held longer than N minutes": "LagpilotThrottleHeldLong",
    "the kill switch engaged": "LagpilotKillSwitchEngaged",
    "any lagpilot process down": "LagpilotProcessDown",
}


def _alerts() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes."""
    out = set()
    for heading in re.findall(r"^#+ (.+)$", markdown, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


def test_promtool_check_rules_passes() -> None:
    run = subprocess.run(
        [binary("promtool"), "check", "rules", str(RULES)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in run.stdout


def test_promtool_test_rules_passes() -> None:
    run = subprocess.run(
        [binary("promtool"), "test", "rules", str(RULE_TESTS)],
        capture_output=True, text=True, cwd=RULE_TESTS.parent,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr


def test_every_alert_fires_and_stays_silent_in_the_rule_tests() -> None:
    doc = yaml.safe_load(RULE_TESTS.read_text())
    assert [str(RULES.name)] == doc["rule_files"]
    fired: set[str] = set()
    silent: set[str] = set()
    for case in doc["tests"]:
        for check in case["alert_rule_test"]:
            (fired if check["exp_alerts"] else silent).add(check["alertname"])
    names = {a["alert"] for a in _alerts()}
    assert names - fired == set(), "alerts never fired in alerts.test.yml"
    assert names - silent == set(), "alerts never shown silent in alerts.test.yml"


@pytest.mark.parametrize("need", sorted(REQUIRED))
def test_an_alert_covers(need: str) -> None:
    assert REQUIRED[need] in {a["alert"] for a in _alerts()}, need


def test_every_alert_links_its_runbook_section_and_says_what_to_do() -> None:
    anchors = _anchors(RUNBOOK.read_text())
    for a in _alerts():
        ann = a["annotations"]
        path, _, anchor = ann["runbook_url"].partition("#")
        assert path == "docs/runbook.md", a["alert"]
        assert anchor == f"alert-{a['alert'].lower()}", a["alert"]
        assert anchor in anchors, f"{a['alert']}: docs/runbook.md has no section #{anchor}"
        assert a["labels"]["severity"] in {"info", "warning", "critical"}, a["alert"]
        # a summary names an action: a command, a panel or a thing to change
        assert re.search(
            r"`[^`]+`|\b(check|read|find|fix|scale|restart|lift|roll|open)\b", ann["summary"], re.I
        ), f"{a['alert']}: the summary says what to do"


def test_compose_prometheus_loads_the_rules() -> None:
    compose = yaml.safe_load((ROOT / "deploy" / "compose" / "compose.yaml").read_text())
    config = yaml.safe_load((ROOT / "deploy" / "compose" / "prometheus.yml").read_text())
    mounts = dict(m.rsplit(":", 2)[:2] for m in compose["services"]["prometheus"]["volumes"])
    (rule_file,) = config["rule_files"]
    assert mounts["../prometheus/alerts.yml"] == rule_file


def test_k8s_prometheusrule_carries_the_same_rules() -> None:
    rule = yaml.safe_load((ROOT / "deploy" / "k8s" / "prometheusrule.yaml").read_text())
    assert rule["kind"] == "PrometheusRule"
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]
    kustomization = yaml.safe_load((ROOT / "deploy" / "k8s" / "kustomization.yaml").read_text())
    assert "prometheusrule.yaml" in kustomization["resources"]
