"""The lag model's outputs on ``lagpilot.lag`` and the policy's input."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class LagStatus(StrEnum):
    """Burrow's vocabulary, in rising severity (see pipeline/model/lag.py for the rules)."""

    OK = "OK"
    WARN = "WARN"
    ERR = "ERR"
    STALL = "STALL"
    STOP = "STOP"
    REWIND = "REWIND"


SEVERITY = {s: i for i, s in enumerate(LagStatus)}


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """One consumer group's progress on one partition at ``observed_at_ms``.

    Rates are least-squares slopes over the model window. ``time_lag_s`` is how long ago
    the high watermark stood at the committed offset (0 when caught up). ``eta_drain_s`` is
    None when the lag is not draining (pipeline.model.lag.drain_eta_s).
    """

    group: str
    topic: str
    partition: int
    observed_at_ms: int
    committed_offset: int
    high_watermark: int
    lag_offsets: int
    lag_rate_per_s: float
    lag_accel_per_s2: float
    produce_rate_per_s: float
    consume_rate_per_s: float
    time_lag_s: float
    eta_drain_s: float | None
    status: LagStatus
    last_commit_ms: int
    leader: int = -1
    # how time_lag_s was obtained: caught_up (0), interpolated in the HWM history (within
    # its bound), read (the record's timestamp at the committed offset: exact) or
    # extrapolated (older than the history; no bound)
    time_lag_source: str = "interpolated"
    #: ``consumer`` (a consumer group, either protocol) or ``share`` (a KIP-932 share group)
    group_type: str = "consumer"
    event: str = field(default="partition_lag", init=False)
    v: int = field(default=2, init=False)


@dataclass(frozen=True, slots=True)
class WorstPartition:
    """One of a group's worst partitions (by time lag), with what the policy needs."""

    partition: int
    lag_offsets: int
    time_lag_s: float
    lag_rate_per_s: float
    lag_accel_per_s2: float
    produce_rate_per_s: float
    consume_rate_per_s: float
    status: LagStatus
    leader: int = -1


@dataclass(frozen=True, slots=True)
class GroupLag:
    """One group's progress on one topic: the policy's input, one per group+topic per tick.

    ``partitions`` is how many of the topic's partitions the group has committed on;
    ``topic_partitions`` the topic's partition count. ``worst`` holds up to N partitions,
    worst first (by status severity, then time lag).
    """

    group: str
    topic: str
    observed_at_ms: int
    status: LagStatus
    total_lag_offsets: int
    max_time_lag_s: float
    lag_rate_per_s: float
    partitions: int
    topic_partitions: int
    worst: tuple[WorstPartition, ...] = ()
    #: ``consumer`` (a consumer group, either protocol) or ``share`` (a KIP-932 share group)
    group_type: str = "consumer"
    event: str = field(default="group_lag", init=False)
    v: int = field(default=2, init=False)


def group_lag_from_dict(d: dict[str, Any]) -> GroupLag:
    """A ``GroupLag`` from its JSON form (``schemas.to_dict`` output) on ``lagpilot.lag``."""
    body = {k: v for k, v in d.items() if k not in ("event", "v", "worst", "status")}
    worst = tuple(
        WorstPartition(**{**w, "status": LagStatus(w["status"])}) for w in d.get("worst", ())
    )
    return GroupLag(**body, status=LagStatus(d["status"]), worst=worst)
