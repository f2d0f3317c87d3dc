"""The gRPC surface, in process: a real client from the same stubs, events fed directly."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from pipeline.serve.keda import externalscaler_pb2 as pb
from pipeline.serve.keda import externalscaler_pb2_grpc as pb_grpc
from pipeline.serve.keda.scaler import Scaler
from pipeline.serve.keda.server import Reporter, ScalerMetrics, serve

MD = {"group": "g", "topic": "t", "targetTimeLagSeconds": "10", "exitWindowSeconds": "1"}


def group_lag(at: int, lag: int, status: str = "OK", time_lag: float = 0.0) -> dict[str, Any]:
    return {"event": "group_lag", "v": 1, "group": "g", "topic": "t", "observed_at_ms": at,
            "status": status, "total_lag_offsets": lag, "max_time_lag_s": time_lag,
            "lag_rate_per_s": 0.0, "partitions": 4, "topic_partitions": 4, "worst": []}  # fmt: skip


@pytest.fixture
def running() -> Iterator[tuple[Scaler, pb_grpc.ExternalScalerStub, ScalerMetrics, int]]:
    metrics = ScalerMetrics()
    scaler = Scaler(observer=Reporter(metrics))
    server, port, stop = serve(scaler, metrics, 0, host="127.0.0.1")
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield scaler, pb_grpc.ExternalScalerStub(channel), metrics, port
    finally:
        channel.close()
        stop.set()
        server.stop(0)


def ref(**md: str) -> pb.ScaledObjectRef:
    return pb.ScaledObjectRef(name="workers", namespace="agents", scalerMetadata=md)


def test_bad_metadata_is_refused_with_the_key_named(running: Any) -> None:
    _, stub, metrics, _ = running
    for call in (stub.IsActive, stub.GetMetricSpec):
        with pytest.raises(grpc.RpcError) as err:
            call(ref(group="g", topic="t", targetTimeLagSeconds="ten"))
        assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "scalerMetadata.targetTimeLagSeconds" in err.value.details()
        assert "agents/workers" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref(topic="t"), metricName="x"))
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "scalerMetadata.group" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        next(iter(stub.StreamIsActive(ref(**{**MD, "metric": "bytes"}))))
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert metrics.invalid.labels("targetTimeLagSeconds")._value.get() == 2


def test_metric_spec_metrics_and_activity(running: Any) -> None:
    scaler, stub, _, _ = running
    spec = stub.GetMetricSpec(ref(**MD)).metricSpecs
    assert [(s.metricName, s.targetSizeFloat) for s in spec] == [("lagpilot-capacity-g-t", 1.0)]
    streamed = next(iter(stub.StreamMetricSpec(ref(**MD))))
    assert streamed.metricSpecs == spec
    assert stub.IsActive(ref(**MD)).result is False  # nothing known yet
    scaler.on_event(group_lag(1_000, lag=40, status="WARN", time_lag=0.5))
    assert stub.IsActive(ref(**MD)).result is True
    got = stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref(**MD), metricName="s0-x"))
    assert [(v.metricName, v.metricValueFloat) for v in got.metricValues] == [("s0-x", 1.0)]
    lag_md = {**MD, "metric": "offsetLag", "targetOffsetLag": "10"}
    got = stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref(**lag_md)))
    assert got.metricValues[0].metricValueFloat == 40.0  # replayed for a new ScaledObject


def test_stream_pushes_true_at_an_onset_and_false_after_the_exit_window(running: Any) -> None:
    scaler, stub, metrics, _ = running
    scaler.on_event(group_lag(1_000, lag=3))
    stream = stub.StreamIsActive(ref(**MD))
    got: list[tuple[bool, float]] = []

    def read() -> None:
        try:
            for r in stream:
                got.append((r.result, time.monotonic()))
        except grpc.RpcError as exc:
            assert exc.code() is grpc.StatusCode.CANCELLED  # our cancel at the end

    t = threading.Thread(target=read, daemon=True)
    t.start()
    deadline = time.monotonic() + 5
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [v for v, _ in got] == [True]  # the current value, at once
    sent = time.monotonic()
    scaler.on_event(group_lag(1_250, lag=90, status="STOP", time_lag=0.4))
    while len(got) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert got[1][0] is True and got[1][1] - sent < 0.2
    scaler.on_event(group_lag(2_000, lag=0))
    scaler.on_event(group_lag(2_900, lag=0))
    time.sleep(0.2)
    assert len(got) == 2  # closed, but not yet for its exit window
    scaler.on_event(group_lag(3_000, lag=0))
    while len(got) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert got[2][0] is False
    stream.cancel()
    assert metrics.pushes.labels("false")._value.get() == 1


def test_the_shipped_client_computes_what_an_hpa_would(running: Any) -> None:
    import doctest

    from pipeline.serve.keda import client as client_module
    from pipeline.serve.keda.client import ScalerClient, hpa_desired, scaled_object

    assert doctest.testmod(client_module).failed == 0
    assert hpa_desired(3.0, 1.0) == 3 and hpa_desired(0.0, 1.0, min_replicas=1) == 1
    scaler, _, _, port = running
    md = {**MD, "metric": "offsetLag", "targetOffsetLag": "25"}
    scaler.on_event(group_lag(1_000, lag=60, status="WARN", time_lag=0.5))
    c = ScalerClient(f"127.0.0.1:{port}")
    try:
        ref_ = scaled_object("workers", "agents", **md)
        assert c.metric_spec(ref_) == ("lagpilot-offsetlag-g-t", 25.0)
        assert c.desired_replicas(ref_) == 3  # ceil(60 / 25)
        assert c.desired_replicas(ref_, max_replicas=2) == 2
    finally:
        c.close()
