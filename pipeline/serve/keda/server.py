"""``lagpilot scaler``: KEDA's external scaler, served over gRPC from lagpilot's model.

Implements ``externalscaler.ExternalScaler`` (pipeline/serve/keda/externalscaler.proto):
``IsActive`` and ``GetMetrics`` for the ``external`` trigger, ``StreamIsActive`` for
``external-push`` (a value is sent the moment a summary on ``lagpilot.lag`` changes it),
``GetMetricSpec`` and ``StreamMetricSpec``. Every call carries its ScaledObject's metadata,
validated each time; a bad key is answered with ``INVALID_ARGUMENT`` naming it.

Health as for the other processes: ``/healthz``, ``/readyz`` (read ``lagpilot.lag`` back to
its end, and the broker answers) and ``/metrics`` on ``--metrics-port``.
"""

from __future__ import annotations

import logging
import queue
import signal
import sys
import threading
from concurrent import futures
from typing import Any

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge

from pipeline.serve.keda import externalscaler_pb2 as pb
from pipeline.serve.keda import externalscaler_pb2_grpc as pb_grpc
from pipeline.serve.keda.metadata import MetadataError, ScalerSpec, parse_metadata
from pipeline.serve.keda.reader import LagTopicReader, MembershipPoller
from pipeline.serve.keda.rules import Decision
from pipeline.serve.keda.scaler import Scaler
from runtime.cli import (
    EX_UNAVAILABLE,
    EX_USAGE,
    CommandError,
    Parser,
    add_connection,
    client_config,
    connect,
    run,
)
from schemas import topics

log = logging.getLogger("lagpilot.scaler")

DEFAULT_PORT = 9105
DEFAULT_METRICS_PORT = 9103
#: the environment the scaler reads (plus LAGPILOT_KAFKA_* client settings, as the pipeline)
ENV_KEYS = (
    "KAFKA_BOOTSTRAP",
    "LAGPILOT_SCALER_PORT",
    "LAGPILOT_SCALER_METRICS_PORT",
    "LAGPILOT_SCALER_LOOKBACK_S",
    "LAGPILOT_LOG_LEVEL",
    "LAGPILOT_CONNECT_TIMEOUT_S",
    "LAGPILOT_CONFIG",
    "LAGPILOT_DEBUG",
)


class ScalerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.replicas = Gauge(
            "lagpilot_scaler_desired_replicas",
            "smoothed desired replicas (capacity rule)",
            ["scaled_object"],
            registry=r,
        )
        self.raw = Gauge(
            "lagpilot_scaler_needed_replicas",
            "replicas the rates ask for, before cap and smoothing",
            ["scaled_object"],
            registry=r,
        )
        self.cap_binds = Gauge(
            "lagpilot_scaler_cap_binds",
            "1 while the partition count (or maxReplicas) caps the scale",
            ["scaled_object"],
            registry=r,
        )
        self.stuck = Gauge(
            "lagpilot_scaler_stuck_partitions",
            "partitions set aside as stuck (STALL/STOP while others progress)",
            ["scaled_object"],
            registry=r,
        )
        self.active = Gauge("lagpilot_scaler_active", "IsActive", ["scaled_object"], registry=r)
        self.pushes = Counter(
            "lagpilot_scaler_pushes", "values sent on StreamIsActive streams", ["value"], registry=r
        )
        self.invalid = Counter(
            "lagpilot_scaler_invalid_metadata",
            "calls refused for bad trigger metadata",
            ["key"],
            registry=r,
        )
        self.bad_events = Counter(
            "lagpilot_scaler_bad_events", "lag events that could not be read (skipped)", registry=r
        )


class Reporter:
    """Turns each decision into gauges, and logs when the cap starts or stops binding and
    when stuck partitions change (what an on-call engineer should hear about)."""

    def __init__(self, metrics: ScalerMetrics) -> None:
        self.m = metrics
        self.seen: dict[str, tuple[bool, tuple[int, ...]]] = {}

    def __call__(self, so: str, d: Decision, push: bool | None) -> None:
        m, cap = self.m, d.capacity
        m.replicas.labels(so).set(d.scale.replicas)
        m.active.labels(so).set(1 if d.activity.active else 0)
        if cap is None:
            return
        m.raw.labels(so).set(round(cap.raw, 3))
        m.cap_binds.labels(so).set(1 if cap.cap_binds else 0)
        m.stuck.labels(so).set(len(cap.stuck))
        now = (cap.cap_binds, cap.stuck)
        before = self.seen.get(so, (False, ()))
        if now[0] != before[0]:
            if cap.cap_binds:
                log.warning(
                    "%s: the partition cap binds: %.1f replicas needed, %d partitions (cap %d); "
                    "more consumers cannot help: the policy's add_partitions step takes over",
                    so,
                    cap.raw,
                    d.summary.topic_partitions if d.summary else 0,
                    cap.cap,
                )
            else:
                log.info("%s: the partition cap no longer binds (%.1f needed)", so, cap.raw)
        if now[1] != before[1] and cap.stuck:
            log.warning(
                "%s: stuck partitions %s (STALL/STOP while others progress): set aside, "
                "their owner needs attention, not more replicas",
                so,
                list(cap.stuck),
            )
        self.seen[so] = now


def so_id(ref: pb.ScaledObjectRef) -> str:
    return f"{ref.namespace or 'default'}/{ref.name}"


class ExternalScaler(pb_grpc.ExternalScalerServicer):
    def __init__(self, scaler: Scaler, metrics: ScalerMetrics, stop: threading.Event) -> None:
        self.scaler = scaler
        self.metrics = metrics
        self.stop = stop

    def _spec(self, ref: pb.ScaledObjectRef, context: grpc.ServicerContext) -> ScalerSpec:
        try:
            return parse_metadata(dict(ref.scalerMetadata))
        except MetadataError as exc:
            self.metrics.invalid.labels(exc.key).inc()
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{so_id(ref)}: {exc}")
            raise  # abort raises; this line is for the type checker

    def IsActive(self, request: pb.ScaledObjectRef, context: Any) -> pb.IsActiveResponse:
        spec = self._spec(request, context)
        return pb.IsActiveResponse(result=self.scaler.is_active(so_id(request), spec))

    def StreamIsActive(self, request: pb.ScaledObjectRef, context: Any) -> Any:
        spec = self._spec(request, context)
        so = so_id(request)
        q, now = self.scaler.watch(so, spec)
        try:
            self.metrics.pushes.labels(str(now).lower()).inc()
            yield pb.IsActiveResponse(result=now)
            while context.is_active() and not self.stop.is_set():
                try:
                    value = q.get(timeout=0.5)
                except queue.Empty:
                    continue
                self.metrics.pushes.labels(str(value).lower()).inc()
                yield pb.IsActiveResponse(result=value)
        finally:
            self.scaler.unwatch(so, q)

    def _specs(self, spec: ScalerSpec) -> pb.GetMetricSpecResponse:
        ms = pb.MetricSpec(metricName=spec.metric_name, targetSizeFloat=spec.target_size)
        return pb.GetMetricSpecResponse(metricSpecs=[ms])

    def GetMetricSpec(self, request: pb.ScaledObjectRef, context: Any) -> pb.GetMetricSpecResponse:
        spec = self._spec(request, context)
        self.scaler.decision(so_id(request), spec)  # start serving it (replay) now
        return self._specs(spec)

    def StreamMetricSpec(self, request: pb.ScaledObjectRef, context: Any) -> Any:
        """The specs follow from the metadata alone, which only KEDA changes (by opening a
        new stream): sent once, and the stream held open until KEDA closes it."""
        spec = self._spec(request, context)
        self.scaler.decision(so_id(request), spec)
        yield self._specs(spec)
        while context.is_active() and not self.stop.wait(0.5):
            pass

    def GetMetrics(self, request: pb.GetMetricsRequest, context: Any) -> pb.GetMetricsResponse:
        ref = request.scaledObjectRef
        spec = self._spec(ref, context)
        value = self.scaler.metric(so_id(ref), spec)
        name = request.metricName or spec.metric_name
        return pb.GetMetricsResponse(
            metricValues=[pb.MetricValue(metricName=name, metricValueFloat=value)]
        )


def serve(
    scaler: Scaler, metrics: ScalerMetrics, port: int, host: str = "0.0.0.0"
) -> tuple[grpc.Server, int, threading.Event]:
    """A started gRPC server (threads: one per open stream, KEDA holds one per trigger)."""
    stop = threading.Event()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=64, thread_name_prefix="grpc"))
    pb_grpc.add_ExternalScalerServicer_to_server(ExternalScaler(scaler, metrics, stop), server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot listen on {host}:{port}: set --port to a free port")
    server.start()
    return server, bound, stop


EXAMPLE = """example:
  KAFKA_BOOTSTRAP=redpanda-0:9092 lagpilot scaler --port 9105 --metrics-port 9103

Kafka client settings pass through as LAGPILOT_KAFKA_<NAME>, as for every command. While
the broker cannot be reached, the scaler says so, keeps serving (IsActive false, no
metrics yet) and retries; /readyz stays false. An authentication or ACL failure ends it.
"""


def _parser() -> Parser:
    p = Parser(prog="lagpilot scaler", description=__doc__, epilog=EXAMPLE)
    add_connection(p)
    p.option("--port", env="LAGPILOT_SCALER_PORT", default=DEFAULT_PORT, type=int,
             help="gRPC port KEDA's scalerAddress names")  # fmt: skip
    p.option("--metrics-port", env="LAGPILOT_SCALER_METRICS_PORT", default=DEFAULT_METRICS_PORT,
             type=int, help="/metrics, /healthz, /readyz; 0 disables")  # fmt: skip
    p.option(
        "--lookback-s",
        env="LAGPILOT_SCALER_LOOKBACK_S",
        default=35.0,
        type=float,
        help="read lagpilot.lag this far back at start: at least the pipeline's "
        "partition_snapshot_interval_ms (30 s), so every partition is known",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    return run("lagpilot scaler", _parser(), _serve, sys.argv[1:] if argv is None else argv)


def _serve(args: Any) -> int:
    if args.lookback_s < 0 or not 0 <= args.port <= 65535:
        raise CommandError("--lookback-s must be >= 0 and --port 0..65535", EX_USAGE)
    try:
        connect(args.bootstrap, args.kafka, args.connect_timeout_s, topic=topics.LAG)
    except CommandError as exc:
        if exc.exit_code != EX_UNAVAILABLE:
            raise  # authentication, TLS, ACLs: no retry fixes those
        log.warning("%s; serving meanwhile, retrying, /readyz is false", exc)
    broker = client_config(args.bootstrap, args.kafka)
    metrics = ScalerMetrics()
    scaler = Scaler(observer=Reporter(metrics))
    reader = LagTopicReader(
        broker, scaler.on_event, args.lookback_s, on_bad=metrics.bad_events.inc
    ).start()
    poller = MembershipPoller(broker, scaler.served, scaler.set_consumers).start()
    health = None
    if args.metrics_port:
        from pipeline.observe.metrics import BrokerProbe, HealthServer

        probe = BrokerProbe(broker)

        def ready() -> tuple[bool, str]:
            if not reader.caught_up.is_set():
                return False, "reading lagpilot.lag back (is the pipeline running?)"
            return probe()

        health = HealthServer(args.metrics_port, metrics.registry, ready).start()
    server, port, stop = serve(scaler, metrics, args.port)
    log.info("KEDA external scaler on :%d (gRPC), health on :%s", port, args.metrics_port or "-")
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    stop.set()
    server.stop(grace=2).wait(5)
    poller.stop()
    reader.stop()
    if health is not None:
        health.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
