"""Prometheus metrics of the pipeline, and its /metrics, /healthz and /readyz endpoints.

Per-partition gauges are not ``Gauge.labels(...).set()`` calls on every tick (at 50,000
group-partitions and 4 ticks a second that alone would eat a core): the model keeps its
latest observation per (group, topic), and ``LagCollector`` turns those into metric
families only when Prometheus scrapes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from pipeline.lag import Observation
from schemas import LagStatus

STATUS_NAMES = [s.value for s in LagStatus]


class LagCollector(Collector):
    """Exports the latest observation of every (group, topic) at scrape time.

    An entry not refreshed for ``stale_after_s`` is dropped: every modelled topic gets a
    sample per tick, so silence means this replica no longer owns the topic (a rebalance
    moved it to another replica, or the topic is gone) and its numbers would be stale.
    """

    def __init__(self, stale_after_s: float = 10.0) -> None:
        self._latest: dict[tuple[str, str], tuple[Observation, float]] = {}
        self._lock = threading.Lock()
        self.stale_after_s = stale_after_s

    def update(self, observations: Iterable[Observation]) -> None:
        now = time.monotonic()
        with self._lock:
            for o in observations:
                self._latest[(o.group, o.topic)] = (o, now)

    def forget_topic(self, topic: str) -> None:
        with self._lock:
            for key in [k for k in self._latest if k[1] == topic]:
                del self._latest[key]

    def snapshot(self) -> list[Observation]:
        cutoff = time.monotonic() - self.stale_after_s
        with self._lock:
            for key in [k for k, (_, at) in self._latest.items() if at < cutoff]:
                del self._latest[key]
            return [o for o, _ in self._latest.values()]

    def collect(self) -> Iterable[GaugeMetricFamily]:
        labels = ["group", "topic", "partition"]
        glabels = ["group", "topic"]
        fam = {
            "lag": GaugeMetricFamily(
                "lagpilot_lag_offsets", "Offset lag: high watermark - committed.", labels=labels
            ),
            "time": GaugeMetricFamily(
                "lagpilot_time_lag_seconds",
                "Seconds since the high watermark passed the committed offset.",
                labels=labels,
            ),
            "rate": GaugeMetricFamily(
                "lagpilot_lag_rate_messages_per_second",
                "Least-squares slope of the offset lag over the model window.",
                labels=labels,
            ),
            "accel": GaugeMetricFamily(
                "lagpilot_lag_acceleration_messages_per_second_squared",
                "Second derivative of the offset lag over the model window.",
                labels=labels,
            ),
            "produce": GaugeMetricFamily(
                "lagpilot_produce_rate_messages_per_second",
                "Rate the partition's high watermark grows.",
                labels=labels,
            ),
            "consume": GaugeMetricFamily(
                "lagpilot_consume_rate_messages_per_second",
                "Rate the group's committed offset grows.",
                labels=labels,
            ),
            "status": GaugeMetricFamily(
                "lagpilot_partition_status",
                "1 for the partition's current status (OK, WARN, ERR, STALL, STOP, REWIND).",
                labels=[*labels, "status"],
            ),
            "gtime": GaugeMetricFamily(
                "lagpilot_group_max_time_lag_seconds",
                "Worst time lag over the group's partitions of the topic.",
                labels=glabels,
            ),
            "glag": GaugeMetricFamily(
                "lagpilot_group_lag_offsets",
                "Total offset lag of the group on the topic.",
                labels=glabels,
            ),
            "gstatus": GaugeMetricFamily(
                "lagpilot_group_status_code",
                "Worst status of the group on the topic: 0 OK, 1 WARN, 2 ERR, 3 STALL, 4 STOP, "
                "5 REWIND.",
                labels=glabels,
            ),
        }
        for o in self.snapshot():
            g = [o.group, o.topic]
            for i, p in enumerate(o.partitions):
                lv = [o.group, o.topic, str(int(p))]
                fam["lag"].add_metric(lv, float(o.lag[i]))
                fam["time"].add_metric(lv, float(o.time_lag_s[i]))
                fam["rate"].add_metric(lv, float(o.lag_rate_per_s[i]))
                fam["accel"].add_metric(lv, float(o.lag_accel_per_s2[i]))
                fam["produce"].add_metric(lv, float(o.produce_rate_per_s[i]))
                fam["consume"].add_metric(lv, float(o.consume_rate_per_s[i]))
                fam["status"].add_metric([*lv, STATUS_NAMES[int(o.status[i])]], 1.0)
            if len(o.partitions):
                fam["gtime"].add_metric(g, float(o.time_lag_s.max()))
                fam["glag"].add_metric(g, float(o.lag.sum()))
                fam["gstatus"].add_metric(g, float(o.status.max()))
        yield from fam.values()


class PipelineMetrics:
    """Every metric the pipeline exports, on its own registry (tests make many)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.lag = LagCollector()
        r.register(self.lag)
        self.records = Counter(
            "lagpilot_coordinator_records_total",
            "__consumer_offsets records decoded, by kind.",
            ["kind"],
            registry=r,
        )
        self.decode_skipped = Counter(
            "lagpilot_decode_skipped_total",
            "__consumer_offsets records skipped (unknown type/version, malformed), by kind.",
            ["reason", "record_type", "version"],
            registry=r,
        )
        self.own_group_filtered = Counter(
            "lagpilot_own_group_commits_filtered_total",
            "Commits of lagpilot's own consumer groups, ignored (feedback loop).",
            registry=r,
        )
        self.model_inputs = Counter(
            "lagpilot_model_inputs_total",
            "Messages the lag model consumed, by event (watermarks, commit, offset_deleted).",
            ["event"],
            registry=r,
        )
        self.samples = Counter(
            "lagpilot_watermark_samples_total",
            "Watermark samples modelled (one per topic per tick).",
            registry=r,
        )
        self.processing_delay = Histogram(
            "lagpilot_processing_delay_seconds",
            "Wall time from a watermark sample to its modelled lag (pipeline behind-ness).",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.lag_events = Counter(
            "lagpilot_lag_events_total",
            "Events published to lagpilot.lag, by kind.",
            ["event"],
            registry=r,
        )
        self.actions = Counter(
            "lagpilot_actions_total",
            "Actions the policy published to lagpilot.control, by type and mode.",
            ["type", "mode"],
            registry=r,
        )
        self.bad_messages = Counter(
            "lagpilot_bad_messages_total",
            "Messages skipped because they could not be read or processed, by stage.",
            ["stage"],
            registry=r,
        )
        self.policy_halted = Gauge(
            "lagpilot_policy_halted", "1 while the kill switch is on.", registry=r
        )
        self.topics_modelled = Gauge(
            "lagpilot_topics_modelled", "Topics this replica models.", registry=r
        )
        self.last_sample_age = Gauge(
            "lagpilot_last_sample_age_seconds",
            "Seconds since this replica last modelled a watermark sample.",
            registry=r,
        )
        self._last_sample_wall = 0.0
        self.last_sample_age.set_function(
            lambda: time.time() - self._last_sample_wall if self._last_sample_wall else -1.0
        )

    def sample_modelled(self, sampled_at_ms: int) -> None:
        now = time.time()
        self._last_sample_wall = now
        self.samples.inc()
        self.processing_delay.observe(max(0.0, now - sampled_at_ms / 1000.0))


class HealthServer:
    """/metrics, /healthz (the process is alive) and /readyz (``ready()`` says it can work).

    A plain threaded http.server: no framework, one thread, stops with the process.
    """

    def __init__(
        self,
        port: int,
        registry: CollectorRegistry,
        ready: Callable[[], tuple[bool, str]],
        host: str = "0.0.0.0",
    ) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                if path == "/metrics":
                    self._send(200, generate_latest(outer.registry), CONTENT_TYPE_LATEST)
                elif path == "/healthz":
                    self._send(200, b"ok\n")
                elif path == "/readyz":
                    ok, why = outer.ready()
                    self._send(200 if ok else 503, (why + "\n").encode())
                else:
                    self._send(404, b"not found: try /metrics, /healthz, /readyz\n")

            def _send(self, code: int, body: bytes, ctype: str = "text/plain") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:  # scrapes are not log lines
                return

        self.registry = registry
        self.ready = ready
        self.server = ThreadingHTTPServer((host, port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> HealthServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class BrokerProbe:
    """Readiness: the broker answered a metadata request within the last ``max_age_s``.

    Probed at most every ``interval_s`` from the HTTP thread, with a short timeout, so a
    dead broker turns /readyz false within seconds and a live one costs one request.
    """

    def __init__(self, broker_config: dict[str, Any], interval_s: float = 2.0) -> None:
        self._config = broker_config
        self._interval_s = interval_s
        self._checked = 0.0
        self._result: tuple[bool, str] = (False, "not checked yet")
        self._admin: Any = None
        self._lock = threading.Lock()

    def __call__(self) -> tuple[bool, str]:
        with self._lock:
            if time.monotonic() - self._checked >= self._interval_s:
                self._result = self._probe()
                self._checked = time.monotonic()
            return self._result

    def _probe(self) -> tuple[bool, str]:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        try:
            if self._admin is None:
                self._admin = AdminClient(self._config)
            md = self._admin.list_topics(timeout=1.5)
            return True, f"ready: {len(md.brokers)} broker(s)"
        except KafkaException as exc:
            return False, f"broker unreachable: {exc}"
