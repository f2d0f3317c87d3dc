"""The desired scale of one consumer group on one topic: pure rules, ``now`` passed in.

Rules, in the order they apply (docs/keda.md has the table beside KEDA's Kafka scaler):

1. stuck partitions are set aside: a partition in STALL or STOP while others of the group
   progress holds its one consumer and drains no faster with more consumers; it is
   reported, and neither its backlog nor its zero rate moves the others' scale;
2. capacity: the rate needed (produce rate + the backlog drained within the target time
   lag) over one consumer's measured rate (consume rate / consumers), plus one consumer
   per stuck partition; when no consumer is measured (none in the group, nothing
   consumed), the last measured rate, else the current count, at least one;
3. the cap: never more than the topic's partitions (nor ``maxReplicas``); when the need is
   above it the cap binds and is reported (the policy's ``add_partitions`` takes over).
   A share group (KIP-932) has no such cap: its consumers share every partition, so more
   of them than partitions still consume; only ``maxReplicas`` (else KEDA's default
   ``maxReplicaCount``, 100) bounds it, and a stuck share-partition is not set aside
   (rule 1: no one consumer holds it);
4. the floor: at least one replica while any lag waits (never zero with lag);
5. smoothing: an exponential average (time constant ``smoothingSeconds``), hysteresis
   (up once the average passes the count by 0.1, down once it is 1.3 below it), and a
   scale-down only when every target of the last ``scaleDownWindowSeconds`` was lower:
   noise moves neither up and down, a real rise goes up within a few time constants.

Activity (``IsActive`` and the pushes of ``StreamIsActive``) is a small state machine:
inactive -> active when lag waits and either the model calls the group not OK or its time
lag passed ``activationTimeLagSeconds``; active -> inactive only after the lag has stayed
zero and the group OK for ``exitWindowSeconds``. Each incident onset (OK -> not OK) is
pushed as ``true`` even when already active: KEDA acts on every pushed value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pipeline.serve.keda.metadata import CAPACITY, OFFSET_LAG, TIME_LAG, ScalerSpec
from schemas import GroupLag, LagStatus

STUCK = frozenset({LagStatus.STALL, LagStatus.STOP})
DEAD_BAND = 0.1  # up: 3.05 replicas needed is 3, 3.15 is 4
DOWN_BAND = 0.3  # down: from 4, only once 2.7 or fewer are needed (3.3 would go back up)


@dataclass(frozen=True, slots=True)
class PartitionRates:
    """What the rules need of one partition (from partition_lag, or a summary's worst)."""

    partition: int
    lag_offsets: int
    produce_rate_per_s: float
    consume_rate_per_s: float
    status: LagStatus
    time_lag_s: float = 0.0
    observed_at_ms: int = 0

    @classmethod
    def from_event(cls, ev: Mapping[str, Any]) -> PartitionRates:
        return cls(
            int(ev["partition"]),
            int(ev["lag_offsets"]),
            float(ev["produce_rate_per_s"]),
            float(ev["consume_rate_per_s"]),
            LagStatus(ev["status"]),
            float(ev.get("time_lag_s", 0.0)),
            int(ev.get("observed_at_ms", 0)),
        )


def merge_worst(
    summary: GroupLag, parts: Mapping[int, PartitionRates]
) -> dict[int, PartitionRates]:
    """Partition snapshots, with the summary's worst partitions where they are newer (the
    summary comes every sample while a group is not OK; snapshots of OK partitions far
    less often)."""
    out = dict(parts)
    for w in summary.worst:
        old = out.get(w.partition)
        if old is None or old.observed_at_ms <= summary.observed_at_ms:
            out[w.partition] = PartitionRates(
                w.partition, w.lag_offsets, w.produce_rate_per_s, w.consume_rate_per_s,
                w.status, w.time_lag_s, summary.observed_at_ms,
            )  # fmt: skip
    return out


def stuck_partitions(parts: Iterable[PartitionRates]) -> tuple[int, ...]:
    """Rule 1: partitions in STALL/STOP while at least one other partition progresses.
    When none progresses the whole group is stopped, which is not one stuck partition."""
    parts = list(parts)
    stuck = [p.partition for p in parts if p.status in STUCK and p.lag_offsets > 0]
    progressing = [p for p in parts if p.status not in STUCK and p.consume_rate_per_s > 0]
    return tuple(sorted(stuck)) if progressing else ()


@dataclass(frozen=True, slots=True)
class Capacity:
    """Rules 1-4 for one summary: the replica count wanted before smoothing."""

    raw: float  # replicas the rates ask for, uncapped (may be fractional)
    wanted: float  # raw within the cap, at least the floor
    cap: int
    cap_binds: bool
    floor: int
    stuck: tuple[int, ...]
    produce_rate_per_s: float
    rate_per_consumer: float | None  # the measured (or remembered) one, None when unknown
    consumers: int | None


#: KEDA's default ``maxReplicaCount``: a share group's cap when ``maxReplicas`` is not set
KEDA_MAX_REPLICAS = 100


def replica_cap(spec: ScalerSpec, topic_partitions: int, group_type: str = "consumer") -> int:
    """Rule 3: the partition count (consumers beyond it idle), and maxReplicas; for a
    share group maxReplicas alone (its consumers share the partitions)."""
    if group_type == "share":
        return max(1, spec.max_replicas or KEDA_MAX_REPLICAS)
    cap = topic_partitions if topic_partitions > 0 else (spec.max_replicas or 1)
    return max(1, min(cap, spec.max_replicas or cap))


def capacity(
    summary: GroupLag,
    parts: Mapping[int, PartitionRates],
    spec: ScalerSpec,
    consumers: int | None,
    remembered_rate: float | None = None,
) -> Capacity:
    """Rules 1-4. ``consumers``: members of the group that hold partitions of the topic
    (None: not known); ``remembered_rate``: the last measured rate of one consumer."""
    merged = merge_worst(summary, parts)
    share = summary.group_type == "share"
    stuck = () if share else stuck_partitions(merged.values())
    healthy = [p for p in merged.values() if p.partition not in stuck]
    if healthy:
        produce = sum(max(0.0, p.produce_rate_per_s) for p in healthy)
        consume = sum(max(0.0, p.consume_rate_per_s) for p in healthy)
        backlog = sum(p.lag_offsets for p in healthy)
    else:  # no partition seen yet: the summary alone
        produce = consume = 0.0
        backlog = summary.total_lag_offsets
    rate = remembered_rate
    if consumers and consume > 0:
        rate = consume / max(1, consumers - len(stuck))
    needed_rate = produce + backlog / spec.target_time_lag_s
    if rate and rate > 0:
        raw = needed_rate / rate + len(stuck)
    else:
        raw = float(max(consumers or 0, 1 if (backlog > 0 or produce > 0) else 0))
    cap = replica_cap(spec, summary.topic_partitions, summary.group_type)
    floor = 1 if summary.total_lag_offsets > 0 else 0
    wanted = max(float(floor), min(raw, float(cap)))
    binds = raw > cap + DEAD_BAND  # as the smoothing rounds: 4.05 needed is 4
    return Capacity(raw, wanted, cap, binds, floor, stuck, produce, rate, consumers)


@dataclass(frozen=True, slots=True)
class ScaleState:
    """Rule 5's memory for one ScaledObject: plain values, rebuilt by replaying summaries."""

    ewma: float | None = None
    replicas: int = 0
    last_ms: int = 0
    targets: tuple[tuple[int, int], ...] = ()  # (ms, target) within the scale-down window
    rate_per_consumer: float | None = None


def smooth(state: ScaleState, cap: Capacity, spec: ScalerSpec, now_ms: int) -> ScaleState:
    """Rule 5: the reported replica count after this summary."""
    if state.ewma is None or now_ms < state.last_ms:
        ewma = cap.wanted
    else:
        dt_s = (now_ms - state.last_ms) / 1000.0
        alpha = 1.0 if spec.smoothing_s <= 0 else 1.0 - math.exp(-dt_s / spec.smoothing_s)
        ewma = state.ewma + alpha * (cap.wanted - state.ewma)
    rounded = math.ceil(ewma - DEAD_BAND)
    lower = ewma <= state.replicas - 1 - DOWN_BAND  # clearly below: not noise around R - 1
    target = rounded if rounded > state.replicas or lower else state.replicas
    target = min(cap.cap, max(cap.floor, target))
    window_ms = spec.scale_down_window_s * 1000
    targets = (*tuple((t, n) for t, n in state.targets if now_ms - t < window_ms), (now_ms, target))
    replicas = min(cap.cap, max(cap.floor, max(n for _, n in targets)))
    rate = cap.rate_per_consumer if cap.rate_per_consumer else state.rate_per_consumer
    return ScaleState(ewma, replicas, now_ms, targets, rate)


@dataclass(frozen=True, slots=True)
class Activity:
    """IsActive's state for one ScaledObject; ``active`` None until the first summary."""

    active: bool | None = None
    trouble: bool = False  # the model calls the group not OK
    onset_ms: int = 0  # the last incident onset
    quiet_since_ms: int | None = None  # lag zero and OK since


def step_activity(
    a: Activity, summary: GroupLag, spec: ScalerSpec, now_ms: int
) -> tuple[Activity, bool | None]:
    """The next state, and the value to push (None: nothing new to say)."""
    lag = summary.total_lag_offsets
    trouble = summary.status is not LagStatus.OK
    quiet = lag == 0 and not trouble
    quiet_since = (a.quiet_since_ms if a.quiet_since_ms is not None else now_ms) if quiet else None
    onset = trouble and not a.trouble
    if a.active is None:  # first sight (or a restart): never start inactive while lag waits
        active: bool = lag > 0 or trouble
        return Activity(active, trouble, now_ms if trouble else 0, quiet_since), None
    if not a.active:
        wakes = lag > 0 and (trouble or summary.max_time_lag_s > spec.activation_time_lag_s)
        nxt = Activity(wakes, trouble, now_ms if onset else a.onset_ms, quiet_since)
        return nxt, (True if wakes else None)
    if quiet_since is not None and now_ms - quiet_since >= spec.exit_window_s * 1000:
        return Activity(False, trouble, a.onset_ms, quiet_since), False
    nxt = replace(a, trouble=trouble, quiet_since_ms=quiet_since)
    if onset:
        return replace(nxt, onset_ms=now_ms), True
    return nxt, None


@dataclass(slots=True)
class Decision:
    """Everything the scaler knows about one ScaledObject after a summary."""

    spec: ScalerSpec
    activity: Activity = field(default_factory=Activity)
    scale: ScaleState = field(default_factory=ScaleState)
    capacity: Capacity | None = None
    summary: GroupLag | None = None


def step(
    d: Decision,
    summary: GroupLag,
    parts: Mapping[int, PartitionRates],
    consumers: int | None,
    now_ms: int,
) -> bool | None:
    """Fold one summary into ``d`` (in place); returns the value to push, if any."""
    cap = capacity(summary, parts, d.spec, consumers, d.scale.rate_per_consumer)
    d.scale = smooth(d.scale, cap, d.spec, now_ms)
    d.capacity, d.summary = cap, summary
    d.activity, push = step_activity(d.activity, summary, d.spec, now_ms)
    return push


def metric_value(d: Decision) -> float:
    """The value GetMetrics reports; the HPA computes ceil(value / target size), so the
    lag metrics are held at cap x target to keep the cap."""
    s, spec = d.summary, d.spec
    if s is None:
        return 0.0
    cap = d.capacity.cap if d.capacity else replica_cap(spec, s.topic_partitions, s.group_type)
    if spec.metric == TIME_LAG:
        return min(s.max_time_lag_s, cap * spec.target_time_lag_s)
    if spec.metric == OFFSET_LAG:
        return float(min(s.total_lag_offsets, cap * (spec.target_offset_lag or 1)))
    assert spec.metric == CAPACITY
    return float(d.scale.replicas)
