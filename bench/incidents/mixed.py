"""The ``mixed`` incident: three groups, two incidents of different kinds and one healthy
group, in one run under one pipeline and one actuator running the shipped policy
(``deploy/policy.default.toml``, byte for byte).

- ``hotspot`` (group A, topic ``agents.mixed.<arm>-<run>.a``): one agent per partition writes
  small records (the war story's swarm shape, bench/support/swarm.py); from ``warmup_s``, for
  ``hotspot_s``, the agents of the ``hot`` partitions also send heavy documents (150 ms of
  work, 48 KiB, ``heavy_rate_per_s`` each): one lane cannot keep up with them.
- ``flood`` (group B, topic ``...b``): the flood scenario's agents (bench/support/flood_load.py);
  ``flood_after_s`` after the hotspot began, one of them sends ``flood_factor`` times its rate.
- ``healthy`` (group C, topic ``...c``): heavy-tailed traffic (lognormal work, a heavy
  document now and then on any partition) well within what its workers do.

Every producer is a ``RateProducer`` agent, every consumer the SDK's ``Worker`` (with the
dedicated pool the policy names, when on). Each incident has its remedy: a ``spread`` (or
hand-off) of A's hot partitions, a throttle of B's flooder; any action on C is wrong
(bench/support/judge.py). Off: the same traffic, the policy off, for each group's p99
without lagpilot. Latency counts from each record's intent; nothing is dropped.

Reported per group: detection (the first partition judged not OK after its onset), its
actions (the ledger), lost, duplicates, p99 off and on, worst time lag; for the scenario:
``actions``, ``wrong_actions``, ``applied_actions``, ``verified``, ``policy_sha256``,
``dropped``, ``lost``, ``duplicates``.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.support import judge
from bench.support.agents import (
    HEAVY_TAILED,
    Agent,
    Agents,
    Records,
    Schedule,
    Stream,
    agent,
    steady_agents,
    tally,
)
from bench.support.control_loop import both_arms
from bench.support.flood_load import FloodShape, flood_agents
from bench.support.groups import WorkerGroup
from bench.support.harness import LagReader
from bench.support.plots import action_lines, pyplot, time_lag_lines
from bench.support.scenario_cli import scenario_main, shape_dict
from bench.support.shipped import (
    first_non_ok,
    judged,
    partition_targets,
    pool_name,
    remedy,
    start_loop,
    statuses,
)
from bench.support.swarm import SwarmConfig, ensure_topic
from bench.support.verdicts import timeline

_SWARM = SwarmConfig()  # the war story's record shapes


#: the war story's small records and heavy documents
SWARM_RECORDS = Records(
    size_median_bytes=_SWARM.size_median_bytes,
    size_sigma=_SWARM.size_sigma,
    work_median_ms=_SWARM.work_median_ms,
    work_sigma=_SWARM.work_sigma,
    work_cap_ms=_SWARM.work_cap_ms,
)
SWARM_DOCUMENTS = Records(
    heavy_share=1.0, heavy_work_ms=_SWARM.heavy_work_ms, heavy_size_bytes=_SWARM.heavy_size_bytes
)


@dataclass(frozen=True)
class HotspotPart:
    partitions: int = 8
    hot: tuple[int, ...] = (2, 5)
    rate_per_s: float = 80.0  # small records, all of A's agents together
    heavy_rate_per_s: float = _SWARM.heavy_rate_per_s  # heavy documents per hot partition
    records: Records = SWARM_RECORDS
    heavy: Records = SWARM_DOCUMENTS
    max_workers: int = _SWARM.max_workers


@dataclass(frozen=True)
class HealthyPart:
    partitions: int = 6
    producers: int = 3
    rate_per_s: float = 20.0  # each agent
    records: Records = HEAVY_TAILED
    max_workers: int = 8


@dataclass(frozen=True)
class MixedShape:
    warmup_s: float = 20.0
    hotspot_s: float = 30.0
    flood_after_s: float = 5.0  # the flood begins this long after the hotspot
    cooldown_s: float = 15.0
    drain_timeout_s: float = 360.0
    hotspot: HotspotPart = field(default_factory=HotspotPart)
    flood: FloodShape = field(default_factory=FloodShape)  # its warm-up and cool-down unused
    healthy: HealthyPart = field(default_factory=HealthyPart)

    @classmethod
    def smoke(cls) -> MixedShape:
        """Seconds-long and lighter, for the test suite: the mechanics, not the figures."""
        return cls(
            warmup_s=8,
            hotspot_s=6,
            flood_after_s=2,
            cooldown_s=3,
            drain_timeout_s=40,
            hotspot=HotspotPart(rate_per_s=40.0),
            flood=replace(FloodShape.smoke(), producers=3, rate_per_s=20.0),
            healthy=HealthyPart(rate_per_s=10.0),
        )

    @property
    def flood_from_s(self) -> float:
        return self.warmup_s + self.flood_after_s

    @property
    def end_s(self) -> float:
        return max(self.warmup_s + self.hotspot_s, self.flood_from_s + self.flood.flood_s) + (
            self.cooldown_s
        )


def hotspot_agents(
    bootstrap: str, topic: str, rates_topic: str, run: str, shape: MixedShape
) -> list[Agent]:
    """One agent per partition (its key lands there); the hot partitions' agents also send
    heavy documents during the hotspot."""
    part, end = shape.hotspot, shape.end_s
    per_agent = part.rate_per_s / part.partitions
    heavy = Schedule.window(part.heavy_rate_per_s, shape.warmup_s, shape.warmup_s + shape.hotspot_s)
    out = []
    for p in range(part.partitions):
        streams = [Stream(Schedule.steady(per_agent, end), part.records, partition=p)]
        if p in part.hot:
            streams.append(Stream(heavy, part.heavy, partition=p))
        out.append(agent(bootstrap, run, p, topic, streams, rates_topic=rates_topic))
    return out


@dataclass
class _Group:
    """One of the run's groups: its topic, agents, workers and what marks its actions."""

    name: str
    topic: str
    partitions: int
    agents: list[Agent]
    workers: WorkerGroup
    onset_s: float

    def owns(self, target: str) -> bool:
        clients = {f"client-id:{a.client_id}" for a in self.agents}
        return (
            # its partitions in the group, or in the dedicated pool's group after a hand-off
            target.startswith(
                (
                    f"group:{self.workers.group}/",
                    f"group:{self.workers.group}.pool.",
                    f"topic:{self.topic}",
                )
            )
            or target == f"group:{self.workers.group}"
            or target in clients
        )


def one_mixed(bootstrap: str, shape: MixedShape, workdir: Path, *, on: bool) -> dict[str, Any]:
    run = f"mx{uuid.uuid4().hex[:6]}"
    prefix = f"agents.mixed.{'on' if on else 'off'}-{run}."
    rates_topic = f"lagpilot.producers.{run}"
    ensure_topic(bootstrap, rates_topic, 1)
    loop = start_loop(
        bootstrap, re.escape(prefix) + "[abc]", run, workdir, on=on, rates_topic=rates_topic
    )
    pool = pool_name() if on else None
    hs, fl, ok = shape.hotspot, shape.flood, shape.healthy
    a_agents = hotspot_agents(bootstrap, prefix + "a", rates_topic, run, shape)
    b_agents = flood_agents(bootstrap, prefix + "b", rates_topic, run, fl, first=len(a_agents),
                            flood_from_s=shape.flood_from_s, end_s=shape.end_s)  # fmt: skip
    c_agents = steady_agents(bootstrap, run, len(a_agents) + len(b_agents), ok.producers,
                             prefix + "c", ok.rate_per_s, ok.records, shape.end_s,
                             rates_topic=rates_topic)  # fmt: skip
    groups = []
    for name, letter, parts, agents, threads, onset in (
        ("hotspot", "a", hs.partitions, a_agents, hs.max_workers, shape.warmup_s),
        ("flood", "b", fl.partitions, b_agents, fl.max_workers, shape.flood_from_s),
        ("healthy", "c", ok.partitions, c_agents, ok.max_workers, shape.warmup_s),
    ):
        ensure_topic(bootstrap, prefix + letter, parts)
        workers = WorkerGroup(bootstrap, f"agents-mixed-{run}-{letter}", [prefix + letter],
                              workdir, control=loop.control, outcomes=loop.outcomes,
                              max_workers=threads, pool=pool)  # fmt: skip
        groups.append(_Group(name, prefix + letter, parts, agents, workers, onset))
    everyone = Agents([a for g in groups for a in g.agents])
    reader = LagReader(bootstrap, {g.workers.group for g in groups}).start()
    drained = stable = False
    drain_s = None
    try:
        loop.wait_modelling()
        for g in groups:
            g.workers.start()
        # the clock starts once every group is stable
        stable = all([g.workers.wait_stable(g.partitions) for g in groups])
        start_ms = everyone.start(shape.end_s + shape.drain_timeout_s)
        everyone.wait_scheduled()
        scheduled = time.monotonic()

        def done() -> set[str]:
            return set().union(*(g.workers.effects.done_ids() for g in groups))

        drained = everyone.wait_processed(done, shape.drain_timeout_s)
        drain_s = round(time.monotonic() - scheduled, 1)
        time.sleep(1.0)
    finally:
        everyone.stop()
        for g in groups:
            g.workers.stop()
        reader.close()
        loop.stop()
    end_ms = int(time.time() * 1000)
    events = reader.select(lambda e: True)
    a_group, b_group = groups[0], groups[1]
    injected = [
        judge.Injected("hotspot", partition_targets(a_group.workers.group, a_group.topic, hs.hot)),
        judge.Injected("inflow_burst", (f"client-id:{b_group.agents[0].client_id}",)),
    ]
    loop_judged = judged(loop, injected, start_ms)
    rows = loop_judged["actions"]
    reports = {g.name: _group_report(g, events, rows, start_ms, end_ms) for g in groups}
    claimed = {id(r) for g in groups for r in rows if g.owns(r["target"])}
    total = tally(
        everyone.intended(), [r for g in groups for r in g.workers.effects.rows()], end_ms
    )
    return {
        **total,
        "drained": drained,
        "stable_at_start": stable,
        "drain_s": drain_s,
        "dropped": everyone.dropped(),
        **loop_judged,
        "unattributed_actions": [r for r in rows if id(r) not in claimed],
        "policy_sha256": loop.policy_sha256,
        "groups": reports,
        "flooder": b_group.agents[0].client_id,
        "hot_partitions": list(hs.hot),
    }


def _group_report(
    g: _Group, events: list[dict[str, Any]], rows: list[dict[str, Any]], start_ms: int, end_ms: int
) -> dict[str, Any]:
    group = g.workers.group
    intended: dict[str, int] = {}
    for a in g.agents:
        intended.update(a.snapshot())
    mine = [r for r in rows if g.owns(r["target"])]
    lags = [e for e in events if e["event"] == "partition_lag" and e["group"] == group]
    return {
        "group": group,
        "topic": g.topic,
        "onset_s": g.onset_s,
        "detection_ms": first_non_ok(events, group, start_ms + int(g.onset_s * 1000)),
        "first_non_ok_ms": first_non_ok(events, group, start_ms),
        "actions": mine,
        "remedy": remedy(mine),
        "wrong_actions": judge.wrong_actions(mine),
        "applied_actions": judge.applied_actions(mine),
        **tally(intended, g.workers.effects.rows(), end_ms),
        "max_time_lag_s": max((e["time_lag_s"] for e in lags), default=0.0),
        "statuses": statuses(events, group),
        "worker": g.workers.stats(),
        "timeline": timeline(lags, start_ms),
    }


#: what the scenario should show: every incident fixed by its own remedy, the healthy group
#: left alone (its ``applied_actions`` 0), nothing dropped, lost or repeated
TARGETS = {"wrong_actions": 0, "verified": True, "healthy_applied_actions": 0, "dropped": 0,
           "lost": 0, "duplicates": 0}  # fmt: skip


def _strip(group: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in group.items() if k != "timeline"}


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


def mixed(
    bootstrap: str, shape: MixedShape, workdir: Path, *, parallel: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both arms; returns (summary, runs for the plot)."""
    off, on = both_arms(one_mixed, bootstrap, shape, workdir, parallel=parallel)

    def per_group(pick: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
        return {name: pick(g) for name, g in on["groups"].items()}

    groups = {
        name: _strip(g) | {"off_p99_ms": off["groups"][name]["p99_ms"],
                           "off_max_time_lag_s": off["groups"][name]["max_time_lag_s"],
                           "ratio": _ratio(off["groups"][name]["p99_ms"], g["p99_ms"])}
        for name, g in on["groups"].items()
    }  # fmt: skip
    summary = {
        "remedy": remedy(on["actions"]),
        "detection_ms": per_group(lambda g: g["detection_ms"]),
        "first_action_ms": min((a["at_ms"] for a in on["actions"]), default=None),
        **{k: on[k] for k in ("verified", "wrong_actions", "wrong_undos", "applied_actions",
                              "actions", "unattributed_actions", "policy_sha256", "lost",
                              "duplicates")},
        "dropped": off["dropped"] + on["dropped"],
        "healthy_applied_actions": groups["healthy"]["applied_actions"],
        "off_p99_ms": {n: off["groups"][n]["p99_ms"] for n in off["groups"]},
        "on_p99_ms": per_group(lambda g: g["p99_ms"]),
        "ratio": {n: g["ratio"] for n, g in groups.items()},
        "groups": groups,
        "off": {k: v for k, v in off.items() if k != "groups"}
        | {"groups": {n: _strip(g) for n, g in off["groups"].items()}},
        "on": {k: v for k, v in on.items() if k not in ("groups", "actions")},
        "shape": shape_dict(shape),
        "targets": TARGETS,
    }  # fmt: skip
    return summary, {"off": off, "on": on}


def plot_mixed(runs: dict[str, dict[str, Any]], out: Path) -> None:
    plt = pyplot()
    names = list(runs["on"]["groups"])
    fig, axes = plt.subplots(2, len(names), figsize=(16, 7), sharex=True)
    for row, arm in enumerate(("off", "on")):
        res = runs[arm]
        for col, name in enumerate(names):
            g = res["groups"][name]
            ax = axes[row][col]
            hot = set(res["hot_partitions"]) if name == "hotspot" else None
            time_lag_lines(ax, g["timeline"], hot=hot)
            action_lines(ax, g["actions"], lw=0.6)
            ax.set_title(
                f"{arm}, {name}: p99 {g['p99_ms']} ms, actions {len(g['actions'])}", fontsize=9
            )
            ax.set_yscale("symlog", linthresh=1.0)
            ax.grid(alpha=0.3)
            if col == 0:
                ax.set_ylabel("time lag per partition (s)")
            if row == 1:
                ax.set_xlabel("seconds since the run began")
    fig.suptitle(
        "mixed: a hotspot, a flood and a healthy group under one policy (dashed: "
        "actions on that group)"
    )
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


MIXED_HEADLINE = ("detection_ms", "off_p99_ms", "on_p99_ms", "ratio", "unattributed_actions")


def main(argv: list[str] | None = None) -> int:
    return scenario_main(argv, name="mixed", doc=__doc__, shape=MixedShape, run=mixed,
                         plot=plot_mixed, headline=MIXED_HEADLINE)  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
