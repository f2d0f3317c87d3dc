"""The actuator's Prometheus metrics and its /metrics, /healthz, /readyz endpoints.

Each Runner owns its own registry, so two actuators (or a test's several) in one process
never collide on metric names. The HTTP server is a daemon thread: it never holds the
process open and never touches the runner's clients, only the ``ready`` callable it is given.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from schemas import ActionType, OutcomeResult


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.events = Counter(
            "lagpilot_actuator_events",
            "Control events by outcome result and action type",
            ["result", "type"],
            registry=self.registry,
        )
        # Every (result, type) at 0 from the start: a counter born at 1 shows no increase(),
        # so "Outcomes per minute" and the failed/rejected alerts would miss each first one.
        for result in OutcomeResult:
            for kind in ActionType:
                self.events.labels(result.value, kind.value)
        self.apply_seconds = Histogram(
            "lagpilot_actuator_apply_seconds",
            "Time spent applying one action through the backend, retries included",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.throttles_active = Gauge(
            "lagpilot_actuator_throttles_active",
            "Producer throttles whose lease has not ended",
            registry=self.registry,
        )
        self.halted = Gauge(
            "lagpilot_actuator_halted", "1 while the kill switch is on", registry=self.registry
        )


class MetricsServer:
    """/metrics (Prometheus text), /healthz (the process answers), /readyz (``ready()``)."""

    def __init__(self, metrics: Metrics, ready: Callable[[], bool], port: int) -> None:
        registry = metrics.registry

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/metrics":
                    self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
                elif self.path == "/healthz":
                    self._send(200, b"ok\n")
                elif self.path == "/readyz":
                    ok = ready()
                    body = b"ready\n" if ok else b"not ready: broker unreachable or starting\n"
                    self._send(200 if ok else 503, body)
                else:
                    self._send(404, b"try /metrics, /healthz or /readyz\n")

            def _send(self, status: int, body: bytes, ctype: str = "text/plain") -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return  # scrapes every few seconds are not news

        self._server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="actuator-metrics", daemon=True
        )

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
