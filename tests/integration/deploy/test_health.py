"""The health endpoints and the dashboard, against running processes on a real broker.

1. On the session broker: a real pipeline (``python -m pipeline``) and a real actuator
   (``python -m actuators``) answer /healthz and /readyz, and every metric the Grafana
   dashboard queries is in their /metrics (names as Prometheus sees them: counters'
   ``_total``, histograms' ``_bucket``/``_sum``/``_count``), with the lag of a group we set
   up exactly as the dashboard will show it.
2. On a throwaway broker of our own (never the shared one): /readyz turns 503 within
   seconds of the broker going away, while /healthz stays 200, so Kubernetes takes the pod
   out of service instead of restarting it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families
from support.ports import own_port

from bench.support.harness import PipelineProcess, commit, create_topic, free_port
from tests.unit.deploy.facts import (
    ROOT,
    dashboard_metrics,
    dashboard_queries,
    exported_names,
    worker_exported_names,
)

WORKER_NAMES = set(worker_exported_names())
KAFKA_SH = ROOT / "deploy" / "local" / "kafka.sh"
DASHBOARD = ROOT / "deploy" / "grafana" / "lagpilot.json"
THROWAWAY_PORT = str(own_port("throwaway"))
KEY = "integration-test-signing-key-0123456789"


def http_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:  # not listening yet
        return 0, str(exc)


def wait_until(
    check: Callable[[], bool], timeout_s: float, what: str, log: Callable[[], str]
) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if check():
            return time.monotonic() - started
        time.sleep(0.2)
    raise AssertionError(f"{what} not within {timeout_s:.0f} s; process log:\n{log()}")


class ActuatorProcess:
    """``python -m actuators`` on its own topics and group, dry-run: it never touches quotas."""

    def __init__(self, bootstrap: str, log_path: Path) -> None:
        run = uuid.uuid4().hex[:8]
        self.metrics_port = free_port()
        self.log_path = log_path
        self.env = {
            **os.environ,
            "KAFKA_BOOTSTRAP": bootstrap,
            "LAGPILOT_ACTUATOR_ID": f"health-{run}",
            "LAGPILOT_ACTUATOR_GROUP": f"lagpilot-health-{run}",
            "LAGPILOT_CONTROL_TOPIC": f"lagpilot.control.health-{run}",
            "LAGPILOT_OUTCOMES_TOPIC": f"lagpilot.outcomes.health-{run}",
            "LAGPILOT_ACTUATOR_BACKEND": "dry-run",
            "LAGPILOT_ACTUATOR_METRICS_PORT": str(self.metrics_port),
            "LAGPILOT_SIGNING_KEY": KEY,
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ActuatorProcess:
        log = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the process' life
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "actuators"], env=self.env, stdout=log, stderr=subprocess.STDOUT
        )
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-40:])
        return ""


def _samples(exposition: str, name: str) -> list[dict[str, str]]:
    out = []
    for fam in text_string_to_metric_families(exposition):
        out += [{**s.labels, "_value": str(s.value)} for s in fam.samples if s.name == name]
    return out


@pytest.fixture
def processes(
    kafka_bootstrap: str, tmp_path: Path
) -> Iterator[tuple[PipelineProcess, ActuatorProcess]]:
    topic = f"health-{uuid.uuid4().hex[:10]}"
    create_topic(kafka_bootstrap, topic, 2)
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(10):
        p.produce(topic, b"x", partition=0, key=str(i).encode())
    assert p.flush(15) == 0
    commit(kafka_bootstrap, f"{topic}-g", {(topic, 0): 3, (topic, 1): 0})
    pipeline = PipelineProcess(kafka_bootstrap, f"^{topic}$", tmp_path / "state")
    actuator = ActuatorProcess(kafka_bootstrap, tmp_path / "actuator.log")
    pipeline.start()
    actuator.start()
    try:
        yield pipeline, actuator
    finally:
        pipeline.stop()
        actuator.stop()


def test_health_and_every_dashboard_metric_on_running_processes(
    processes: tuple[PipelineProcess, ActuatorProcess],
) -> None:
    pipeline, actuator = processes
    group = f"{pipeline.include.strip('^$')}-g"

    def lag_modelled() -> bool:
        code, text = http_get(pipeline.metrics_port, "/metrics")
        return code == 200 and any(
            s["group"] == group for s in _samples(text, "lagpilot_lag_offsets")
        )

    wait_until(lag_modelled, 45, "the pipeline modelling the test group", pipeline.log_tail)
    wait_until(
        lambda: http_get(actuator.metrics_port, "/readyz")[0] == 200,
        45, "actuator /readyz 200", actuator.log_tail,
    )  # fmt: skip
    for port in (pipeline.metrics_port, actuator.metrics_port):
        assert http_get(port, "/healthz")[0] == 200
        assert http_get(port, "/readyz")[0] == 200

    pipeline_text = http_get(pipeline.metrics_port, "/metrics")[1]
    actuator_text = http_get(actuator.metrics_port, "/metrics")[1]
    exported = exported_names(pipeline_text) | exported_names(actuator_text)
    # worker metrics come from agent workers (not run here): their names from the SDK's
    # collector; test_prometheus_dashboard.py scrapes a live worker
    exported |= {n: 0 for n in WORKER_NAMES}
    queried = dashboard_metrics(json.loads(DASHBOARD.read_text()))
    assert queried <= set(exported), (
        f"dashboard queries unexported {sorted(queried - set(exported))}"
    )

    # The numbers the lag panels show are the real ones: 10 produced, 3 committed on p0.
    lag = {
        s["partition"]: float(s["_value"])
        for s in _samples(pipeline_text, "lagpilot_lag_offsets")
        if s["group"] == group
    }
    assert lag == {"0": 7.0, "1": 0.0}
    (glag,) = [
        s for s in _samples(pipeline_text, "lagpilot_group_lag_offsets") if s["group"] == group
    ]
    assert float(glag["_value"]) == 7.0
    # every series the dashboard filters by $group (and $topic) carries those labels
    exprs = " ".join(dashboard_queries(json.loads(DASHBOARD.read_text())))
    by_topic = set(re.findall(r'(lagpilot_\w+)\{group=~"\$group", topic=~"\$topic"', exprs))
    by_group = set(re.findall(r'(lagpilot_\w+)\{group=~"\$group"\}', exprs))
    assert "lagpilot_group_status_code" in by_topic and "lagpilot_group_storm" in by_group
    for names, labels in ((by_topic, {"group", "topic"}), (by_group, {"group"})):
        for name in names - WORKER_NAMES:
            samples = _samples(pipeline_text, name)
            assert samples and all(labels <= set(s) for s in samples), name


@pytest.fixture
def throwaway_broker(tmp_path: Path) -> Iterator[tuple[str, Callable[[], None]]]:
    """Our own single Kafka broker (``support.ports``): the one test that may stop a broker."""
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "LAGPILOT_BROKER_PORT": THROWAWAY_PORT,
        "LAGPILOT_BROKER_RUN_DIR": str(tmp_path / "broker"),
    }
    up = subprocess.run([str(KAFKA_SH), "up"], env=env, capture_output=True, text=True, timeout=120)
    if up.returncode != 0:
        pytest.fail(
            f"could not start the throwaway broker (Java 17+ and the jars needed):\n{up.stderr}"
        )
    stopped = False

    def stop() -> None:
        nonlocal stopped
        if not stopped:
            subprocess.run([str(KAFKA_SH), "down"], env=env, capture_output=True, timeout=60)
            stopped = True

    try:
        yield up.stdout.strip().splitlines()[-1], stop
    finally:
        stop()


def test_readiness_turns_false_when_the_broker_goes_and_liveness_stays(
    throwaway_broker: tuple[str, Callable[[], None]], tmp_path: Path
) -> None:
    bootstrap, stop_broker = throwaway_broker
    assert bootstrap.endswith(f":{THROWAWAY_PORT}")
    pipeline = PipelineProcess(bootstrap, "^nothing-here$", tmp_path / "state").start()
    actuator = ActuatorProcess(bootstrap, tmp_path / "actuator.log").start()
    try:
        for proc in (pipeline, actuator):
            wait_until(
                lambda p=proc: http_get(p.metrics_port, "/readyz")[0] == 200,  # type: ignore[misc]
                45, f"{type(proc).__name__} /readyz 200", proc.log_tail,
            )  # fmt: skip
        stop_broker()
        gone = time.monotonic()
        for proc in (pipeline, actuator):
            wait_until(
                lambda p=proc: http_get(p.metrics_port, "/readyz")[0] == 503,  # type: ignore[misc]
                12 - (time.monotonic() - gone), f"{type(proc).__name__} /readyz 503", proc.log_tail,
            )  # fmt: skip
            code, _ = http_get(proc.metrics_port, "/healthz")
            assert code == 200, f"{type(proc).__name__} must stay alive while the broker is away"
            assert proc.proc is not None and proc.proc.poll() is None, proc.log_tail()
        code, body = http_get(pipeline.metrics_port, "/readyz")
        assert code == 503 and "broker" in body, "readiness says why"
    finally:
        pipeline.stop()
        actuator.stop()
