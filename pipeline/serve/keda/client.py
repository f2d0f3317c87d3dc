"""A KEDA-like client of the scaler, shipped for scripted autoscalers (the incident suite,
benchmarks): it asks what KEDA asks and computes what the HPA computes.

    >>> hpa_desired(7.2, 1.0, min_replicas=1, max_replicas=4)
    4
    >>> hpa_desired(45.0, 30.0)
    2
"""

from __future__ import annotations

import math

import grpc

from pipeline.serve.keda import externalscaler_pb2 as pb
from pipeline.serve.keda import externalscaler_pb2_grpc as pb_grpc


def hpa_desired(
    value: float, target: float, min_replicas: int = 0, max_replicas: int | None = None
) -> int:
    """The HPA's AverageValue rule: ceil(value / target), within min and max replicas."""
    if target <= 0:
        raise ValueError(f"target size {target} must be above zero")
    n = max(min_replicas, math.ceil(round(value / target, 9)))
    return n if max_replicas is None else min(max_replicas, n)


def scaled_object(name: str, namespace: str = "default", **metadata: str) -> pb.ScaledObjectRef:
    return pb.ScaledObjectRef(name=name, namespace=namespace, scalerMetadata=metadata)


class ScalerClient:
    """Unary calls to a scaler at ``address`` (host:port), as KEDA makes them."""

    def __init__(self, address: str, timeout_s: float = 5.0) -> None:
        self.channel = grpc.insecure_channel(address)
        self.stub = pb_grpc.ExternalScalerStub(self.channel)
        self.timeout_s = timeout_s

    def is_active(self, ref: pb.ScaledObjectRef) -> bool:
        return bool(self.stub.IsActive(ref, timeout=self.timeout_s).result)

    def metric_spec(self, ref: pb.ScaledObjectRef) -> tuple[str, float]:
        (spec,) = self.stub.GetMetricSpec(ref, timeout=self.timeout_s).metricSpecs
        return spec.metricName, spec.targetSizeFloat

    def metric(self, ref: pb.ScaledObjectRef, name: str = "") -> float:
        req = pb.GetMetricsRequest(scaledObjectRef=ref, metricName=name)
        got = self.stub.GetMetrics(req, timeout=self.timeout_s)
        return float(got.metricValues[0].metricValueFloat)

    def desired_replicas(
        self, ref: pb.ScaledObjectRef, min_replicas: int = 0, max_replicas: int | None = None
    ) -> int:
        """What an HPA fed by KEDA would set now: 0 when inactive (KEDA scales to zero
        when ``min_replicas`` is 0), else ceil(metric / target)."""
        if min_replicas == 0 and not self.is_active(ref):
            return 0
        name, target = self.metric_spec(ref)
        return hpa_desired(self.metric(ref, name), target, max(1, min_replicas), max_replicas)

    def close(self) -> None:
        self.channel.close()
