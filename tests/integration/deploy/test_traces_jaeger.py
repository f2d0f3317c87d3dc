"""An action's whole trace in a real Jaeger, found by its action id through Jaeger's query
API, as an operator finds it (docs/runbook.md, "Follow one action").

Jaeger runs as ``make test`` built it from its Go module (tests/support/jaeger.py); the
pipeline and the actuator run as the processes users run (bench/support/control_loop.py),
under the shipped policy, each exporting OTLP over HTTP to it from the standard
``OTEL_EXPORTER_OTLP_ENDPOINT``. The incident: one partition's work slows to a fifth of its
inflow (a hotspot); the policy spreads it, the actuator records the spread. The trace must
hold, linked parent to child across both processes: the lag event that opened the incident
-> the decision -> the control event -> the actuator's apply -> its outcome.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from bench.support.control_loop import ControlLoop
from bench.support.harness import ScriptedLoad, create_topic
from tests.support.jaeger import Jaeger, jaeger_server

CHAIN = ["lagpilot.lag_event", "lagpilot.decide", "lagpilot.control_event", "lagpilot.apply",
         "lagpilot.outcome"]  # fmt: skip


def _spread_recorded(loop: ControlLoop, topic: str) -> str | None:
    """The id of a spread of ``topic`` the actuator has reported an outcome for."""
    spreads = {a["id"] for a in loop.actions()
               if a["type"] == "spread_partition" and topic in a["target"]}  # fmt: skip
    done = [o["action_id"] for o in loop.reported()
            if o.get("event") == "outcome" and o.get("action_id") in spreads]  # fmt: skip
    return done[0] if done else None


def _trace(jaeger: Jaeger, action_id: str, timeout_s: float = 30) -> dict[str, Any]:
    """The trace holding the action's apply, once every span of the chain has arrived."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = jaeger.traces("lagpilot-actuator", {"lagpilot.action_id": action_id})
        names = {s["operationName"] for t in found for s in t["spans"]}
        if len(found) == 1 and set(CHAIN) <= names:
            return found[0]
        assert time.monotonic() < deadline, f"trace incomplete in Jaeger: {sorted(names)}"
        time.sleep(0.5)


def test_an_actions_whole_trace_is_found_in_jaeger_by_its_id(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = f"tr{uuid.uuid4().hex[:6]}"
    topic, group = f"agents.traces.{run}", f"trace-workers-{run}"
    create_topic(kafka_bootstrap, topic, 4)
    with jaeger_server() as jaeger:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", jaeger.otlp_endpoint)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "200")  # spans leave within 0.2 s
        loop = ControlLoop.start(kafka_bootstrap, topic, run, tmp_path, on=True)
        action_id = None
        try:
            loop.wait_modelling()
            with ScriptedLoad(kafka_bootstrap, topic, group, rate=20, partitions=4) as load:
                time.sleep(6)  # modelled and calm
                load.slow(2, 4.0)
                deadline = time.monotonic() + 90
                while action_id is None and time.monotonic() < deadline:
                    time.sleep(1)
                    action_id = _spread_recorded(loop, topic)
        finally:
            loop.stop()
        assert action_id is not None, f"no spread recorded:\n{loop.pipe.log_tail(40)}"

        trace = _trace(jaeger, action_id)
        spans = {s["spanID"]: s for s in trace["spans"]}
        service = {s["spanID"]: trace["processes"][s["processID"]]["serviceName"]
                   for s in trace["spans"]}  # fmt: skip

        def tags(span: dict[str, Any]) -> dict[str, Any]:
            return {t["key"]: t["value"] for t in span["tags"]}

        def parent(span: dict[str, Any]) -> dict[str, Any] | None:
            refs = [r["spanID"] for r in span["references"] if r["refType"] == "CHILD_OF"]
            return spans.get(refs[0]) if refs else None

        apply = next(s for s in trace["spans"] if s["operationName"] == "lagpilot.apply"
                     and tags(s).get("lagpilot.action_id") == action_id)  # fmt: skip
        outcome = next(s for s in trace["spans"] if s["operationName"] == "lagpilot.outcome"
                       and parent(s) is apply)  # fmt: skip
        chain, at = [outcome], outcome
        while (up := parent(at)) is not None:
            chain.append(up)
            at = up
        assert [s["operationName"] for s in reversed(chain)] == CHAIN
        assert [service[s["spanID"]] for s in reversed(chain)] == [
            "lagpilot-pipeline", "lagpilot-pipeline", "lagpilot-pipeline",
            "lagpilot-actuator", "lagpilot-actuator"]  # fmt: skip
        control_event = chain[2]
        assert tags(control_event)["lagpilot.action_id"] == action_id
        assert tags(control_event)["lagpilot.action_type"] == "spread_partition"
        assert tags(chain[-1])["lagpilot.group"] == group  # the lag event that opened it
