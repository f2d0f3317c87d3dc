"""What the decide stage's scenario tests share: a policy config with every ladder, lag
summaries in a line (``wp``, ``gl``), and ``Loop``, which feeds summaries one tick apart
through ``decide`` and plays the actuator (an outcome for every action)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from pipeline.decide import inputs
from pipeline.decide.policy import PolicyState, decide
from pipeline.decide.policy_config import PolicyConfig, config_from_mapping
from schemas import GroupLag, LagStatus, WorstPartition, sign, validate

T0 = 1_800_000_000_000
TICK = 250
KEY = b"r" * 32
EXIT_S = 5.0


def cfg(**sections: Any) -> PolicyConfig:
    """Act mode, every ladder, generous budget; ``sections`` replace or extend tables."""
    base: dict[str, Any] = {
        "mode": "act",
        "thresholds": {"default": {"time_lag_s": 10, "offset_lag": 10**9, "accel_per_s2": 10**9,
                                   "exit_ratio": 0.5, "enter_windows": 3, "exit_windows": 4}},
        "cooldowns": {"default_s": 5, "transfer_leadership": 5, "add_partitions": 5},
        "budget": {"actions_per_minute": 100},
        "throttle": {"start_bytes_per_s": 800_000, "floor_bytes_per_s": 1000, "lease_s": 20},
        "allow": {"throttle_client_ids": ["ingest-*", "crawler"], "partition_topics": ["docs"]},
        "producers": {"ingest-*": ["docs"]},
        "hotspot": {"ratio": 4.0, "lanes": 4, "pool": "dedicated"},
        "scale": {"lag_per_replica": 100},
        "ladders": {"default": {"hotspot": ["spread_partition:5", "handoff_partition:5"],
                                "inflow_burst": ["throttle_producer:5"],
                                "slow_group": ["scale_consumers:5", "add_partitions:5:recommend"],
                                "rebalance_storm": ["handoff_member:5"],
                                "broker_skew": ["transfer_leadership:5"]}},
    }  # fmt: skip
    for name, value in sections.items():
        base[name] = {**base.get(name, {}), **value} if isinstance(value, dict) else value
    return config_from_mapping(base)


def wp(p: int, lag_s: float, *, produce: float = 100.0, consume: float = 100.0,
       leader: int = -1) -> WorstPartition:  # fmt: skip
    """One worst partition ``p``, ``lag_s`` behind (100 offsets a second of lag)."""
    return WorstPartition(p, int(lag_s * 100), lag_s, 0.0, 0.0, produce, consume,
                          LagStatus.WARN, leader)  # fmt: skip


def gl(worst: Iterable[WorstPartition], *, parts: int = 8, rate: float = 0.0,
       group: str = "workers", topic: str = "docs") -> GroupLag:  # fmt: skip
    """A WARN summary of ``group`` on ``topic`` holding ``worst``."""
    w = tuple(worst)
    top = max((x.time_lag_s for x in w), default=0.0)
    return GroupLag(group, topic, 0, LagStatus.WARN, sum(x.lag_offsets for x in w), top, rate,
                    parts, parts, w)  # fmt: skip


HOT = [wp(3, 40.0, consume=0.0), wp(1, 2.0), wp(2, 1.0), wp(0, 0.5)]
CALM = [wp(3, 0.5), wp(1, 0.4), wp(2, 0.3), wp(0, 0.2)]


class Loop:
    """Feeds summaries one tick apart and plays the actuator: outcomes for what it chose."""

    def __init__(self, config: PolicyConfig) -> None:
        self.config, self.state, self.now = config, PolicyState(), T0
        self.actions: list[dict[str, Any]] = []
        self.verdicts: list[dict[str, Any]] = []

    def feed(self, summary: GroupLag, n: int = 1, *, apply: bool = True) -> list[dict[str, Any]]:
        new: list[dict[str, Any]] = []
        for _ in range(n):
            self.now += TICK
            out, self.state = decide(replace(summary, observed_at_ms=self.now), self.state,
                                     self.config, self.now)  # fmt: skip
            for e in out:
                validate(sign(e, KEY) if e["event"] == "action" else e)
                if e["event"] == "verification":
                    self.verdicts.append(e)
                    continue
                self.actions.append(e)
                new.append(e)
                if apply:
                    self.outcome(e, "applied")
        return new

    def outcome(self, action: dict[str, Any], result: str) -> None:
        o = {"event": "outcome", "v": 1, "action_id": action["id"], "result": result,
             "actuator": "test", "at": self.now}  # fmt: skip
        validate(o)
        self.state = inputs.fold_outcome(self.state, o)

    def rates(self, **by_client: float) -> None:
        for cid, rate in by_client.items():
            e = {"event": "producer_rates", "v": 1, "client_id": cid, "topic": "docs",
                 "records_per_s": rate / 100, "bytes_per_s": rate, "window_s": 1.0,
                 "at_ms": self.now}  # fmt: skip
            validate(e)
            self.state = inputs.fold_producer_rate(self.state, e, self.config.burst_ratio)


def kinds(actions: list[dict[str, Any]]) -> list[str]:
    return [a["type"] for a in actions]
