"""runtime/tracing.py: off unless OTEL_* ask (and then nothing of OpenTelemetry is even
imported), bad OTEL_* settings named with their fix, and the W3C traceparent carrying one
trace from the decision to the other side of a Kafka header."""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pipeline.decide.policy_op import _trace_decision
from runtime import tracing


@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({}, False),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_SERVICE_NAME": "lagpilot"}, False),  # a name alone exports nothing
    ],
)
def test_tracing_is_on_only_when_otel_variables_ask(env: dict[str, str], on: bool) -> None:
    assert tracing.enabled_by(env) is on


@pytest.mark.parametrize(
    ("env", "key"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER=zipkin"),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
         "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
          "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"),
    ],
)  # fmt: skip
def test_settings_lagpilot_cannot_serve_name_the_key_and_the_fix(
    env: dict[str, str], key: str
) -> None:
    with pytest.raises(tracing.TracingConfigError, match=key) as err:
        tracing.check(env)
    assert "set " in str(err.value)


def test_off_by_default_nothing_of_opentelemetry_is_imported() -> None:
    code = (
        "import sys, os\n"
        "for k in [k for k in os.environ if k.startswith('OTEL_')]: del os.environ[k]\n"
        "import pipeline.app, pipeline.decide.policy_op, actuators.runner, actuators.workers\n"
        "from runtime import tracing\n"
        "assert tracing.setup('lagpilot-test') is False and not tracing.on()\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_setup_with_an_otlp_endpoint_builds_the_exporter_and_shuts_down() -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_SERVICE_NAME": "lp-test"}
    try:
        assert tracing.setup("lagpilot-pipeline", env) is True and tracing.on()
        assert tracing.setup("lagpilot-pipeline", env) is True  # idempotent
    finally:
        tracing.shutdown()
    assert not tracing.on()


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


def test_a_decision_and_the_far_side_of_its_header_are_one_trace(
    spans: InMemorySpanExporter,
) -> None:
    event = {"event": "group_lag", "group": "g", "topic": "t", "status": "WARN",
             "max_time_lag_s": 7.5, "observed_at_ms": 1_700_000_000_000}  # fmt: skip
    action = {"id": "a-1", "type": "spread_partition", "target": "g/t/2", "mode": "act"}
    _trace_decision(event, [action])
    headers = tracing.action_headers(action, "g/t/2", 0, [("other", b"x")])
    assert [k for k, _ in headers] == ["other", tracing.TRACEPARENT]
    assert tracing.action_headers(action, "g/t/2", 0, []) == [], "produced once, then forgotten"

    with tracing.span("lagpilot.apply", parent=tracing.parent_from(headers)) as applied:
        assert applied is not None
    by_name = {s.name: s for s in spans.get_finished_spans()}
    assert set(by_name) == {
        "lagpilot.lag_event", "lagpilot.decide", "lagpilot.control_event", "lagpilot.apply"
    }  # fmt: skip
    assert len({s.context.trace_id for s in by_name.values()}) == 1
    root = by_name["lagpilot.lag_event"]
    assert root.parent is None and root.start_time == event["observed_at_ms"] * 1_000_000
    assert root.attributes["lagpilot.status"] == "WARN"
    chain = ["lagpilot.lag_event", "lagpilot.decide", "lagpilot.control_event", "lagpilot.apply"]
    for parent, child in itertools.pairwise(chain):
        assert by_name[child].parent.span_id == by_name[parent].context.span_id, child


def test_no_header_no_parent() -> None:
    assert tracing.parent_from([("other", b"x")]) is None
    assert tracing.parent_from(None) is None
