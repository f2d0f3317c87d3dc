"""The policy's configuration as typed values: thresholds, per-group overrides, producers,
and ``PolicyConfig`` itself. ``pipeline.decide.policy_config`` reads them from the TOML.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pipeline.decide.diagnosis import DiagnosisConfig
from pipeline.decide.ladder import Ladders
from schemas import ActionType, Mode
from schemas.allow import throttle_allowed, topic_allowed

FILE_ENV = "LAGPILOT_POLICY_FILE"
ENV_PREFIX = "LAGPILOT_POLICY_"

#: Action types the policy may decide; halt/resume come only from people (the kill switch).
POLICY_ACTIONS: tuple[ActionType, ...] = (
    ActionType.THROTTLE_PRODUCER,
    ActionType.RELEASE_PRODUCER,
    ActionType.TRANSFER_LEADERSHIP,
    ActionType.ADD_PARTITIONS,
    ActionType.SPREAD_PARTITION,
    ActionType.RESTORE_PARTITION,
    ActionType.SCALE_CONSUMERS,
)

#: Cluster-side moves cool down longer: Redpanda's balancer mutes a group 5 min after a move,
#: and a topic's partition count should settle before it is judged again.
DEFAULT_COOLDOWNS_S: dict[str, float] = {
    ActionType.TRANSFER_LEADERSHIP: 300.0,
    ActionType.ADD_PARTITIONS: 600.0,
}


@dataclass(frozen=True, slots=True)
class Thresholds:
    """When a (group, topic) is in trouble, and when it is out of it again.

    Enter: time lag >= ``time_lag_s`` or offset lag >= ``offset_lag`` or (acceleration >=
    ``accel_per_s2`` while the lag is above the exit level). Exit: time lag and offset lag
    both below ``exit_ratio`` times their enter level. ``enter_windows`` consecutive
    summaries above enter open an incident; ``exit_windows`` below exit close it.

    ``min_status``: a partition's time lag counts only while the model judges it at least
    this late against its own progress cadence (``WARN``: a consumer that commits every 5 s
    shows up to 5 s of time lag while it keeps up, and is OK). ``OK`` counts any partition.
    """

    time_lag_s: float = 30.0
    offset_lag: int = 100_000
    accel_per_s2: float = 1_000.0
    exit_ratio: float = 0.5
    enter_windows: int = 3
    exit_windows: int = 8
    min_status: str = "OK"


@dataclass(frozen=True, slots=True)
class Override:
    """Threshold values for groups and/or topics matching globs (``None`` = any)."""

    key: str
    group_glob: str | None
    topic_glob: str | None
    values: Mapping[str, Any]

    @property
    def specificity(self) -> int:
        return (self.group_glob is not None) * 2 + (self.topic_glob is not None)

    def matches(self, group: str, topic: str) -> bool:
        return (self.group_glob is None or fnmatch.fnmatchcase(group, self.group_glob)) and (
            self.topic_glob is None or fnmatch.fnmatchcase(topic, self.topic_glob)
        )


@dataclass(frozen=True, slots=True)
class Producer:
    """Producers (a client id, or a prefix when the key ends in ``*``) and the topics they write."""

    entity: str  # "client-id" | "client-id-prefix" (Kafka client-quota entity types)
    name: str
    topics: tuple[str, ...]  # fnmatch globs

    @property
    def target(self) -> str:
        return f"{self.entity}:{self.name}"

    def writes(self, topic: str) -> bool:
        return any(fnmatch.fnmatchcase(topic, glob) for glob in self.topics)


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    mode: Mode = Mode.RECOMMEND
    policy_version: str = "0"
    default_thresholds: Thresholds = field(default_factory=Thresholds)
    overrides: tuple[Override, ...] = ()
    cooldown_default_s: float = 30.0
    cooldowns_s: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_COOLDOWNS_S))
    actions_per_minute: int = 6
    throttle_start_bytes_per_s: int = 10_485_760
    throttle_floor_bytes_per_s: int = 1_048_576
    throttle_step_ratio: float = 0.5
    throttle_lease_s: float = 60.0
    partition_topics: tuple[str, ...] = ()
    throttle_client_ids: tuple[str, ...] = ()
    producers: tuple[Producer, ...] = ()
    broker_ids: tuple[int, ...] = ()
    enabled: frozenset[str] = frozenset(POLICY_ACTIONS)
    action_ttl_s: float = 30.0
    hot_ratio: float = 4.0
    spread_lanes: int = 4
    spread_pool: str | None = None
    spread_restore_after_s: float = 0.0  # a spread stays this long after its incident clears
    leadership_min_partitions: int = 2
    lag_per_replica: int = 10_000
    partitions_growth_ratio: float = 2.0
    partitions_max_total: int = 64
    forget_after_s: float = 900.0
    # diagnose, then act by the cause's ladder (off: every enabled rule acts on its own in
    # any incident; tests of single rules use that)
    diagnose: bool = True
    burst_ratio: float = 2.0
    hold_ratio: float = 0.7
    rates_stale_s: float = 5.0
    verify_improve_ratio: float = 0.8
    # a verdict of verified needs the effect to last this long (0: one summary is enough)
    verify_hold_s: float = 0.0
    # a group whose generation moved this recently is rebalancing: its lag is the
    # rebalance's own, and no remedy acts on it until the group settles (0: off)
    settle_s: float = 0.0
    # per cause, how long it must hold before its ladder's first step acts
    confirm_s: Mapping[str, float] = field(default_factory=dict)
    ladders: Ladders = field(default_factory=Ladders)

    def thresholds_for(self, group: str, topic: str) -> Thresholds:
        """Defaults, then matching overrides from least to most specific (file order within)."""
        matching = [o for o in self.overrides if o.matches(group, topic)]
        t = self.default_thresholds
        for o in sorted(matching, key=lambda o: o.specificity):  # sort is stable: file order
            t = replace(t, **o.values)
        return t

    def diagnosis_config(self, t: Thresholds) -> DiagnosisConfig:
        """What ``diagnosis.diagnose`` needs of this policy, for a group's thresholds ``t``."""
        return DiagnosisConfig(self.burst_ratio, self.hold_ratio, self.leadership_min_partitions,
                               self.hot_ratio, t.min_status, self.settle_s)  # fmt: skip

    def cooldown_s(self, action_type: str) -> float:
        return self.cooldowns_s.get(action_type, self.cooldown_default_s)

    def may_throttle(self, name: str, entity: str = "client-id") -> bool:
        """The actuator's rule (schemas.allow): a prefix must be covered by a glob
        ending in ``*`` ("agent-" is allowed by "agent-*", not by "agent-" or "agent-?")."""
        return throttle_allowed(entity, name, self.throttle_client_ids)

    def may_add_partitions(self, topic: str) -> bool:
        return topic_allowed(topic, self.partition_topics)
