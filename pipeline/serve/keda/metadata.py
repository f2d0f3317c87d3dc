"""A ScaledObject's trigger metadata, validated: what one ScaledObject asks of the scaler.

KEDA passes the trigger's ``metadata`` block to every call as ``scalerMetadata``. Each
call parses it again (pure, microseconds), so the scaler keeps no registry that a restart
could lose. A missing or bad key raises ``MetadataError`` naming the key and the fix; the
server answers it with gRPC ``INVALID_ARGUMENT``. Unknown keys are errors too, except
KEDA's own external-trigger keys: a typo such as ``targetTimeLagSecond`` must not silently
fall back to a default.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from schemas.errors import LagpilotError

CAPACITY, TIME_LAG, OFFSET_LAG = "capacity", "timeLag", "offsetLag"
METRICS = (CAPACITY, TIME_LAG, OFFSET_LAG)

#: keys KEDA itself reads from an external trigger's metadata (and passes on to us)
KEDA_KEYS = frozenset(
    {"scalerAddress", "enableTLS", "unsafeSsl", "caCert", "tlsCertFile", "tlsClientCert",
     "tlsClientKey"}
)  # fmt: skip
OUR_KEYS = (
    "group",
    "topic",
    "targetTimeLagSeconds",
    "activationTimeLagSeconds",
    "maxReplicas",
    "metric",
    "targetOffsetLag",
    "exitWindowSeconds",
    "smoothingSeconds",
    "scaleDownWindowSeconds",
)


class MetadataError(LagpilotError, ValueError):
    """A trigger metadata key is missing or wrong; ``key`` names it, the message the fix."""

    retriable = False

    def __init__(self, key: str, problem: str, fix: str) -> None:
        super().__init__(f"scalerMetadata.{key}: {problem}; {fix}", code=key)
        self.key = key


@dataclass(frozen=True, slots=True)
class ScalerSpec:
    """What one ScaledObject's trigger asks for (see docs/keda.md for each key)."""

    group: str
    topic: str
    target_time_lag_s: float
    activation_time_lag_s: float = 0.0
    max_replicas: int | None = None
    metric: str = CAPACITY
    target_offset_lag: int | None = None
    exit_window_s: float = 10.0
    smoothing_s: float = 5.0
    scale_down_window_s: float = 30.0

    @property
    def metric_name(self) -> str:
        """A Kubernetes-safe metric name (KEDA prefixes it with ``s<trigger index>-``)."""
        raw = f"lagpilot-{self.metric}-{self.group}-{self.topic}".lower()
        return re.sub(r"[^a-z0-9.-]+", "-", raw)[:200]

    @property
    def target_size(self) -> float:
        """The HPA's AverageValue target: desired replicas = ceil(metric / target)."""
        if self.metric == TIME_LAG:
            return self.target_time_lag_s
        if self.metric == OFFSET_LAG:
            return float(self.target_offset_lag or 1)
        return 1.0  # capacity: the metric already is the replica count


def _number(md: Mapping[str, str], key: str, default: float | None, lo: float, fix: str) -> float:
    raw = md.get(key)
    if raw is None or raw.strip() == "":
        if default is None:
            raise MetadataError(key, "missing", fix)
        return default
    try:
        value = float(raw)
    except ValueError:
        raise MetadataError(key, f"{raw!r} is not a number", fix) from None
    if not math.isfinite(value) or value < lo:
        raise MetadataError(key, f"{raw!r} is out of range (at least {lo:g})", fix)
    return value


def _whole(md: Mapping[str, str], key: str, required: bool, fix: str) -> int | None:
    raw = md.get(key)
    if raw is None or raw.strip() == "":
        if required:
            raise MetadataError(key, "missing", fix)
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise MetadataError(key, f"{raw!r} is not a whole number", fix) from None
    if value < 1:
        raise MetadataError(key, f"{raw!r} must be at least 1", fix)
    return value


def _name(md: Mapping[str, str], key: str, what: str) -> str:
    value = (md.get(key) or "").strip()
    if not value:
        raise MetadataError(key, "missing", f"set {key} to the {what}")
    return value


def parse_metadata(md: Mapping[str, str]) -> ScalerSpec:
    """The spec of one trigger, or ``MetadataError`` for the first bad key (pure)."""
    unknown = sorted(set(md) - set(OUR_KEYS) - KEDA_KEYS)
    if unknown:
        key = unknown[0]
        near = [
            k for k in OUR_KEYS if k.lower() == key.lower() or k.lower().startswith(key.lower()[:8])
        ]
        hint = f"did you mean {near[0]}?" if near else f"known keys: {', '.join(OUR_KEYS)}"
        raise MetadataError(key, "unknown key", f"remove it ({hint})")
    group = _name(md, "group", "consumer group whose consumers this ScaledObject scales")
    topic = _name(md, "topic", "topic the group consumes")
    metric = (md.get("metric") or CAPACITY).strip()
    if metric not in METRICS:
        raise MetadataError(
            "metric", f"{metric!r} is not a metric", f"use one of {', '.join(METRICS)}"
        )
    target = _number(
        md,
        "targetTimeLagSeconds",
        None,
        0.001,
        "set it to the time lag (seconds) the group should stay under, e.g. '30'",
    )
    activation = _number(
        md,
        "activationTimeLagSeconds",
        0.0,
        0.0,
        "set it to the time lag (seconds) that wakes a group scaled to zero, e.g. '2'",
    )
    target_offsets = _whole(
        md,
        "targetOffsetLag",
        metric == OFFSET_LAG,
        "set it to the offset lag one replica may hold, e.g. '10000' (metric offsetLag)",
    )
    max_replicas = _whole(
        md,
        "maxReplicas",
        False,
        "set it to a whole number >= 1, or leave it out (the partition count caps)",
    )
    exit_s = _number(
        md,
        "exitWindowSeconds",
        10.0,
        0.0,
        "set it to how long (seconds) the lag must stay at zero before deactivating",
    )
    smoothing_s = _number(
        md,
        "smoothingSeconds",
        5.0,
        0.0,
        "set it to the time constant (seconds) of the smoothing, e.g. '5'",
    )
    down_s = _number(
        md,
        "scaleDownWindowSeconds",
        30.0,
        0.0,
        "set it to how long (seconds) a lower replica count must hold before it is reported",
    )
    if activation >= target:
        raise MetadataError(
            "activationTimeLagSeconds",
            f"{activation:g} is not below targetTimeLagSeconds={target:g}",
            "set it below the target",
        )
    return ScalerSpec(group, topic, target, activation, max_replicas, metric, target_offsets,
                      exit_s, smoothing_s, down_s)  # fmt: skip
