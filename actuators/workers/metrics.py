"""Prometheus metrics of a worker (or pool worker), read from it at scrape time.

The worker keeps plain counters (``Engine.stats()``); this collector turns them into
families only when Prometheus scrapes, so a worker that nobody scrapes pays nothing, and
the hot path keeps one ``Counter`` increment per message. ``serve_metrics`` serves them on
``/metrics`` beside the agent's own code; a process that already runs a Prometheus registry
registers ``WorkerMetrics(worker)`` on it instead.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from runtime.http import HealthServer
from schemas import WORKER_ACTIONS

if TYPE_CHECKING:
    from actuators.workers.engine import Engine

#: stats() key -> (family, label value); every value is exported from the start (as 0).
_MESSAGES = {"processed": "processed", "retried": "retried", "failed": "failed"}
_COMMITS = {"commits": "ok", "commit_failed": "failed"}
_HANDOFFS = {
    "handed_off": "handed_off",
    "taken_back": "taken_back",
    "taken": "taken",
    "returned": "returned",
}


class WorkerMetrics(Collector):
    """The worker's counters and its partitions' state as Prometheus families, labelled
    with its consumer group and kind (``worker`` or ``pool``)."""

    def __init__(self, worker: Engine) -> None:
        self.worker = worker

    def collect(self) -> Iterator[Any]:
        w = self.worker
        stats = w.stats()
        base = ["group", "kind"]
        ids = [w.group, w.kind]

        def counter(name: str, doc: str, label: str, keys: dict[str, str]) -> Any:
            fam = CounterMetricFamily(name, doc, labels=[*base, label])
            for key, value in keys.items():
                fam.add_metric([*ids, value], stats.get(key, 0))
            return fam

        yield counter(
            "lagpilot_worker_messages",
            "Messages the handler finished (processed), retried, or gave up on (failed).",
            "result",
            _MESSAGES,
        )
        yield counter("lagpilot_worker_commits", "Offset commits, by result.", "result", _COMMITS)
        yield counter(
            "lagpilot_worker_handoffs",
            "Partitions handed off to a pool, taken back, taken by a pool, returned by it.",
            "event",
            _HANDOFFS,
        )
        obeyed = CounterMetricFamily(
            "lagpilot_worker_commands_obeyed",
            "lagpilot control events this worker obeyed, by action type.",
            labels=[*base, "type"],
        )
        for kind in sorted(WORKER_ACTIONS):
            obeyed.add_metric([*ids, kind.value], stats.get(f"obeyed_{kind.value}", 0))
        yield obeyed
        control = CounterMetricFamily(
            "lagpilot_worker_control_events",
            "Control-topic events read, by verdict (accepted, duplicate, other_group, ...).",
            labels=[*base, "verdict"],
        )
        for key, value in sorted(stats.items()):
            if key.startswith("control_"):
                control.add_metric([*ids, key.removeprefix("control_")], value)
        yield control

        assigned, paused = _snapshot(w.assignment), _snapshot(w.paused)
        partitions = GaugeMetricFamily(
            "lagpilot_worker_partitions",
            "Partitions assigned to this worker, and of those paused (backpressure, halt, "
            "handed off).",
            labels=[*base, "state"],
        )
        partitions.add_metric([*ids, "assigned"], len(assigned))
        partitions.add_metric([*ids, "paused"], len(paused & assigned))
        yield partitions
        lanes = GaugeMetricFamily(
            "lagpilot_worker_lanes",
            "Lanes each assigned partition is processed on (more than the default: spread).",
            labels=[*base, "topic", "partition"],
        )
        for topic, partition in sorted(assigned):
            lanes.add_metric([*ids, topic, str(partition)], w.lanes(topic, partition))
        yield lanes


def _snapshot(read: Any) -> set[tuple[str, int]]:
    """A copy of a set the poll thread may be changing: retried on a concurrent change."""
    for _ in range(5):
        try:
            return set(read())
        except RuntimeError:  # "Set changed size during iteration"
            continue
    return set()


def serve_metrics(worker: Engine, port: int, host: str = "0.0.0.0") -> tuple[Any, threading.Thread]:
    """Serve ``worker``'s metrics on ``http://host:port/metrics`` (a daemon thread; with
    /healthz, and /readyz true while its poll loop runs), on the server every lagpilot
    process uses (``runtime.http``); returns (server, thread):
    ``server.shutdown()`` stops it.

    >>> from actuators.workers import MemoryDedupeStore, Worker, serve_metrics
    >>> worker = Worker(bootstrap="localhost:9092", group="parsers", topics=["docs"],
    ...                 handler=lambda msg, ctx: None, dedupe=MemoryDedupeStore(),
    ...                 signing_key=b"k")
    >>> server, _ = serve_metrics(worker, port=0, host="127.0.0.1")
    >>> server.server_address[1] > 0
    True
    >>> server.shutdown()
    """
    registry = CollectorRegistry()
    registry.register(WorkerMetrics(worker))

    def ready() -> tuple[bool, str]:
        if worker.error is not None:
            return False, f"the poll loop stopped: {worker.error!r}"
        return (True, "polling") if worker.running else (False, "not started")

    served = HealthServer(port, registry, ready, host=host, name="lagpilot-worker-metrics")
    served.start()
    return served.server, served.thread
