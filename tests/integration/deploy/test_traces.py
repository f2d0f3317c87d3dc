"""One trace per action, on the real broker, with the OpenTelemetry SDK's in-memory exporter.

The pipeline (its Quix app in this process, policy in ``act``), an actuator (``Runner`` in a
thread, dry-run) and two agent workers (the worker SDK, threads) share one in-memory
exporter. The incident: the workers' hot partition gets heavy one-key messages and falls
behind; the policy spreads it. The spans that follow must form one linked trace: the lag
event that opened the incident -> the decision -> the control event -> the actuator's apply
-> its outcome, and the control event -> each worker that obeyed; the ``traceparent`` header
is on the control and outcome messages themselves.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Message, TopicPartition
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from actuators.workers import MemoryDedupeStore, Worker
from bench.support.actuator_harness import KEY, Harness
from bench.support.harness import create_topic, producer
from pipeline.app import build_app
from pipeline.decide.policy_config import load_policy_config
from pipeline.decide.policy_op import PolicyOperator
from pipeline.observe.metrics import PipelineMetrics
from pipeline.settings import load_settings
from runtime import tracing

HOT, PARTITIONS, LANES = 1, 2, 4
POLICY = f"""
mode = "act"
policy_version = "trace-e2e-1"
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
[diagnosis]
enabled = false  # the trace of one spread; the causes are tested in test_remedies*
"""


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    try:
        yield exporter
    finally:
        tracing.shutdown()


def _messages(bootstrap: str, topic: str) -> list[Message]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})  # fmt: skip
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        out, idle = [], 0
        while idle < 3:
            msg = c.poll(0.5)
            if msg is None:
                idle += 1
            elif not msg.error():
                out.append(msg)
        return out
    finally:
        c.close()


def test_the_spans_of_one_incident_form_one_linked_trace(
    kafka_bootstrap: str, tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    run = uuid.uuid4().hex[:6]
    topic, group = f"trace-{run}", f"g-trace-{run}"
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    harness = Harness(kafka_bootstrap, f"trace-{run}")
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text(POLICY)
    settings = load_settings(
        env={
            "KAFKA_BOOTSTRAP": kafka_bootstrap,
            "LAGPILOT_CONSUMER_GROUP": f"lagpilot-trace-{run}",
            "LAGPILOT_STATE_DIR": str(tmp_path / "state"),
            "LAGPILOT_INCLUDE": f"^{topic}$",
            "LAGPILOT_METRICS_PORT": "0",
            "LAGPILOT_RUN_POLICY": "true",
            "LAGPILOT_POLICY_FILE": str(policy_file),
            "LAGPILOT_CONTROL_TOPIC": harness.control,
        }
    )
    policy = PolicyOperator(load_policy_config(str(policy_file)), KEY)
    app, _ = build_app(settings, PipelineMetrics(), policy=policy)

    def handle(msg: Any, ctx: Any) -> None:
        if ctx.partition == HOT:
            time.sleep(0.05)  # heavy payloads, one key: 20/s against 50/s arriving

    workers = [
        Worker(bootstrap=kafka_bootstrap, group=group, topics=[topic], handler=handle,
               instance_id="", dedupe=MemoryDedupeStore(), control_topic=harness.control,
               signing_key=KEY, commit_interval_s=0.2,
               consumer_config={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000})
        for _ in range(2)
    ]  # fmt: skip
    stop = threading.Event()
    lanes: list[int] = []

    def load() -> None:
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

    def finished(name: str) -> list[ReadableSpan]:
        return [s for s in spans.get_finished_spans() if s.name == name]

    def watch() -> None:
        """Start the workers once the pipeline made the control topic; stop the app once
        the actuator recorded the spread and a worker obeyed it (or at the deadline)."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not stop.is_set():
            topics = producer(kafka_bootstrap).list_topics(timeout=5).topics
            if harness.control in topics:
                break
            time.sleep(0.3)
        harness.start()
        for w in workers:
            w.start()
        threading.Thread(target=load, daemon=True).start()
        while time.monotonic() < deadline:
            obeyed = finished("lagpilot.worker.obey")
            spread = {
                s.attributes.get("lagpilot.action_id")
                for s in obeyed
                if s.attributes.get("lagpilot.action_type") == "spread_partition"
            }
            recorded = {s.attributes.get("lagpilot.action_id")
                        for s in finished("lagpilot.outcome")}  # fmt: skip
            if spread & recorded:  # our workers obeyed a spread the actuator recorded
                time.sleep(1)  # the other spans of the same batch
                lanes.extend(w.lanes(topic, HOT) for w in workers)  # before they stop
                break
            time.sleep(0.2)
        app.stop()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        app.run()  # in this thread: Quix wants the main thread (signals)
    finally:
        stop.set()
        watcher.join(30)
        for w in workers:
            w.stop(10)
        for runner, _, _ in list(harness.runners):
            harness.stop(runner)

    # the incident's lag event: this pipeline may also see other groups of the shared broker
    # (the lagpilot.watermarks topic is shared by every pipeline on it), so pick ours
    roots = {s.context.trace_id: s for s in finished("lagpilot.lag_event")
             if s.attributes["lagpilot.group"] == group}  # fmt: skip
    control_spans = [s for s in finished("lagpilot.control_event")
                     if s.attributes["lagpilot.action_type"] == "spread_partition"
                     and s.context.trace_id in roots]  # fmt: skip
    assert control_spans, f"no spread decided: {[s.name for s in spans.get_finished_spans()]}"
    control = control_spans[0]
    trace_id = control.context.trace_id
    in_trace = [s for s in spans.get_finished_spans() if s.context.trace_id == trace_id]
    by_id = {s.context.span_id: s for s in in_trace}

    def chain(span: ReadableSpan) -> list[str]:
        names = [span.name]
        while span.parent is not None:
            span = by_id[span.parent.span_id]  # KeyError: a parent outside the trace
            names.append(span.name)
        return names[::-1]

    opened = ["lagpilot.lag_event", "lagpilot.decide", "lagpilot.control_event"]
    (root,) = [s for s in in_trace if s.parent is None]
    assert root.name == "lagpilot.lag_event"
    assert root.attributes["lagpilot.group"] == group and root.attributes["lagpilot.topic"] == topic
    assert chain(control) == opened
    action_id = control.attributes["lagpilot.action_id"]
    (outcome,) = [s for s in in_trace if s.name == "lagpilot.outcome"]
    assert chain(outcome) == [*opened, "lagpilot.apply", "lagpilot.outcome"]
    assert outcome.attributes["lagpilot.result"] == "delegated"  # a worker action
    assert outcome.attributes["lagpilot.action_id"] == action_id
    obeyed = [s for s in in_trace if s.name == "lagpilot.worker.obey"]
    assert len(obeyed) == len(workers), "each worker that obeyed joins the trace"
    for s in obeyed:
        assert chain(s) == [*opened, "lagpilot.worker.obey"]
        assert s.attributes["lagpilot.action_id"] == action_id
        assert s.attributes["lagpilot.partition"] == HOT and s.attributes["lagpilot.lanes"] == LANES
    # the partition's owner spread it at once; the other remembers it for a rebalance
    assert sum(s.attributes["lagpilot.owner"] for s in obeyed) == 1
    assert sorted(lanes) == [1, LANES], lanes

    # the traceparent travels in the Kafka messages themselves
    def traceparent(msg: Message) -> str:
        """version-trace_id-span_id of the header (the flags say sampled, and maybe more)"""
        return dict(msg.headers() or [])[tracing.TRACEPARENT].decode().rsplit("-", 1)[0]

    (action_msg,) = [m for m in _messages(kafka_bootstrap, harness.control)
                     if action_id.encode() in (m.value() or b"")]  # fmt: skip
    assert traceparent(action_msg) == f"00-{trace_id:032x}-{control.context.span_id:016x}"
    (outcome_msg,) = [m for m in _messages(kafka_bootstrap, harness.outcomes)
                      if m.key() == action_id.encode()]  # fmt: skip
    assert traceparent(outcome_msg) == f"00-{trace_id:032x}-{outcome.context.span_id:016x}"
