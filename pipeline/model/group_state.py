"""Group health's plain data and pure rules: its settings, a group's members and
rebalance history, the coordinator state they imply, and the event of a deleted group.

``pipeline.model.group_health`` folds the coordinator's records into these;
``pipeline.model.group_status`` judges them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

STATUSES = ("OK", "REBALANCING", "EMPTY", "STORM", "DELETED")


@dataclass(frozen=True, slots=True)
class HealthConfig:
    """Defaults: 3 generation moves in 60 s with 10 s of no commit progress is a storm.

    One rebalance is normal (a deploy), two can be a rolling restart; three within a
    minute while nothing is committed is the storm this detects: members missing
    heartbeats under heavy messages, rejoining, and missing them again."""

    storm_rebalances: int = 3
    storm_window_s: float = 60.0
    stall_s: float = 10.0
    interval_ms: int = 5_000  # re-publish an unchanged group this often

    def __post_init__(self) -> None:
        if self.storm_rebalances < 2:
            raise ValueError(
                f"group health storm_rebalances is {self.storm_rebalances}: set it to 2 or more "
                "(one rebalance is any deploy)"
            )
        for name in ("storm_window_s", "stall_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"group health {name} must be > 0 seconds")


class Owner(NamedTuple):
    member_id: str
    client_id: str
    client_host: str


@dataclass
class Member:
    member_id: str
    client_id: str
    client_host: str
    instance_id: str | None
    assignment: dict[str, tuple[int, ...]] = field(default_factory=dict)  # topic or id
    member_epoch: int = -1
    subscribed: tuple[str, ...] = ()  # KIP-848: topic names, or ("*",) for a regex

    @property
    def identity(self) -> str:
        return self.instance_id or f"{self.client_id}@{self.client_host}"


@dataclass
class Group:
    name: str
    protocol: str
    generation: int = -1
    target_epoch: int = -1
    members: dict[str, Member] = field(default_factory=dict)
    rebalances: deque[int] = field(default_factory=deque)  # record ms of each move
    rebalances_total: int = 0
    # (ms, "joined"/"left", identity, member) in the window
    churn: deque[tuple[int, str, str, Member]] = field(default_factory=deque)
    positions: dict[tuple[str, int], int] = field(default_factory=dict)
    progress_ms: dict[tuple[str, int], int] = field(default_factory=dict)  # per partition
    last_progress_ms: int = 0
    status: str = ""
    status_since_ms: int = 0
    sent_ms: int = 0
    sent_key: tuple[Any, ...] = ()


def group_state(g: Group) -> str:
    """The group's coordinator state, as Kafka names it (Empty, Assigning, Reconciling,
    Stable), from its members and epochs."""
    if not g.members:
        return "Empty"
    if g.protocol == "consumer":
        if g.target_epoch < g.generation:
            return "Assigning"
        if any(m.member_epoch < g.target_epoch for m in g.members.values()):
            return "Reconciling"
    return "Stable"


def topic_of(g: Group, key: str, topic_names: Mapping[str, str]) -> str | None:
    """The topic an assignment key names: a classic group's key is the topic, a KIP-848
    group's the topic id (None while its name is not known)."""
    return topic_names.get(key) if g.protocol == "consumer" else key


def deleted_event(name: str, kip848: bool, now_ms: int, window_s: float) -> dict[str, Any]:
    """The one ``group_health`` event of a deleted group (status ``DELETED``)."""
    return {
        "event": "group_health",
        "v": 1,
        "group": name,
        "observed_at_ms": now_ms,
        "protocol": "consumer" if kip848 else "classic",
        "state": "Dead",
        "generation": -1,
        "status": "DELETED",
        "status_since_ms": now_ms,
        "members": [],
        "window_s": window_s,
        "rebalances_per_min": 0.0,
        "rebalances_total": 0,
        "last_rebalance_ms": None,
        "since_last_rebalance_s": None,
        "joined": 0,
        "left": 0,
        "commits_stalled": False,
        "last_progress_ms": None,
        "consumption_stopped": False,
        "storm": None,
    }
