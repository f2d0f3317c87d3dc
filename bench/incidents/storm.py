"""The ``storm`` incident: every member that takes the heavy partition dies on it.

``members`` worker processes (worker SDK, dynamic membership as in a Deployment, client id
``<run>-m<i>``) share a topic (``agents.storm.<arm>-<run>``) of ``partitions`` partitions
written at ``rate_per_s`` by one producer (``agent-<run>-0``). From
``warmup_s``, partition ``heavy_partition`` also carries a heavy document every
``heavy_every_s``: a member that starts one dies at once (``os._exit(137)``, the stand-in
for the out-of-memory kill of a pod too small for it), without a commit or a LeaveGroup.
A restarter (bench/support/restarter.py) starts a dead member again after ``restart_s``
(the kubelet). The coordinator notices the death after ``session_timeout_ms``; the partition
goes to another member, which dies on the same document: a rebalance storm that never ends
by itself. The storm begins after ``warmup_s``, longer than the pipeline's storm window,
so the members' first joins are out of the window by then.

Both arms run the shipped policy and the pipeline's defaults (storm window, stall time,
group health interval: nothing overridden), and a ``PoolWorker`` of the policy's pool
(``hotspot.pool``: a dedicated pool that processes heavy documents without dying) beside
the group. Off: the pipeline models lag and group health, the policy is off. On: the policy
acts. Expected: ``rebalance_storm`` diagnosed, the partitions of the member that keeps
leaving handed off to the pool (the ``handoff_member`` step), rebalances stop, nothing lost
or repeated. What was injected, for the judge: a rebalance storm whose targets are the
partitions the dead members held when they died (bench/support/health_reads.py), in the
group and in the pool's group.

``group_protocol`` is the members' (``classic``, or ``consumer``: KIP-848, where the
broker's ``group.consumer.session.timeout.ms`` decides when a death is noticed, 45 s at
least on Apache Kafka's defaults; the summary records it under ``group_settings``).

Reported per run: rebalances (generation moves seen in the group's ``group_health``) and
rebalances per minute over the storm, member deaths, p50/p99/max latency, lost and
duplicates; off, the heavy partition never progresses, so its unprocessed messages count in
``p99_ms`` at their age when the run ended (a lower bound, flagged ``p99_lower_bound``).

A member process is ``python -m bench.incidents.storm_member ...`` (a small module: it
starts often).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from actuators.workers import PoolWorker
from bench.support.control_loop import ControlLoop, both_arms, policy_config
from bench.support.effects import record
from bench.support.group_protocol import broker_group_settings
from bench.support.harness import LagReader
from bench.support.health_reads import held_at_death, rebalances
from bench.support.judge import Injected, judge_run, partition_targets
from bench.support.plots import action_lines, pyplot, time_lag_lines
from bench.support.restarter import Restarter
from bench.support.swarm import Ledger, ensure_topic
from bench.support.verdicts import outcome_rows, remedy_of, timeline, verdict_rows
from pipeline.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
#: the pipeline's storm rules, run at their shipped defaults (nothing overridden); the
#: results record them with the shape
PIPELINE_STORM_SETTINGS = ("storm_rebalances", "storm_window_s", "group_stall_s",
                           "group_health_interval_ms")  # fmt: skip


@dataclass(frozen=True)
class StormShape:
    partitions: int = 6
    members: int = 3
    heavy_partition: int = 2
    rate_per_s: float = 60.0  # normal records/s, all partitions
    work_ms: float = 5.0
    heavy_every_s: float = 4.0
    heavy_work_ms: float = 400.0  # in the pool
    # the members' joins leave the pipeline's storm window (its default) before it starts
    warmup_s: float = Settings.storm_window_s + 5.0
    storm_s: float = 180.0
    restart_s: float = 1.0
    session_timeout_ms: int = 6000  # the broker's group.min.session.timeout.ms (classic)
    # the members' group protocol; under "consumer" (KIP-848) the broker's session applies
    # (group.consumer.session.timeout.ms, recorded with the results), not session_timeout_ms
    group_protocol: str = "classic"
    drain_s: float = 60.0  # on: how long to wait for every message once the storm ends


class _Producer:
    """The storm's one agent (``agent-<run>-0``): the normal records, and from ``warmup_s``
    a heavy document on the heavy partition every ``heavy_every_s``; every record it meant
    to send is kept, with the broker's acknowledgement (idempotent: a retried produce on a
    loaded broker never writes a record twice, which the workers would apply twice)."""

    def __init__(self, bootstrap: str, topic: str, run: str, shape: StormShape) -> None:
        self.topic, self.run_id, self.shape = topic, run, shape
        self.ids: dict[str, tuple[int, int]] = {}  # id -> (produced ms, partition)
        self.acked: set[str] = set()
        self._p = Producer({"bootstrap.servers": bootstrap, "client.id": f"agent-{run}-0",
                            "linger.ms": 5, "enable.idempotence": True})  # fmt: skip

    def _send(self, mid: str, heavy: bool, partition: int, pad: int) -> None:
        produced_ms = int(time.time() * 1000)
        head = {"id": mid, "heavy": heavy, "produced_ms": produced_ms}
        value = orjson.dumps(head) + b"\n" + b"x" * pad
        self._p.produce(self.topic, value, partition=partition, on_delivery=self._acked(mid))
        self.ids[mid] = (produced_ms, partition)

    def _acked(self, mid: str) -> Any:
        def delivered(err: Any, _msg: Any) -> None:
            if err is None:
                self.acked.add(mid)

        return delivered

    def run(self) -> None:
        s, t0 = self.shape, time.monotonic()
        n = heavy = 0
        while (now_s := time.monotonic() - t0) < s.warmup_s + s.storm_s:
            while n < int(now_s * s.rate_per_s):
                self._send(f"{self.run_id}-{n}", False, n % s.partitions, 256)
                n += 1
            if now_s >= s.warmup_s and heavy <= (now_s - s.warmup_s) / s.heavy_every_s:
                self._send(f"{self.run_id}-doc-{heavy}", True, s.heavy_partition, 4096)
                heavy += 1
            self._p.poll(0)
            time.sleep(0.01)
        self._p.flush(30)


def one_storm(bootstrap: str, shape: StormShape, workdir: Path, *, on: bool) -> dict[str, Any]:
    run = f"st{uuid.uuid4().hex[:6]}"
    topic, group = f"agents.storm.{'on' if on else 'off'}-{run}", f"storm-workers-{run}"
    ensure_topic(bootstrap, topic, shape.partitions)
    loop = ControlLoop.start(bootstrap, topic, run, workdir, on=on)
    pool_name = policy_config(loop.policy).spread_pool
    reader = LagReader(bootstrap, {group}).start()
    ledger = Ledger(workdir / f"effects-{run}.sqlite")

    def pool_handle(msg: Any, ctx: Any) -> None:
        head = orjson.loads(msg.value().split(b"\n", 1)[0])
        time.sleep((shape.heavy_work_ms if head["heavy"] else shape.work_ms) / 1000)
        record(ctx, head, msg.partition())

    # the dedicated pool a team that ships ``hotspot.pool`` runs, in both arms (it idles
    # unless lagpilot hands a partition off)
    pool = (
        PoolWorker(
            pool=pool_name,
            bootstrap=bootstrap,
            group=group,
            handler=pool_handle,
            max_workers=4,
            dedupe=ledger.path,
            control_topic=loop.control,
            outcomes_topic=loop.outcomes,
            commit_interval_s=0.2,
            group_protocol=shape.group_protocol,
        )
        if pool_name
        else None
    )
    member_args = ["--bootstrap", bootstrap, "--topic", topic, "--group", group,
                   "--control", loop.control, "--outcomes", loop.outcomes if on else "",
                   "--ledger", str(ledger.path), "--work-ms", str(shape.work_ms),
                   "--session-timeout-ms", str(shape.session_timeout_ms),
                   "--group-protocol", shape.group_protocol]  # fmt: skip
    members = Restarter("bench.incidents.storm_member", member_args, shape.members, run,
                        shape.restart_s, workdir)  # fmt: skip
    agent = _Producer(bootstrap, topic, run, shape)
    start_ms = end_ms = 0
    drained = False
    try:
        loop.wait_modelling()
        if pool is not None:
            pool.start()
        members.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not reader.select(
            lambda e: e["event"] == "group_health" and len(e["members"]) == shape.members
        ):
            time.sleep(0.2)  # the clock starts once every member joined ...
        _wait_spread(bootstrap, group, shape.members, deadline)  # ... and holds partitions
        start_ms = int(time.time() * 1000 + shape.warmup_s * 1000)
        agent.run()
        end_ms = int(time.time() * 1000)
        if on:  # off, the heavy partition never drains: nothing to wait for
            deadline = time.monotonic() + shape.drain_s
            while time.monotonic() < deadline:
                if agent.acked <= {r[0] for r in ledger.rows()}:
                    drained = True
                    break
                time.sleep(0.5)
        else:
            time.sleep(3.0)
        time.sleep(1.0)
    finally:
        members.stop()
        if pool is not None:
            pool.stop()
        reader.close()
        loop.stop()
    health = reader.select(lambda e: e["event"] == "group_health")
    reported = loop.reported() if on else []
    # what was injected: a poisoned partition that kills each member taking it. A fitting
    # remedy hands off the partitions of the member that keeps leaving: those the dead
    # members held when they died (the heavy one always). In the pool's group the same
    # partitions fit too: a handed-off partition arrives there with the backlog the storm
    # left, and spreading that backlog over the pool's lanes drains what the injected
    # incident caused, on partitions lagpilot already moved, touching nothing else.
    deaths = [d for d in members.deaths if start_ms <= d[0] <= end_ms]
    poisoned = {shape.heavy_partition} | held_at_death(health, topic, deaths)
    storm = Injected("rebalance_storm", partition_targets(group, topic, sorted(poisoned),
                                                          pool_name))  # fmt: skip
    return {
        "policy_sha256": loop.policy_sha256,
        "pool": pool_name,
        "drained": drained,
        "injected_partitions": sorted(poisoned),
        **_latencies(agent, ledger, shape.partitions),
        **_storm_figures(health, reported, members.deaths, start_ms, end_ms),
        **judge_run(loop.actions(), reported, [storm], start_ms),
        "outcomes": outcome_rows(reported),
        "verdicts": verdict_rows(reported, start_ms),
        "timeline": timeline(reader.select(lambda e: e["event"] == "partition_lag"), start_ms),
    }


def _wait_spread(bootstrap: str, group: str, members: int, deadline: float) -> None:
    """Until the coordinator says every member holds partitions (or the deadline). Under
    KIP-848 a member is in the group before it owns anything: its share moves at the
    owners' next heartbeats (5 s apart by default), and a storm that began before would
    kill the one member holding every partition."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    while time.monotonic() < deadline:
        try:
            desc = admin.describe_consumer_groups([group])[group].result(10)
        except KafkaException:
            desc = None
        if (
            desc is not None
            and len(desc.members) == members
            and all(m.assignment.topic_partitions for m in desc.members)
        ):
            return
        time.sleep(0.2)


def _latencies(agent: _Producer, ledger: Ledger, partitions: int) -> dict[str, Any]:
    """Latency, lost and duplicates of the records the agent got written (``dropped``: the
    ones the broker never acknowledged); a record never processed counts at its age when
    the run stopped (a lower bound, flagged ``p99_lower_bound``)."""
    stopped_ms = int(time.time() * 1000)
    rows = ledger.rows()
    done = [r[0] for r in rows]
    missing = agent.acked - set(done)
    ids = agent.ids
    latency = np.array([r[4] - r[3] for r in rows] + [stopped_ms - ids[m][0] for m in missing],
                       dtype=np.float64)  # fmt: skip
    return {
        "produced": len(agent.acked),
        "dropped": len(set(ids) - agent.acked),
        "processed": len(set(done)),
        "lost": len(missing),
        "lost_by_partition": {
            str(p): n for p in range(partitions) if (n := sum(ids[m][1] == p for m in missing))
        },
        "duplicates": len(done) - len(set(done)),
        "p50_ms": round(float(np.percentile(latency, 50)), 1) if len(latency) else None,
        "p99_ms": round(float(np.percentile(latency, 99)), 1) if len(latency) else None,
        "max_ms": round(float(latency.max()), 1) if len(latency) else None,
        "p99_lower_bound": bool(missing),
    }


def _storm_figures(
    health: list[dict[str, Any]], reported: list[dict[str, Any]],
    deaths: list[tuple[int, str]], start_ms: int, end_ms: int,
) -> dict[str, Any]:  # fmt: skip
    """Rebalances (generation moves in ``group_health``) per minute over the storm, and after
    the first hand-off started; member deaths; when the model first said STORM."""
    count = rebalances(health, start_ms, end_ms)
    minutes = max((end_ms - start_ms) / 60_000, 1e-9)
    handed = sorted(
        o["at"]
        for o in reported
        if o.get("event") == "worker_outcome"
        and o.get("did") == "handoff_started"
        and isinstance(o.get("at"), int)
    )
    after = rebalances(health, handed[0], end_ms) if handed else None
    storms = [e["observed_at_ms"] for e in health
              if e["status"] == "STORM" and e["observed_at_ms"] >= start_ms]  # fmt: skip
    return {
        "rebalances": count,
        "rebalances_per_min": round(count / minutes, 2),
        "storm_minutes": round(minutes, 3),
        "rebalances_after_handoff": after,
        "rebalances_per_min_after_handoff": round(
            after / max((end_ms - handed[0]) / 60_000, 1e-9), 2
        )
        if handed and after is not None
        else None,
        "deaths": len([d for d in deaths if d[0] >= start_ms]),
        "deaths_at_ms": [d[0] - start_ms for d in deaths],
        "storm_detected_ms": min(storms) - start_ms if storms else None,
        "handoff_started_ms": [t - start_ms for t in handed],
        "worker_outcomes": [
            {
                "did": o["did"],
                "instance": o["instance"],
                "partition": o.get("partition"),
                "at_ms": o["at"] - start_ms if isinstance(o.get("at"), int) else None,
            }
            for o in reported
            if o.get("event") == "worker_outcome"
        ],
        "generations": [
            [e["observed_at_ms"] - start_ms, e["generation"], e["status"]] for e in health
        ],
    }


def storm(
    bootstrap: str, shape: StormShape, workdir: Path, *, parallel: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    off, on = both_arms(one_storm, bootstrap, shape, workdir, parallel=parallel)
    ratio = (
        round(off["rebalances_per_min"] / max(on["rebalances_per_min"], 1e-9), 2)
        if off["rebalances_per_min"]
        else None
    )
    steps = []
    for a in sorted(on["actions"], key=lambda a: a["at_ms"]):
        step = a["rule"] if a["type"] == "spread_partition" else a["type"]
        if step not in steps:
            steps.append(step)
    summary = {
        "policy_sha256": on["policy_sha256"],
        "group_protocol": shape.group_protocol,
        "group_settings": broker_group_settings(bootstrap, shape.group_protocol),
        "remedy": remedy_of(on["actions"]),
        "steps": steps,
        "causes": [a["cause"] for a in on["actions"]],
        "detection_ms": on["storm_detected_ms"],
        "first_action_ms": min((a["at_ms"] for a in on["actions"]), default=None),
        "handoff_started_ms": on["handoff_started_ms"],
        "injected_partitions": on["injected_partitions"],
        "actions": on["actions"],
        "wrong_actions": on["wrong_actions"],
        "wrong_undos": on["wrong_undos"],
        "applied_actions": on["applied_actions"],
        "verified": on["verified"],
        "verdicts": on["verdicts"],
        "off_p99_ms": off["p99_ms"],
        "off_p99_lower_bound": off["p99_lower_bound"],
        "on_p99_ms": on["p99_ms"],
        "ratio": round(off["p99_ms"] / on["p99_ms"], 2) if off["p99_ms"] and on["p99_ms"] else None,
        "off_rebalances_per_min": off["rebalances_per_min"],
        "on_rebalances_per_min": on["rebalances_per_min"],
        "rebalance_ratio": ratio,
        "on_rebalances": on["rebalances"],
        "off_rebalances": off["rebalances"],
        "on_rebalances_after_handoff": on["rebalances_after_handoff"],
        "off_deaths": off["deaths"],
        "on_deaths": on["deaths"],
        "dropped": off["dropped"] + on["dropped"],  # either arm's: its figures lack them
        "lost": on["lost"],
        "duplicates": on["duplicates"],
        "off": {k: v for k, v in off.items() if k not in ("timeline", "actions")},
        "on": {k: v for k, v in on.items() if k not in ("timeline", "actions")},
        "shape": {
            **{k: getattr(shape, k) for k in shape.__dataclass_fields__},
            "pipeline": {k: getattr(Settings, k) for k in PIPELINE_STORM_SETTINGS},
        },
        "targets": {
            "rebalance_ratio": 5,
            "wrong_actions": 0,
            "lost": 0,
            "duplicates": 0,
            "cause": "rebalance_storm",
            "step": "handoff_member",
        },
    }
    return summary, {"off": off, "on": on}


def plot_storm(runs: dict[str, dict[str, Any]], out: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(13, 7), sharex=True)
    for col, name in enumerate(("off", "on")):
        res = runs[name]
        ax = axes[0][col]
        time_lag_lines(ax, res["timeline"])
        action_lines(ax, res["actions"])
        ax.set_title(f"lagpilot {name}: {res['rebalances_per_min']:.1f} rebalances/min, "
                     f"{res['deaths']} deaths")  # fmt: skip
        ax.set_ylabel("time lag (s)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
        ax = axes[1][col]
        gens = sorted((t / 1000, g) for t, g, _ in res["generations"])
        if gens:
            xs, ys = zip(*gens, strict=True)
            ax.step(xs, ys, where="post", label="group generation")
        for t in res["deaths_at_ms"]:
            ax.axvline(t / 1000, color="tab:red", lw=0.6, ls=":")
        ax.set_ylabel("generation (red: a member died)")
        ax.set_xlabel("seconds since the heavy documents began")
        ax.grid(alpha=0.3)
    fig.suptitle("storm: each member that takes the heavy partition dies (dashed: lagpilot "
                 "actions)")  # fmt: skip
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
