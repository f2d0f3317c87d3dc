"""Every dashboard panel, evaluated by a real Prometheus scraping live lagpilot processes.

A pipeline (policy in ``act``), an actuator (dry-run) and an agent worker (the worker SDK,
``worker_proc.py``) run on the session broker, scraped every second by Debian's
``prometheus`` (``tests/support/prometheus.py``), which also loads the shipped alert rules.
The incident: the worker consumes four partitions; the hot one's messages are heavy and
share one key, so it falls behind while its siblings keep up. The policy publishes
``spread_partition``, the actuator records it, the worker obeys (6 lanes); then a halt.

Every panel of ``deploy/grafana/lagpilot.json`` *as the file is at test time* (rows added
later are covered) has its PromQL sent to Prometheus' HTTP API with ``$group`` and ``$topic``
set to the incident's, once during the incident and once after the halt. A query Prometheus
refuses fails; a panel with no series fails and says which; a target with no series fails
unless ``MAY_BE_EMPTY`` says why the incident cannot produce it. Values must be numbers,
except where ``MAY_BE_NAN`` says why. The numbers that matter are checked against the
incident: the hot partition tops the worst partitions, its group's time lag and status show
it, the action, its outcome and the worker obeying it are counted, the hot partition runs on
6 lanes, the worker's group has one member and no storm, and the kill switch reads halted.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from bench.support.harness import (
    PipelineProcess,
    create_topic,
    free_port,
    producer,
)
from pipeline.decide.control import control_action, publish_actions
from schemas import ActionType
from tests.integration.deploy.test_health import ActuatorProcess, http_get, wait_until
from tests.support.prometheus import PrometheusError, PrometheusProcess
from tests.unit.deploy.facts import ROOT

DASHBOARD = ROOT / "deploy" / "grafana" / "lagpilot.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
KEY = "prometheus-e2e-signing-key-0123456789"
HOT = 2
PARTITIONS = 4
LANES = 6
HEAVY_S = 0.05  # a message of the hot partition: 20/s on one key, 50/s arrive
POLICY = f"""
mode = "act"
policy_version = "prom-e2e-1"
[thresholds.default]
time_lag_s = 1.0
offset_lag = 1000000
accel_per_s2 = 1000000.0
enter_windows = 2
exit_windows = 40
[allow]
partition_topics = []
throttle_client_ids = []
[actions]
enabled = ["spread_partition", "restore_partition"]
ttl_s = 30
[hotspot]
ratio = 3.0
lanes = {LANES}
[cooldowns]
default_s = 30
"""

#: Targets this incident cannot give a series, by the metric they read, and why. Any other
#: empty target fails. (A labelled counter has no series until its first increment.)
MAY_BE_EMPTY = {
    "lagpilot_decode_skipped_total": "no malformed or unknown __consumer_offsets record: "
    "the broker writes only known record types here",
}
#: Targets whose value may be NaN, and why: a quantile of a histogram with no observation.
MAY_BE_NAN = {
    "lagpilot_actuator_apply_seconds_bucket": "spread_partition is a worker action: the "
    "actuator records it and calls no backend, so no apply time is observed",
}
#: Grafana's built-in interval variables, as Grafana would set them for a 1 s scrape.
BUILTINS = {"$__rate_interval": "1m", "$__interval": "1s", "$__range": "5m"}


@dataclass
class Incident:
    prometheus: PrometheusProcess
    topic: str
    group: str
    #: every panel evaluated while the incident runs, and again once the halt is in force
    during: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)
    halted: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)


def _expand(expr: str, variables: dict[str, str]) -> str:
    for name, value in BUILTINS.items():
        expr = expr.replace(name, value)
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: variables.get(m[1] or m[2], m[0]), expr)


def _panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel with queries, including those nested in collapsed rows."""
    for p in dashboard["panels"]:
        if p.get("targets"):
            yield p
        yield from (q for q in p.get("panels", []) if q.get("targets"))


def _evaluate(
    prometheus: PrometheusProcess, group: str, topic: str
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """panel title -> refId -> result, for every panel of the dashboard file as it is now."""
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {"group": group, "topic": topic}  # [\w-]+: no regex escaping needed
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    errors = []
    for panel in _panels(dashboard):
        out[panel["title"]] = {}
        for t in panel["targets"]:
            try:
                out[panel["title"]][t["refId"]] = prometheus.query(_expand(t["expr"], variables))
            except PrometheusError as exc:
                errors.append(f"panel {panel['title']!r} {t['refId']}: {exc}")
    assert not errors, "\n".join(errors)
    return out


class WorkerProcess:
    """``worker_proc.py``: the worker SDK consuming the incident's topic in its group."""

    def __init__(self, bootstrap: str, topic: str, group: str, control: str, log: Path) -> None:
        self.metrics_port = free_port()
        self.args = [bootstrap, topic, group, control, KEY, str(self.metrics_port), str(HOT),
                     str(HEAVY_S)]  # fmt: skip
        self.log_path = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        log = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the process' life
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("worker_proc.py")), *self.args],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-40:])
        return ""


@pytest.fixture(scope="module")
def incident(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Incident]:
    tmp = tmp_path_factory.mktemp("prometheus-dashboard")
    run = uuid.uuid4().hex[:6]
    topic, group, control = f"prom-{run}", f"g-prom-{run}", f"lagpilot.control.prom-{run}"
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    policy = tmp / "policy.toml"
    policy.write_text(POLICY)
    pipeline = PipelineProcess(
        kafka_bootstrap, f"^{topic}$", tmp / "state",
        LAGPILOT_RUN_POLICY="true", LAGPILOT_POLICY_FILE=str(policy),
        LAGPILOT_CONTROL_TOPIC=control, LAGPILOT_SIGNING_KEY=KEY,
    )  # fmt: skip
    actuator = ActuatorProcess(kafka_bootstrap, tmp / "actuator.log")
    actuator.env["LAGPILOT_CONTROL_TOPIC"] = control
    actuator.env["LAGPILOT_SIGNING_KEY"] = KEY
    worker = WorkerProcess(kafka_bootstrap, topic, group, control, tmp / "worker.log")
    prometheus = PrometheusProcess(
        tmp / "prometheus",
        free_port(),
        {
            "lagpilot-pipeline": [f"127.0.0.1:{pipeline.metrics_port}"],
            "lagpilot-actuator": [f"127.0.0.1:{actuator.metrics_port}"],
            "lagpilot-worker": [f"127.0.0.1:{worker.metrics_port}"],
        },
        rule_files=[ALERTS],
    )
    stop = threading.Event()

    def load() -> None:
        """5 messages per partition every 100 ms; the hot partition's all share one key
        (one document's pages: order matters), so spreading it cannot outrun them."""
        p = producer(kafka_bootstrap)
        n = 0
        while not stop.is_set():
            for part in range(PARTITIONS):
                for _ in range(5):
                    key = b"doc-0" if part == HOT else f"k-{n}".encode()
                    p.produce(topic, b"x", key=key, partition=part)
                    n += 1
            p.flush(5)
            time.sleep(0.1)

    loader = threading.Thread(target=load, daemon=True)
    pipeline.start()
    actuator.start()
    try:
        prometheus.start()
        for proc in (pipeline, actuator):
            wait_until(
                lambda p=proc: http_get(p.metrics_port, "/readyz")[0] == 200,  # type: ignore[misc]
                60, f"{type(proc).__name__} /readyz 200", proc.log_tail,
            )  # fmt: skip
        worker.start()  # after the pipeline: it created the control topic the worker reads
        wait_until(
            lambda: bool(prometheus.query(
                f'lagpilot_worker_partitions{{state="assigned"}} == {PARTITIONS}')),
            60, "the worker assigned every partition", worker.log_tail,
        )  # fmt: skip
        loader.start()
        wait_until(
            lambda: bool(prometheus.query(
                f'lagpilot_worker_commands_obeyed_total{{type="spread_partition"}} > 0'
                f' and on () lagpilot_worker_lanes{{partition="{HOT}"}} == {LANES}'
                ' and on () lagpilot_actuator_events_total{type="spread_partition"} > 0')),
            90, "the spread decided, recorded and obeyed", pipeline.log_tail,
        )  # fmt: skip
        wait_until(  # WARN: time lag 5 s past the partition's usual commit interval
            lambda: bool(prometheus.query(f'lagpilot_group_status_code{{group="{group}"}} > 0')),
            45, "the group's status past OK", pipeline.log_tail,
        )  # fmt: skip
        time.sleep(2)  # a couple more scrapes of the state the incident reached
        inc = Incident(prometheus, topic, group)
        inc.during = _evaluate(prometheus, group, topic)

        halt = control_action(ActionType.HALT, "all", now_ms=int(time.time() * 1000),
                              reason="prometheus e2e")  # fmt: skip
        publish_actions(Producer({"bootstrap.servers": kafka_bootstrap}), [halt], KEY.encode(),
                        topic=control)  # fmt: skip
        wait_until(
            lambda: len(prometheus.query(
                "lagpilot_actuator_halted == 1 or lagpilot_policy_halted == 1"
                ' or lagpilot_worker_commands_obeyed_total{type="halt"} == 1')) == 3,
            30, "the halt scraped from the actuator, the policy and the worker", pipeline.log_tail,
        )  # fmt: skip
        inc.halted = _evaluate(prometheus, group, topic)
        yield inc
    finally:
        stop.set()
        if loader.is_alive():
            loader.join(10)
        prometheus.stop()
        worker.stop()
        pipeline.stop()
        actuator.stop()


def test_every_dashboard_panel_returns_plausible_series(incident: Incident) -> None:
    inc = incident
    assert inc.prometheus.targets_up() == {
        "lagpilot-pipeline": "up", "lagpilot-actuator": "up", "lagpilot-worker": "up"
    }  # fmt: skip
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = {(p["title"], t["refId"]): t["expr"] for p in _panels(dashboard) for t in p["targets"]}
    results = inc.during
    assert results and set(results) == {p["title"] for p in _panels(dashboard)}

    problems = []
    for title, targets in results.items():
        may_be_empty = all(any(m in exprs[(title, r)] for m in MAY_BE_EMPTY) for r in targets)
        if not any(targets.values()) and not may_be_empty:
            problems.append(f"panel {title!r}: no query returned a series")
        for ref, series in targets.items():
            expr = exprs[(title, ref)]
            if not series and not any(m in expr for m in MAY_BE_EMPTY):
                problems.append(f"panel {title!r} {ref}: no series for {expr}")
            for s in series:
                if math.isnan(s["value"]) and not any(m in expr for m in MAY_BE_NAN):
                    problems.append(f"panel {title!r} {ref}: NaN for {s['metric']} ({expr})")
                if (
                    "$group" in expr
                    and "group" in s["metric"]
                    and s["metric"]["group"] != inc.group
                ):
                    problems.append(f"panel {title!r} {ref}: shows group {s['metric']['group']}")
    assert not problems, "\n".join(problems)

    def one(title: str, ref: str = "A") -> list[dict[str, Any]]:
        return results[title][ref]

    # Detection: the hot partition tops the worst-partitions table, well above its siblings.
    worst = sorted(one("Worst partitions"), key=lambda s: -s["value"])
    assert worst[0]["metric"]["partition"] == str(HOT), worst
    assert len(worst) == PARTITIONS
    assert worst[0]["value"] >= 1.0 and worst[0]["value"] > 3 * max(s["value"] for s in worst[1:])
    offsets = {s["metric"]["partition"]: s["value"] for s in one("Worst partitions", "B")}
    assert offsets[str(HOT)] == max(offsets.values()) > 0
    (group_time_lag,) = one("Time lag per group (worst partition)")
    assert group_time_lag["value"] == pytest.approx(worst[0]["value"], rel=0.2)
    (status,) = one("Status by group and topic")
    assert status["value"] > 0, "the group is not OK while a partition stalls"
    by_status = {s["metric"]["status"]: s["value"] for s in one("Partitions by status")}
    assert by_status.get("OK", 0) == PARTITIONS - 1 and sum(by_status.values()) == PARTITIONS, (
        by_status
    )
    (offset_lag,) = one("Offset lag per group")
    assert offset_lag["value"] >= offsets[str(HOT)]
    produce, consume = one("Produce vs consume rate", "A"), one("Produce vs consume rate", "B")
    assert produce[0]["value"] > consume[0]["value"] > 0, "the hot partition consumes slowly"

    # Decisions and actions: the spread is counted where it was decided and where delegated.
    actions = {(s["metric"]["type"], s["metric"]["mode"]): s["value"]
               for s in one("Actions published per minute")}  # fmt: skip
    assert actions[("spread_partition", "act")] > 0, actions
    outcomes = {(s["metric"]["result"], s["metric"]["type"]): s["value"]
                for s in one("Outcomes per minute")}  # fmt: skip
    assert outcomes[("delegated", "spread_partition")] > 0, outcomes
    assert one("Kill switch", "A")[0]["value"] == 0 and one("Kill switch", "B")[0]["value"] == 0
    assert one("Throttles in force")[0]["value"] == 0

    # Workers: the worker obeyed it, the hot partition runs on the policy's lanes.
    obeyed = {s["metric"]["type"]: s["value"] for s in one("Commands obeyed per minute")}
    assert obeyed["spread_partition"] > 0, obeyed
    lanes = {s["metric"]["partition"]: s["value"] for s in one("Lanes per partition")}
    assert lanes == {str(p): (LANES if p == HOT else 1) for p in range(PARTITIONS)}, lanes
    processed = {s["metric"]["result"]: s["value"] for s in one("Worker messages per second")}
    assert processed["processed"] > 0 and processed["failed"] == 0, processed

    # Group health: the worker's group has one member and a generation, and is no storm.
    assert [s["value"] for s in one("Members per group")] == [1]
    assert one("Generation")[0]["value"] >= 1
    assert [s["value"] for s in one("Rebalance storms")] == [0]

    # lagpilot's own health: it keeps up with its input.
    p99 = one("Processing delay", "B")[0]["value"]
    assert 0 <= p99 < 5, f"processing delay p99 {p99} s"
    (age,) = one("Last sample age per replica")
    assert 0 <= age["value"] < 5
    # at least the incident's topic (the pipeline may see other topics of the shared broker:
    # only the $topic-filtered panels above are about the incident alone)
    assert one("Topics modelled per replica")[0]["value"] >= 1


def test_the_kill_switch_reads_halted_everywhere(incident: Incident) -> None:
    after = incident.halted
    assert after["Kill switch"]["A"][0]["value"] == 1, "the actuator halted"
    assert after["Kill switch"]["B"][0]["value"] == 1, "the policy halted"
    obeyed = {s["metric"]["type"]: s["value"] for s in after["Commands obeyed per minute"]["A"]}
    assert obeyed["halt"] > 0, obeyed


def test_template_variables_list_the_incident(incident: Incident) -> None:
    """``label_values(metric{sel}, label)`` as Grafana asks Prometheus for it."""
    dashboard = json.loads(DASHBOARD.read_text())
    values = {"group": incident.group, "topic": incident.topic}
    for var in dashboard["templating"]["list"]:
        if var["type"] != "query":
            continue
        q = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", q)
        assert m, f"variable {var['name']}: {q}"
        match, label = _expand(m[1], values), m[2]
        listed = incident.prometheus.api(f"label/{label}/values", **{"match[]": match})
        own = incident.group if label == "group" else incident.topic
        assert own in listed, f"variable {var['name']} does not list {own}: {listed}"


def test_the_shipped_alert_rules_load_and_evaluate(incident: Incident) -> None:
    groups = incident.prometheus.api("rules")["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert rules, f"Prometheus loaded no rule from {ALERTS}"
    bad = [f"{r['name']}: {r.get('lastError')}" for r in rules if r["health"] != "ok"]
    assert not bad, bad

    def firing() -> set[str]:
        alerts = incident.prometheus.api("alerts")["alerts"]
        return {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}

    # the halt is in force: its alert fires within a few rule evaluations (1 s apart)
    wait_until(lambda: "LagpilotKillSwitchEngaged" in firing(), 10,
               "LagpilotKillSwitchEngaged firing", incident.prometheus.log_tail)  # fmt: skip
    assert "LagpilotProcessDown" not in firing()
