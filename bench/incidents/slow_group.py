"""The ``slow_group`` incident: inflow rises above the group's capacity on every partition.

A topic (``agents.slow_group.<arm>-<run>``) of ``partitions`` partitions is written evenly by
one producer (``agent-<run>-0``) at ``base_per_s`` records/s; from ``warmup_s`` the inflow
ramps over ``ramp_s`` to ``peak_per_s``, holds it for ``peak_s``, then falls back to
``base_per_s``. Each worker is a process (``bench.incidents.slow_member``: the worker SDK, one
handler thread, ``1000 / work_ms`` records/s) run by the worker supervisor users run, ``lagpilot
workers --group G --min 1 --max <partitions>``, with its shipped defaults otherwise; the
group starts with one, beside a ``PoolWorker`` of the policy's hand-off pool. The peak is
below what one worker per partition processes, so scaling to the partition count fixes the
group, and it lasts long enough for two polls of the baseline.

Two arms, each scaling the same supervisor:

- ``lagpilot``: the shipped policy acts; its ``scale_consumers`` reaches the supervisor on
  the run's control topic, and the supervisor reports the step (``worker_outcome``
  ``scaled``, outcome ``applied``), which starts the product's verification;
- ``poll30``: the policy is off; ``LagPoll`` (bench/support/keda_poll.py) polls the group's
  total lag every ``poll_interval_s`` as KEDA's Kafka scaler does by default and publishes
  ``min(partitions, ceil(total lag / 10))`` as a signed ``scale_consumers`` for the
  supervisor. The ramp starts ``poll_phase_s`` after one of its polls.

Reported per arm: the time to drain (the ramp's start to the backlog gone:
bench/support/drain.py), p50/p99/max latency, dropped, lost, duplicates, the worst time lag
and the supervisor's replicas over time; for lagpilot, every action judged against the
injected slow group and the product's verdicts. ``drain_ratio_vs_poll30`` = poll30's drain
/ lagpilot's (target >= 3).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from confluent_kafka import Producer

from actuators.workers import PoolWorker
from bench.support.control_loop import ControlLoop, both_arms, policy_config
from bench.support.drain import backlog_gone_ms
from bench.support.effects import record
from bench.support.harness import LagReader
from bench.support.judge import Injected, judge_run
from bench.support.keda_poll import POLL_INTERVAL_S, LagPoll
from bench.support.plots import action_lines, pyplot, time_lag_lines
from bench.support.swarm import Ledger, ensure_topic
from bench.support.verdicts import outcome_rows, remedy_of, timeline, verdict_rows

ROOT = Path(__file__).resolve().parents[2]
LAGPILOT = Path(sys.executable).parent / "lagpilot"  # the command users run


@dataclass(frozen=True)
class SlowShape:
    partitions: int = 4
    work_ms: float = 20.0  # per record: one worker processes 50 records/s
    base_per_s: float = 12.0  # all partitions together
    peak_per_s: float = 150.0  # 0.75x what one worker per partition processes (200/s)
    warmup_s: float = 20.0
    ramp_s: float = 5.0
    peak_s: float = 60.0  # two of the baseline's polls
    cooldown_s: float = 5.0
    poll_interval_s: float = POLL_INTERVAL_S
    # the ramp starts this long after one of the baseline's polls: half its interval, the
    # mean wait of an incident that starts at a random point of the poll cycle
    poll_phase_s: float = POLL_INTERVAL_S / 2
    late_s: float = 2.0  # a record that waited longer was part of the backlog
    settled_s: float = 5.0  # the backlog is gone once no record is late for this long
    drain_timeout_s: float = 240.0


def inflow_per_s(shape: SlowShape, t_s: float) -> float:
    """The topic's inflow at ``t_s`` seconds since the producers started."""
    s = shape
    if t_s < s.warmup_s:
        return s.base_per_s
    if t_s < s.warmup_s + s.ramp_s:
        return s.base_per_s + (s.peak_per_s - s.base_per_s) * (t_s - s.warmup_s) / s.ramp_s
    if t_s < s.warmup_s + s.ramp_s + s.peak_s:
        return s.peak_per_s
    return s.base_per_s


class _Producer:
    """The arm's one agent: the inflow schedule, every record it meant to send kept with the
    broker's acknowledgement (idempotent: a retried produce never writes a second copy)."""

    def __init__(self, bootstrap: str, topic: str, run: str, shape: SlowShape) -> None:
        self.topic, self.run_id, self.shape = topic, run, shape
        self.ids: dict[str, int] = {}  # id -> produced ms
        self.acked: set[str] = set()
        self._p = Producer({"bootstrap.servers": bootstrap, "client.id": f"agent-{run}-0",
                            "linger.ms": 5, "enable.idempotence": True})  # fmt: skip

    def _acked(self, mid: str) -> Any:
        def delivered(err: Any, _msg: Any) -> None:
            if err is None:
                self.acked.add(mid)

        return delivered

    def run(self, t0: float) -> None:
        s = self.shape
        end_s = s.warmup_s + s.ramp_s + s.peak_s + s.cooldown_s
        owed, n, last = 0.0, 0, 0.0
        while (now_s := time.monotonic() - t0) < end_s:
            owed += inflow_per_s(s, now_s) * (now_s - last)
            last = now_s
            while n < int(owed):
                mid, produced_ms = f"{self.run_id}-{n}", int(time.time() * 1000)
                head = {"id": mid, "heavy": False, "produced_ms": produced_ms}
                value = orjson.dumps(head) + b"\n" + b"x" * 256
                where = n % s.partitions
                self._p.produce(self.topic, value, partition=where, on_delivery=self._acked(mid))
                self.ids[mid] = produced_ms
                n += 1
            self._p.poll(0)
            time.sleep(0.01)
        self._p.flush(30)


def _supervisor(bootstrap: str, group: str, topic: str, loop: ControlLoop, ledger: Path,
                shape: SlowShape, log: Path) -> subprocess.Popen[bytes]:  # fmt: skip
    """``lagpilot workers`` for the group, reading the run's control topic and reporting on its
    outcomes topic; the signing key is the run's (ControlLoop sets it)."""
    member = [sys.executable, "-m", "bench.incidents.slow_member", "--bootstrap", bootstrap,
              "--topic", topic, "--control", loop.control, "--outcomes", loop.outcomes,
              "--ledger", str(ledger), "--work-ms", str(shape.work_ms)]  # fmt: skip
    cmd = [str(LAGPILOT), "workers", "--bootstrap", bootstrap, "--group", group,
           "--min", "1", "--max", str(shape.partitions), "--control-topic", loop.control,
           "--outcomes-topic", loop.outcomes, "--id", f"{loop.run}-workers",
           "--", *member]  # fmt: skip
    return subprocess.Popen(cmd, cwd=ROOT, stdout=open(log, "ab"), stderr=subprocess.STDOUT)


def _pool(bootstrap: str, group: str, loop: ControlLoop, ledger: Path,
          shape: SlowShape) -> PoolWorker | None:  # fmt: skip
    """The dedicated pool a team that ships ``hotspot.pool`` runs beside the group (it idles
    unless lagpilot hands a partition off), processing as the workers do."""
    name = policy_config(loop.policy).spread_pool
    if not name:
        return None

    def handle(msg: Any, ctx: Any) -> None:
        head = orjson.loads(msg.value().split(b"\n", 1)[0])
        time.sleep(shape.work_ms / 1000)
        record(ctx, head, msg.partition())

    return PoolWorker(pool=name, bootstrap=bootstrap, group=group, handler=handle,
                      max_workers=1, dedupe=ledger, control_topic=loop.control,
                      outcomes_topic=loop.outcomes, commit_interval_s=0.2)  # fmt: skip


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)  # it stops its worker processes in order
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def one_slow(bootstrap: str, shape: SlowShape, workdir: Path, *, on: bool) -> dict[str, Any]:
    """One arm: ``on``, lagpilot scales the supervisor; else the 30 s lag poll does."""
    run = f"sg{uuid.uuid4().hex[:6]}"
    arm = "lagpilot" if on else "poll30"
    topic, group = f"agents.slow_group.{arm}-{run}", f"slow-workers-{run}"
    ensure_topic(bootstrap, topic, shape.partitions)
    loop = ControlLoop.start(bootstrap, topic, run, workdir, on=on)
    reader = LagReader(bootstrap, {group}).start()
    ledger = Ledger(workdir / f"effects-{run}.sqlite")
    agent = _Producer(bootstrap, topic, run, shape)
    supervisor = _supervisor(bootstrap, group, topic, loop, ledger.path, shape,
                             workdir / f"workers-{run}.log")  # fmt: skip
    pool = _pool(bootstrap, group, loop, ledger.path, shape)
    poll: LagPoll | None = None
    ramp_ms = 0
    drained = False
    try:
        loop.wait_modelling()
        if pool is not None:
            pool.start()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not reader.select(
            lambda e: (
                e["event"] == "group_health"
                and sum(len(a["partitions"]) for m in e["members"] for a in m["assignment"])
                == shape.partitions
            )
        ):
            time.sleep(0.2)  # the clock starts once the first worker owns every partition
        t0 = time.monotonic()
        ramp_at = t0 + shape.warmup_s
        ramp_ms = int(time.time() * 1000 + shape.warmup_s * 1000)
        if not on:
            first = ramp_at - shape.poll_phase_s
            while first - shape.poll_interval_s >= t0:
                first -= shape.poll_interval_s
            poll = LagPoll(bootstrap, group, topic, shape.partitions, loop.control,
                           interval_s=shape.poll_interval_s, first_poll=first).start()  # fmt: skip
        agent.run(t0)
        deadline = time.monotonic() + shape.drain_timeout_s
        while time.monotonic() < deadline:
            if agent.acked <= {r[0] for r in ledger.rows()}:
                drained = True
                break
            time.sleep(0.5)
        time.sleep(1.0)
    finally:
        if poll is not None:
            poll.stop()
        if pool is not None:
            pool.stop()
        _stop(supervisor)
        reader.close()
        loop.stop()
    reported = loop.reported()
    rows = ledger.rows()
    done = [r[0] for r in rows]
    done_ms = {r[0]: r[4] for r in rows}
    gone = backlog_gone_ms([(agent.ids[m], done_ms.get(m)) for m in agent.acked], ramp_ms,
                           late_s=shape.late_s, settled_s=shape.settled_s)  # fmt: skip
    latency = np.array([r[4] - r[3] for r in rows], dtype=np.float64)
    events = reader.select(lambda e: e["event"] == "partition_lag")
    detected = [e for e in events if e["status"] != "OK" and e["observed_at_ms"] >= ramp_ms]
    scaled = [[o["at"] - ramp_ms, o.get("replicas")] for o in reported
              if o.get("event") == "worker_outcome" and o.get("did") == "scaled"]  # fmt: skip
    # what was injected: inflow above the whole group's capacity, on every partition
    slow = Injected("slow_group", (f"group:{group}", f"topic:{topic}"))
    judged = judge_run(loop.actions(), reported, [slow], ramp_ms) if on else {"actions": []}
    return {
        "arm": arm,
        "policy_sha256": loop.policy_sha256,
        "drained": drained,
        "drain_s": round((gone - ramp_ms) / 1000, 2) if gone is not None else None,
        "produced": len(agent.acked),
        "dropped": len(set(agent.ids) - agent.acked),  # never acknowledged: given up
        "processed": len(set(done)),
        "lost": len(agent.acked - set(done)),
        "duplicates": len(done) - len(set(done)),
        "p50_ms": round(float(np.percentile(latency, 50)), 1) if len(latency) else None,
        "p99_ms": round(float(np.percentile(latency, 99)), 1) if len(latency) else None,
        "max_ms": round(float(latency.max()), 1) if len(latency) else None,
        "max_time_lag_s": max((e["time_lag_s"] for e in events), default=0.0),
        "detection_ms": (min(e["_received_ms"] for e in detected) - ramp_ms) if detected else None,
        "replicas_at_ms": scaled,
        "polls": [[t - ramp_ms, lag, n] for t, lag, n in poll.polls] if poll else [],
        **judged,
        "outcomes": outcome_rows(reported),
        "verdicts": verdict_rows(reported, ramp_ms),
        "timeline": timeline(events, ramp_ms),
    }


def _without(run: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in run.items() if k not in keys}


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


def slow_group(
    bootstrap: str, shape: SlowShape, workdir: Path, *, parallel: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    poll30, on = both_arms(one_slow, bootstrap, shape, workdir, parallel=parallel)
    arms = {"poll30": poll30, "lagpilot": on}
    summary = {
        "policy_sha256": on["policy_sha256"],
        "remedy": remedy_of(on["actions"]),
        "causes": sorted({a["cause"] for a in on["actions"] if a["cause"]}),
        "detection_ms": on["detection_ms"],
        "first_action_ms": min((a["at_ms"] for a in on["actions"]), default=None),
        "actions": on["actions"],
        "wrong_actions": on["wrong_actions"],
        "wrong_undos": on["wrong_undos"],
        "applied_actions": on["applied_actions"],
        "verified": on["verified"],
        "verdicts": on["verdicts"],
        "poll30_drain_s": poll30["drain_s"],
        "on_drain_s": on["drain_s"],
        "drain_ratio_vs_poll30": _ratio(poll30["drain_s"], on["drain_s"]),
        "poll30_p99_ms": poll30["p99_ms"],
        "on_p99_ms": on["p99_ms"],
        "replicas_at_ms": {k: r["replicas_at_ms"] for k, r in arms.items()},
        "poll30_polls": poll30["polls"],
        "dropped": poll30["dropped"] + on["dropped"],  # either arm's: its figures lack them
        "lost": on["lost"],
        "duplicates": on["duplicates"],
        "arms": {k: _without(r, "timeline", "actions") for k, r in arms.items()},
        "shape": {k: getattr(shape, k) for k in shape.__dataclass_fields__},
        "targets": {
            "drain_ratio_vs_poll30": 3,
            "verified": True,
            "wrong_actions": 0,
            "lost": 0,
            "duplicates": 0,
        },
    }
    return summary, arms


def plot_slow_group(runs: dict[str, dict[str, Any]], out: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), sharey=True)
    for ax, name in zip(axes, ("poll30", "lagpilot"), strict=True):
        res = runs[name]
        time_lag_lines(ax, res["timeline"], lw=1.2)
        action_lines(ax, res["actions"])
        for t_ms, _lag, _n in res["polls"]:
            ax.axvline(t_ms / 1000, color="tab:gray", lw=0.6, ls=":")
        steps = sorted((t / 1000, n) for t, n in res["replicas_at_ms"] if n is not None)
        if steps:
            twin = ax.twinx()
            xs, ys = zip(*steps, strict=True)
            twin.step(xs, ys, where="post", color="tab:blue", lw=1.0)
            twin.set_ylabel("worker processes")
        drain = res["drain_s"]
        ax.set_title(f"{name}: drained {drain if drain is not None else '-'} s after the ramp, "
                     f"p99 {(res['p99_ms'] or 0) / 1000:.1f} s")  # fmt: skip
        ax.set_xlabel("seconds since the inflow began to rise")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
    axes[0].set_ylabel("time lag per partition (s)")
    fig.suptitle("slow_group: the same supervisor scaled by lagpilot vs a 30 s lag poll (green: "
                 "scale_consumers, grey dotted: a poll, blue: worker processes)")  # fmt: skip
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
