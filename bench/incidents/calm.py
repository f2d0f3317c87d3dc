"""The ``calm`` scenario: minutes of healthy but heavy-tailed traffic, with the membership
churn of an ordinary deployment, under the shipped policy (``deploy/policy.default.toml``,
byte for byte) in act mode, the control loop on. Nothing is injected, so every intervention
is wrong (bench/support/judge.py): the target is ``applied_actions`` 0.

``producers`` agents (``RateProducer`` clients ``agent-<run>-<i>``) send heavy-tailed records
(lognormal sizes and work, a heavy document now and then on any partition;
bench/support/agents.py ``HEAVY_TAILED``) to ``agents.calm.on-<run>``, well within what the
group processes. The group is ``members`` SDK workers with static membership ids (a
StatefulSet's pods), plus the dedicated pool the policy names. The operator's script:

- at ``rollout_at_s``, a rolling restart: each member in turn is stopped (gracefully), down
  for ``restart_down_s`` and started again under its id, ``rollout_gap_s`` between two;
- at ``join_at_s`` one more member joins (dynamic membership, a scaled-out pod), and at
  ``leave_at_s`` it leaves.

Reported: ``actions`` (the ledger), ``wrong_actions``, ``applied_actions``, lost, duplicates,
dropped, p99 (latency from each record's intent), the group's health and lag statuses seen,
the generation moves, the script's steps with their times, and ``policy_sha256``.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.support.agents import HEAVY_TAILED, Agents, Records, steady_agents, tally
from bench.support.groups import WorkerGroup
from bench.support.harness import LagReader
from bench.support.plots import action_lines, pyplot, time_lag_lines
from bench.support.scenario_cli import scenario_main, shape_dict
from bench.support.shipped import (
    first_non_ok,
    judged,
    pool_name,
    remedy,
    start_loop,
    statuses,
)
from bench.support.swarm import ensure_topic
from bench.support.verdicts import timeline


@dataclass(frozen=True)
class CalmShape:
    duration_s: float = 270.0
    partitions: int = 8
    producers: int = 4
    rate_per_s: float = 20.0  # each agent
    records: Records = HEAVY_TAILED
    members: int = 3
    max_workers: int = 4  # each member's threads
    rollout_at_s: float = 60.0
    rollout_gap_s: float = 10.0  # from one member back to the next one's stop
    restart_down_s: float = 3.0  # how long a restarted member is away
    join_at_s: float = 150.0
    leave_at_s: float = 210.0
    drain_timeout_s: float = 60.0

    @classmethod
    def smoke(cls) -> CalmShape:
        """Under a minute, for the test suite: the mechanics, not the figures."""
        # two members (the rollout ends by 10 s); the extra member leaves 10 s after it
        # joined: a join's cooperative rebalance takes two rounds (~7 s here), and a member
        # that leaves between them strands its pending partitions for session.timeout.ms
        return cls(duration_s=26, members=2, rollout_at_s=4, rollout_gap_s=2, restart_down_s=2,
                   join_at_s=13, leave_at_s=23, drain_timeout_s=40)  # fmt: skip


class _Operator:
    """The deployment's script (see the module), on its own thread, timed from the start."""

    def __init__(self, workers: WorkerGroup, shape: CalmShape) -> None:
        self.workers, self.shape = workers, shape
        self.steps: list[dict[str, Any]] = []  # what was done, when (ms since the start)
        self._thread = threading.Thread(target=self._run, name="operator", daemon=True)
        self._t0 = 0.0
        self._stop = threading.Event()

    def start(self, t0: float) -> None:
        self._t0 = t0
        self._thread.start()

    def _at(self, at_s: float) -> bool:
        return not self._stop.wait(max(0.0, self._t0 + at_s - time.monotonic()))

    def _step(self, what: str, member: str) -> None:
        ms = int((time.monotonic() - self._t0) * 1000)
        self.steps.append({"at_ms": ms, "step": what, "member": member})

    def _run(self) -> None:
        s = self.shape
        if not self._at(s.rollout_at_s):
            return
        for member in list(self.workers.members):
            self._step("stop", member)
            self.workers.restart(member, s.restart_down_s)
            self._step("started", member)
            if self._stop.wait(s.rollout_gap_s):
                return
        if not self._at(s.join_at_s):
            return
        extra = self.workers.join()
        self._step("join", extra)
        if not self._at(s.leave_at_s):
            return
        self._step("leave", extra)
        self.workers.leave(extra)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)


def _health_changes(health: list[dict[str, Any]], start_ms: int) -> list[list[Any]]:
    """``[ms since the start, status, generation, members]`` each time one of them changed."""
    out: list[list[Any]] = []
    for e in sorted(health, key=lambda e: e["observed_at_ms"]):
        now = [e["status"], e.get("generation"), len(e.get("members") or ())]
        if not out or out[-1][1:] != now:
            out.append([e["observed_at_ms"] - start_ms, *now])
    return out


def one_calm(bootstrap: str, shape: CalmShape, workdir: Path) -> dict[str, Any]:
    run = f"ca{uuid.uuid4().hex[:6]}"
    topic, group = f"agents.calm.on-{run}", f"agents-calm-{run}"
    rates_topic = f"lagpilot.producers.{run}"
    ensure_topic(bootstrap, topic, shape.partitions)
    ensure_topic(bootstrap, rates_topic, 1)
    loop = start_loop(bootstrap, re.escape(topic), run, workdir, on=True, rates_topic=rates_topic)
    agents = Agents(
        steady_agents(
            bootstrap,
            run,
            0,
            shape.producers,
            topic,
            shape.rate_per_s,
            shape.records,
            shape.duration_s,
            rates_topic=rates_topic,
        )
    )
    workers = WorkerGroup(
        bootstrap,
        group,
        [topic],
        workdir,
        control=loop.control,
        outcomes=loop.outcomes,
        members=shape.members,
        max_workers=shape.max_workers,
        pool=pool_name(),
    )
    operator = _Operator(workers, shape)
    reader = LagReader(bootstrap, {group}).start()
    drained = stable = False
    drain_s = None
    try:
        loop.wait_modelling()
        workers.start()
        stable = workers.wait_stable(shape.partitions)  # the clock starts there
        start_ms = agents.start(shape.duration_s + shape.drain_timeout_s)
        operator.start(time.monotonic())
        agents.wait_scheduled()
        scheduled = time.monotonic()
        drained = agents.wait_processed(workers.effects.done_ids, shape.drain_timeout_s)
        drain_s = round(time.monotonic() - scheduled, 1)
        time.sleep(1.0)
    finally:
        operator.stop()
        agents.stop()
        workers.stop()
        reader.close()
        loop.stop()
    end_ms = int(time.time() * 1000)
    events = reader.select(lambda e: True)
    lags = [e for e in events if e["event"] == "partition_lag"]
    health = [e for e in events if e["event"] == "group_health"]
    gens = [e["generation"] for e in health if e.get("generation", -1) >= 0]
    loop_judged = judged(loop, [], start_ms)  # nothing injected: every intervention is wrong
    return {
        **tally(agents.intended(), workers.effects.rows(), end_ms),
        "drained": drained,
        "stable_at_start": stable,
        "drain_s": drain_s,
        "dropped": agents.dropped(),
        **loop_judged,
        "remedy": remedy(loop_judged["actions"]),
        "policy_sha256": loop.policy_sha256,
        "statuses": statuses(events, group),
        "first_non_ok_ms": first_non_ok(events, group, start_ms),
        "max_time_lag_s": max((e["time_lag_s"] for e in lags), default=0.0),
        "health_changes": _health_changes(health, start_ms),
        "generation_moves": max(gens) - min(gens) if gens else 0,
        "steps": operator.steps,
        "worker": workers.stats(),
        "producers": {a.client_id: a.counts() for a in agents.agents},
        "timeline": timeline(lags, start_ms),
    }


def calm(
    bootstrap: str, shape: CalmShape, workdir: Path, *, parallel: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The one arm (lagpilot on: nothing to compare it with); ``parallel`` has no second arm
    to run beside it."""
    on = one_calm(bootstrap, shape, workdir)
    summary = {
        "remedy": on["remedy"],
        "detection_ms": None,  # nothing injected
        "first_action_ms": min((a["at_ms"] for a in on["actions"]), default=None),
        "verified": on["verified"],
        "wrong_actions": on["wrong_actions"],
        "wrong_undos": on["wrong_undos"],
        "applied_actions": on["applied_actions"],
        "actions": on["actions"],
        "policy_sha256": on["policy_sha256"],
        "dropped": on["dropped"],
        "lost": on["lost"],
        "duplicates": on["duplicates"],
        "off_p99_ms": None,
        "on_p99_ms": on["p99_ms"],
        "ratio": None,
        "statuses": on["statuses"],
        "first_non_ok_ms": on["first_non_ok_ms"],
        "steps": on["steps"],
        "on": {k: v for k, v in on.items() if k not in ("timeline", "actions")},
        "shape": shape_dict(shape),
        "targets": {
            "applied_actions": 0,
            "wrong_actions": 0,
            "dropped": 0,
            "lost": 0,
            "duplicates": 0,
        },
    }
    return summary, {"on": on}


def plot_calm(runs: dict[str, dict[str, Any]], out: Path) -> None:
    plt = pyplot()
    res = runs["on"]
    fig, ax = plt.subplots(figsize=(13, 4.5))
    time_lag_lines(ax, res["timeline"], lw=0.8)
    action_lines(ax, res["actions"], color=lambda a: "tab:red")
    for s in res["steps"]:
        ax.axvline(s["at_ms"] / 1000, color="0.5", lw=0.6, ls=":")
        ax.annotate(
            f"{s['step']} {s['member'].rsplit('-', 1)[-1]}",
            (s["at_ms"] / 1000, 0),
            rotation=90,
            fontsize=6,
            va="bottom",
        )
    ax.set_title(
        f"calm: p99 {res['p99_ms']} ms, applied actions {res['applied_actions']} "
        f"(dotted: restarts, join, leave; dashed red: actions)"
    )
    ax.set_xlabel("seconds since the traffic began")
    ax.set_ylabel("time lag per partition (s)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


CALM_HEADLINE = ("on_p99_ms", "statuses", "first_non_ok_ms", "steps")


def main(argv: list[str] | None = None) -> int:
    return scenario_main(
        argv,
        name="calm",
        doc=__doc__,
        shape=CalmShape,
        run=calm,
        plot=plot_calm,
        headline=CALM_HEADLINE,
    )


if __name__ == "__main__":
    raise SystemExit(main())
