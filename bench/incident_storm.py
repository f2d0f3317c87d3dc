"""The ``storm`` incident: every member that takes the heavy partition dies on it.

``members`` worker processes (worker SDK, dynamic membership as in a Deployment, client id
``<run>-m<i>``) share a topic of ``partitions`` partitions written at ``rate_per_s``. From
``warmup_s``, partition ``heavy_partition`` also carries a heavy document every
``heavy_every_s``: a member that starts one dies at once (``os._exit(137)``, the stand-in
for the out-of-memory kill of a pod too small for it), without a commit or a LeaveGroup.
A supervisor restarts a dead member after ``restart_s`` (the kubelet). The coordinator
notices the death after ``session_timeout_ms``; the partition goes to another member, which
dies on the same document: a rebalance storm that never ends by itself.

Off: the pipeline models lag and group health, the policy is off. On: the policy runs in
act mode with diagnosis on and ``hotspot.pool = "highmem"``; a ``PoolWorker`` (the dedicated
high-memory pool, which processes heavy documents without dying) runs beside the group.
Expected: ``rebalance_storm`` diagnosed, the heavy partition handed off to the pool (the
``handoff_member`` step), rebalances stop, nothing lost or repeated.

Reported per run: rebalances (generation moves seen in the group's ``group_health``) and
rebalances per minute over the storm, member deaths, p50/p99/max latency, lost and
duplicates; off, the heavy partition never progresses, so its unprocessed messages count in
``p99_ms`` at their age when the run ended (a lower bound, flagged ``p99_lower_bound``).

A member process is ``python -m bench.storm_member ...`` (a small module: it starts often).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from confluent_kafka import Producer

from actuators.workers import PoolWorker
from bench.incident_slow_group import verified_of
from bench.storm_member import record
from bench.support.control_loop import ControlLoop, both_arms
from bench.support.control_loop import policy_toml as policy_toml_of
from bench.support.harness import LagReader
from bench.support.plots import action_lines, pyplot, time_lag_lines
from bench.support.swarm import Ledger, ensure_topic
from bench.support.verdicts import (
    action_row,
    outcome_rows,
    remedy_of,
    timeline,
    verdict_rows,
)

ROOT = Path(__file__).resolve().parents[1]
POOL = "highmem"


@dataclass(frozen=True)
class StormShape:
    partitions: int = 6
    members: int = 3
    heavy_partition: int = 2
    rate_per_s: float = 60.0  # normal records/s, all partitions
    work_ms: float = 5.0
    heavy_every_s: float = 4.0
    heavy_work_ms: float = 400.0  # in the pool
    warmup_s: float = 30.0  # the members' joins leave the storm window before it starts
    storm_s: float = 180.0
    restart_s: float = 1.0
    session_timeout_ms: int = 6000  # the broker's group.min.session.timeout.ms
    time_lag_s: float = 2.0
    stall_s: float = 10.0  # the pipeline's group_stall_s (its default)
    storm_window_s: float = 30.0  # the pipeline's storm_window_s (default 60)
    drain_s: float = 60.0  # on: how long to wait for every message once the storm ends


def policy_toml(shape: StormShape) -> str:
    extra = f"""
[hotspot]
ratio = 3.0
lanes = 4
pool = "{POOL}"

[ladders.default]
rebalance_storm = ["handoff_member:30"]
"""
    return policy_toml_of(version="incident-storm", time_lag_s=shape.time_lag_s, cooldown_s=5,
                          actions_per_minute=30, ttl_s=60, extra=extra,
                          enabled=["spread_partition", "restore_partition"])  # fmt: skip


class Supervisor:
    """Keeps ``members`` member processes running: a dead one is restarted after
    ``restart_s`` (with the same client id, as a restarted container keeps its pod)."""

    def __init__(self, args: list[str], members: int, run: str, restart_s: float,
                 logdir: Path) -> None:  # fmt: skip
        self.args, self.run, self.restart_s, self.logdir = args, run, restart_s, logdir
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * members
        self.deaths: list[tuple[int, int]] = []  # (ms, member)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="supervisor", daemon=True)

    def _spawn(self, i: int) -> None:
        log = open(self.logdir / f"member-{self.run}-{i}.log", "ab")  # noqa: SIM115
        self.procs[i] = subprocess.Popen(
            [sys.executable, "-m", "bench.storm_member", *self.args,
             "--client-id", f"{self.run}-m{i}"],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def start(self) -> Supervisor:
        for i in range(len(self.procs)):
            self._spawn(i)
        self._thread.start()
        return self

    def _loop(self) -> None:
        dead_since: dict[int, float] = {}
        while not self._stop.is_set():
            for i, p in enumerate(self.procs):
                if p is None or p.poll() is None:
                    continue
                if i not in dead_since:
                    dead_since[i] = time.monotonic()
                    self.deaths.append((int(time.time() * 1000), i))
                elif time.monotonic() - dead_since[i] >= self.restart_s:
                    del dead_since[i]
                    self._spawn(i)
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.terminate()
        for p in self.procs:
            if p is not None:
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()


def _rebalances(health: list[dict[str, Any]], start_ms: int, end_ms: int) -> int:
    """Generation moves the coordinator made between ``start_ms`` and ``end_ms``."""
    gens = sorted((e["observed_at_ms"], e["generation"]) for e in health if e["generation"] >= 0)
    before = [g for t, g in gens if t <= start_ms]
    within = [g for t, g in gens if start_ms < t <= end_ms]
    if not within:
        return 0
    return max(within) - (before[-1] if before else min(within))


def one_storm(bootstrap: str, shape: StormShape, workdir: Path, *, on: bool) -> dict[str, Any]:
    run = f"st{uuid.uuid4().hex[:6]}"
    topic, group = f"incident-storm.{'on' if on else 'off'}-{run}", f"storm-workers-{run}"
    ensure_topic(bootstrap, topic, shape.partitions)
    loop = ControlLoop.start(
        bootstrap, topic, run, workdir, policy_toml(shape), on=on,
        LAGPILOT_GROUP_STALL_S=str(shape.stall_s),
        LAGPILOT_STORM_WINDOW_S=str(shape.storm_window_s),
        LAGPILOT_GROUP_HEALTH_INTERVAL_MS="1000",
    )  # fmt: skip
    control, outcomes = loop.control, loop.outcomes
    reader = LagReader(bootstrap, {group}).start()
    ledger = Ledger(workdir / f"effects-{run}.sqlite")

    def pool_handle(msg: Any, ctx: Any) -> None:
        head = orjson.loads(msg.value().split(b"\n", 1)[0])
        time.sleep((shape.heavy_work_ms if head["heavy"] else shape.work_ms) / 1000)
        record(ctx, head, msg.partition())

    pool = (
        PoolWorker(
            pool=POOL,
            bootstrap=bootstrap,
            group=group,
            handler=pool_handle,
            max_workers=4,
            dedupe=ledger.path,
            control_topic=control,
            outcomes_topic=outcomes,
            commit_interval_s=0.2,
        )
        if on
        else None
    )
    member_args = ["--bootstrap", bootstrap, "--topic", topic, "--group", group,
                   "--control", control, "--outcomes", outcomes if on else "",
                   "--ledger", str(ledger.path), "--work-ms", str(shape.work_ms),
                   "--session-timeout-ms", str(shape.session_timeout_ms)]  # fmt: skip
    supervisor = Supervisor(member_args, shape.members, run, shape.restart_s, workdir)
    ids: dict[str, tuple[int, int]] = {}  # id -> (produced ms, partition)
    start_ms = end_ms = 0
    drained = False
    try:
        loop.wait_modelling()
        if pool is not None:
            pool.start()
        supervisor.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not reader.select(
            lambda e: e["event"] == "group_health" and len(e["members"]) == shape.members
        ):
            time.sleep(0.2)  # the clock starts once every member joined
        # idempotent: a retried produce on a loaded broker must not write a record twice (a
        # second copy has its own offset, so the workers would apply it a second time)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                             "enable.idempotence": True})  # fmt: skip
        t0 = time.monotonic()
        start_ms = int(time.time() * 1000 + shape.warmup_s * 1000)
        end_s = shape.warmup_s + shape.storm_s
        n = heavy = 0
        while (now_s := time.monotonic() - t0) < end_s:
            while n < int(now_s * shape.rate_per_s):
                mid = f"{run}-{n}"
                head = {"id": mid, "heavy": False, "produced_ms": int(time.time() * 1000)}
                producer.produce(topic, orjson.dumps(head) + b"\n" + b"x" * 256,
                                 partition=n % shape.partitions)  # fmt: skip
                ids[mid] = (head["produced_ms"], n % shape.partitions)
                n += 1
            if now_s >= shape.warmup_s and heavy <= (now_s - shape.warmup_s) / shape.heavy_every_s:
                mid = f"{run}-doc-{heavy}"
                head = {"id": mid, "heavy": True, "produced_ms": int(time.time() * 1000)}
                producer.produce(topic, orjson.dumps(head) + b"\n" + b"x" * 4096,
                                 partition=shape.heavy_partition)  # fmt: skip
                ids[mid] = (head["produced_ms"], shape.heavy_partition)
                heavy += 1
            producer.poll(0)
            time.sleep(0.01)
        producer.flush(30)
        end_ms = int(time.time() * 1000)
        if on:  # off, the heavy partition never drains: nothing to wait for
            deadline = time.monotonic() + shape.drain_s
            while time.monotonic() < deadline:
                if set(ids) <= {r[0] for r in ledger.rows()}:
                    drained = True
                    break
                time.sleep(0.5)
        else:
            time.sleep(3.0)
        time.sleep(1.0)
    finally:
        supervisor.stop()
        if pool is not None:
            pool.stop()
        reader.close()
        loop.stop()
    stopped_ms = int(time.time() * 1000)
    rows = ledger.rows()
    done = [r[0] for r in rows]
    missing = set(ids) - set(done)
    # a message never processed waited at least until the run stopped
    latency = np.array([r[4] - r[3] for r in rows] + [stopped_ms - ids[m][0] for m in missing],
                       dtype=np.float64)  # fmt: skip
    health = reader.select(lambda e: e["event"] == "group_health")
    events = reader.select(lambda e: e["event"] == "partition_lag")
    storms = [e for e in health if e["status"] == "STORM" and e["observed_at_ms"] >= start_ms]
    actions = loop.actions()
    reported = loop.reported() if on else []
    rebalances = _rebalances(health, start_ms, end_ms)
    minutes = max((end_ms - start_ms) / 60_000, 1e-9)
    handed_ms = sorted(
        o["at"]
        for o in reported
        if o.get("event") == "worker_outcome" and o.get("did") == "handoff_started"
    )
    after = _rebalances(health, handed_ms[0], end_ms) if handed_ms else None
    handed = [o for o in reported if o.get("event") == "worker_outcome"
              and o.get("did") == "handoff_started"]  # fmt: skip
    return {
        "drained": drained,
        "produced": len(ids),
        "processed": len(set(done)),
        "lost": len(missing),
        "lost_by_partition": {
            str(p): n
            for p in range(shape.partitions)
            if (n := sum(1 for m in missing if ids[m][1] == p))
        },
        "duplicates": len(done) - len(set(done)),
        "p50_ms": round(float(np.percentile(latency, 50)), 1) if len(latency) else None,
        "p99_ms": round(float(np.percentile(latency, 99)), 1) if len(latency) else None,
        "max_ms": round(float(latency.max()), 1) if len(latency) else None,
        "p99_lower_bound": bool(missing),
        "rebalances": rebalances,
        "rebalances_per_min": round(rebalances / minutes, 2),
        "storm_minutes": round(minutes, 3),
        "rebalances_after_handoff": after,
        "rebalances_per_min_after_handoff": round(
            after / max((end_ms - handed_ms[0]) / 60_000, 1e-9), 2
        )
        if handed_ms and after is not None
        else None,
        "deaths": len([d for d in supervisor.deaths if d[0] >= start_ms]),
        "deaths_at_ms": [d[0] - start_ms for d in supervisor.deaths],
        "storm_detected_ms": (min(e["observed_at_ms"] for e in storms) - start_ms)
        if storms
        else None,
        "handoff_started_ms": [o["at"] - start_ms for o in handed if isinstance(o.get("at"), int)],
        "max_time_lag_s": max((e["time_lag_s"] for e in events), default=0.0),
        "actions": [action_row(a, start_ms) for a in actions],
        "outcomes": outcome_rows(reported),
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
        "verdicts": verdict_rows(reported, start_ms),
        "generations": [
            [e["observed_at_ms"] - start_ms, e["generation"], e["status"]] for e in health
        ],
        "timeline": timeline(events, start_ms),
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
        "remedy": remedy_of(on["actions"]),
        "steps": steps,
        "causes": [a["cause"] for a in sorted(on["actions"], key=lambda a: a["at_ms"])],
        "detection_ms": on["storm_detected_ms"],
        "first_action_ms": min((a["at_ms"] for a in on["actions"]), default=None),
        "handoff_started_ms": on["handoff_started_ms"],
        "verified": verified_of(on),
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
        "lost": on["lost"],
        "duplicates": on["duplicates"],
        "off": {k: v for k, v in off.items() if k != "timeline"},
        "on": {k: v for k, v in on.items() if k != "timeline"},
        "shape": {k: getattr(shape, k) for k in shape.__dataclass_fields__},
        "targets": {
            "rebalance_ratio": 5,
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
