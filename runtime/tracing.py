"""One trace per action: W3C trace context in Kafka headers, spans through OpenTelemetry.

A trace starts at the lag event that opened the incident (the ``group_lag`` summary the
policy acted on: its span begins at the summary's ``observed_at_ms``), then the decision,
each action published to ``lagpilot.control``, the actuator's apply and its outcome on
``lagpilot.outcomes``, and every worker that obeyed. Between processes the context travels
as the ``traceparent`` header of the control and outcome messages.

Off unless the standard variables ask for it (``setup`` reads them): ``OTEL_TRACES_EXPORTER``
set to ``otlp`` (or ``console``), or an ``OTEL_EXPORTER_OTLP_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``; ``OTEL_SDK_DISABLED=true`` wins. When off, the SDK is
never imported, the pipeline adds no header step, and every call site is behind ``on()``,
one global read. Both sides of the contract use this module: ``pipeline/`` and
``actuators/`` never import each other.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from schemas.codec import ConfigError

log = logging.getLogger(__name__)

TRACEPARENT = "traceparent"
#: the OTLP protocol lagpilot ships an exporter for (opentelemetry-exporter-otlp-proto-http)
PROTOCOL = "http/protobuf"

_tracer: Any = None  # an opentelemetry Tracer while tracing is on
_provider: Any = None
_headers_by_action: OrderedDict[str, list[tuple[str, bytes]]] = OrderedDict()
_REMEMBERED = 10_000


class TracingConfigError(ConfigError):
    """An ``OTEL_*`` setting lagpilot cannot honour; the message names it and the fix."""


def enabled_by(env: Mapping[str, str]) -> bool:
    """Whether the ``OTEL_*`` variables ask for traces (pure: ``env`` is passed in)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER")
    if exporter is not None:
        return exporter.strip().lower() not in ("", "none")
    return bool(
        env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def check(env: Mapping[str, str]) -> str:
    """The exporter to build (``otlp`` or ``console``) for an ``env`` that enables tracing;
    TracingConfigError naming the key and the fix for one lagpilot cannot serve."""
    exporter = (env.get("OTEL_TRACES_EXPORTER") or "otlp").strip().lower()
    if exporter not in ("otlp", "console"):
        raise TracingConfigError(
            f"OTEL_TRACES_EXPORTER={exporter}: lagpilot exports traces with otlp (or console "
            "for a look at the spans); set OTEL_TRACES_EXPORTER=otlp, or none to turn them off"
        )
    for key in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = env.get(key)
        if protocol:
            if protocol.strip() != PROTOCOL:
                raise TracingConfigError(
                    f"{key}={protocol}: lagpilot ships the OTLP {PROTOCOL} exporter; set "
                    f"{key}={PROTOCOL} and point OTEL_EXPORTER_OTLP_ENDPOINT at the "
                    "collector's HTTP port (4318)"
                )
            break
    return exporter


def setup(service_name: str, env: Mapping[str, str] | None = None) -> bool:
    """At process start: trace if the ``OTEL_*`` variables ask for it; True if on.

    Idempotent (a second call keeps the first provider). ``OTEL_SERVICE_NAME`` overrides
    ``service_name``; the exporter reads its own ``OTEL_EXPORTER_OTLP_*`` variables.
    """
    env = os.environ if env is None else env
    if _tracer is not None or not enabled_by(env):
        return _tracer is not None
    exporter_name = check(env)
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SpanExporter,
    )

    exporter: SpanExporter
    if exporter_name == "console":
        exporter = ConsoleSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    name = env.get("OTEL_SERVICE_NAME") or service_name
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    use(provider)
    log.info("tracing on: %s exporter, service %s", exporter_name, name)
    return True


def use(provider: Any) -> None:
    """Trace with ``provider`` (an opentelemetry TracerProvider): ``setup`` calls it, and
    tests pass one with an in-memory exporter."""
    global _tracer, _provider
    _provider = provider
    _tracer = provider.get_tracer("lagpilot")


def shutdown() -> None:
    """Flush and stop: the spans of the last actions leave before the process does."""
    global _tracer, _provider
    if _provider is not None:
        with contextlib.suppress(Exception):
            _provider.shutdown()
    _tracer = _provider = None
    _headers_by_action.clear()


def on() -> bool:
    return _tracer is not None


def _propagator() -> Any:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator()


def parent_from(headers: Sequence[tuple[str, Any]] | None) -> Any:
    """The context a ``traceparent`` header carries (None without one)."""
    for name, value in headers or ():
        if name == TRACEPARENT and value:
            text = value.decode() if isinstance(value, bytes) else str(value)
            return _propagator().extract({TRACEPARENT: text})
    return None


def headers_of(span: Any) -> list[tuple[str, bytes]]:
    """The ``traceparent`` header that makes ``span`` the parent on the other side."""
    from opentelemetry import trace

    carrier: dict[str, str] = {}
    _propagator().inject(carrier, context=trace.set_span_in_context(span))
    return [(k, v.encode()) for k, v in carrier.items()]


@contextlib.contextmanager
def span(
    name: str,
    *,
    parent: Any = None,
    attributes: Mapping[str, Any] | None = None,
    start_ms: int | None = None,
) -> Iterator[Any]:
    """A span (None while tracing is off) under ``parent`` (a span, a context from
    ``parent_from``, or None for a new trace), optionally started at ``start_ms``."""
    if _tracer is None:
        yield None
        return
    from opentelemetry import trace

    context = parent
    if parent is not None and isinstance(parent, trace.Span):
        context = trace.set_span_in_context(parent)
    start_ns = None if start_ms is None else int(start_ms) * 1_000_000
    attrs = {k: v for k, v in (attributes or {}).items() if v is not None}
    with _tracer.start_as_current_span(
        name, context=context, attributes=attrs, start_time=start_ns
    ) as s:
        yield s


def remember(action_id: str, headers: list[tuple[str, bytes]]) -> None:
    """Keep an action's ``traceparent`` until its message is produced (bounded)."""
    _headers_by_action[action_id] = headers
    while len(_headers_by_action) > _REMEMBERED:
        _headers_by_action.popitem(last=False)


def action_headers(value: Any, key: Any, timestamp: int, headers: Any) -> list[tuple[str, Any]]:
    """A Quix ``set_headers`` callback: the action's ``traceparent`` on its control message."""
    out = [(k, v) for k, v in (headers or ()) if k != TRACEPARENT]
    if isinstance(value, dict):
        out += _headers_by_action.pop(str(value.get("id")), [])
    return out
