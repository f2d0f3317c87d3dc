"""The actuator's Prometheus metrics and its /metrics, /healthz, /readyz endpoints.

Each Runner owns its own registry, so two actuators (or a test's several) in one process
never collide on metric names. The HTTP server (runtime.http, shared with the
pipeline) never touches the runner's clients, only the ``ready`` callable it is given.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from runtime.http import HealthServer
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


class MetricsServer(HealthServer):
    """/metrics (Prometheus text), /healthz (the process answers), /readyz (``ready()``):
    the one server of runtime.http, on the actuator's registry."""

    def __init__(self, metrics: Metrics, ready: Callable[[], bool], port: int) -> None:
        def readiness() -> tuple[bool, str]:
            ok = ready()
            return ok, "ready" if ok else "not ready: broker unreachable or starting"

        super().__init__(port, metrics.registry, readiness, name="actuator-metrics")
