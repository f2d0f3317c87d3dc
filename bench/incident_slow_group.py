"""The ``slow_group`` incident: inflow rises above the group's capacity on every partition.

A topic (``agents.slow_group.<arm>-<run>``) of ``partitions`` partitions is written evenly
by one producer (``agent-<run>-0``) at ``base_per_s`` records/s; from
``warmup_s`` the inflow ramps over ``ramp_s`` to ``peak_per_s`` (above what even one worker
per partition can process), holds it for ``peak_s``, then falls back to ``base_per_s``.
Each worker (worker SDK, one handler thread: a pod with one CPU) processes
``1000 / work_ms`` records/s; the group starts with one worker.

Off: the pipeline models lag, the policy is off; the group keeps its one worker. On: the
shipped policy runs as it is (ladder ``slow_group = [scale_consumers,
add_partitions:recommend]``), the actuator records the ``scale_consumers`` hint, and a
scripted autoscaler (``Autoscaler``) adds one worker every ``scale_period_s`` while the
group has fewer workers than the latest hint, as an HPA fed by lagpilot's KEDA metric
would (an HPA adds pods per period; never above the partition count, as lagpilot caps the
hint there). Once the hint reached the partition count and the lag still grows, the
ladder's next step recommends ``add_partitions``.

Reported per run: p50/p99/max latency, dropped, lost and duplicates, the worst time lag,
workers over time, and for the on run every action judged against the injected slow
group (bench/support/judge.py), its outcomes and the product's verdicts.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from confluent_kafka import Consumer, Producer, TopicPartition

from actuators.workers import Worker
from bench.support.control_loop import ControlLoop, both_arms
from bench.support.harness import LagReader
from bench.support.judge import Injected, judge_run
from bench.support.plots import action_lines, pyplot, time_lag_lines
from bench.support.swarm import Ledger, ensure_topic
from bench.support.verdicts import outcome_rows, remedy_of, timeline, verdict_rows


@dataclass(frozen=True)
class SlowShape:
    partitions: int = 3
    work_ms: float = 20.0  # per record: one worker processes 50 records/s
    base_per_s: float = 12.0  # all partitions together
    peak_per_s: float = 195.0  # 1.3x what one worker per partition processes
    warmup_s: float = 10.0
    ramp_s: float = 8.0
    peak_s: float = 12.0
    cooldown_s: float = 4.0
    scale_period_s: float = 2.0  # the autoscaler adds at most one worker this often


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


class Autoscaler:
    """Plays the HPA: reads ``scale_consumers`` actions of ``group`` on the control topic and
    adds one worker per ``period_s`` while there are fewer workers than the latest hint."""

    def __init__(self, bootstrap: str, control: str, group: str, period_s: float,
                 add: Any, count: Any) -> None:  # fmt: skip
        self.group, self.period_s, self._add, self._count = group, period_s, add, count
        self.hint = 0
        self.hints: list[tuple[int, int]] = []  # (received ms, replicas)
        self.scaled: list[tuple[int, int]] = []  # (ms, workers after the step)
        self._stop = threading.Event()
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "enable.auto.commit": False,
                                   "group.id": f"autoscaler-{uuid.uuid4().hex[:6]}"})  # fmt: skip
        self._consumer.assign([TopicPartition(control, 0, 0)])
        self._thread = threading.Thread(target=self._run, name="autoscaler", daemon=True)

    def start(self) -> Autoscaler:
        self._thread.start()
        return self

    def _run(self) -> None:
        last = 0.0
        while not self._stop.is_set():
            msg = self._consumer.poll(0.1)
            if msg is not None and not msg.error():
                a = orjson.loads(msg.value())
                if (a.get("event") == "action" and a.get("type") == "scale_consumers"
                        and a["params"].get("group") == self.group):  # fmt: skip
                    self.hint = int(a["params"]["replicas"])
                    self.hints.append((int(time.time() * 1000), self.hint))
            now = time.monotonic()
            if self._count() < self.hint and now - last >= self.period_s:
                last = now
                self._add()
                self.scaled.append((int(time.time() * 1000), self._count()))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()


def one_slow(bootstrap: str, shape: SlowShape, workdir: Path, *, on: bool) -> dict[str, Any]:
    run = f"sg{uuid.uuid4().hex[:6]}"
    topic, group = f"agents.slow_group.{'on' if on else 'off'}-{run}", f"slow-workers-{run}"
    ensure_topic(bootstrap, topic, shape.partitions)
    loop = ControlLoop.start(bootstrap, topic, run, workdir, on=on)
    control, outcomes = loop.control, loop.outcomes
    reader = LagReader(bootstrap, {group}).start()
    ledger = Ledger(workdir / f"effects-{run}.sqlite")
    workers: list[Worker] = []
    workers_at: list[tuple[int, int]] = []

    def handle(msg: Any, ctx: Any) -> None:
        head = orjson.loads(msg.value().split(b"\n", 1)[0])
        time.sleep(shape.work_ms / 1000)
        ctx.once_sql(lambda db: db.execute(
            "INSERT INTO effects VALUES (?, ?, ?, ?, ?)",
            (head["id"], msg.partition(), 0, head["produced_ms"], int(time.time() * 1000)),
        ))  # fmt: skip

    def add_worker() -> None:
        w = Worker(bootstrap=bootstrap, group=group, topics=[topic], handler=handle,
                   max_workers=1, dedupe=ledger.path, control_topic=control,
                   outcomes_topic=outcomes if on else None,
                   instance_id=f"{run}-w{len(workers)}", commit_interval_s=0.2)  # fmt: skip
        w.start()
        workers.append(w)
        workers_at.append((int(time.time() * 1000), len(workers)))

    scaler = (
        Autoscaler(
            bootstrap, control, group, shape.scale_period_s, add_worker, lambda: len(workers)
        )
        if on
        else None
    )
    ids: set[str] = set()
    acked: set[str] = set()

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked.add(orjson.loads(msg.value().split(b"\n", 1)[0])["id"])

    drained = False
    start_ms = 0
    try:
        loop.wait_modelling()
        add_worker()
        deadline = time.monotonic() + 60
        while len(workers[0].assignment()) < shape.partitions and time.monotonic() < deadline:
            time.sleep(0.2)
        if scaler is not None:
            scaler.start()
        # idempotent: a retried produce on a loaded broker must not write a record twice (a
        # second copy has its own offset, so the workers would apply it a second time)
        producer = Producer({"bootstrap.servers": bootstrap, "client.id": f"agent-{run}-0",
                             "linger.ms": 5, "enable.idempotence": True})  # fmt: skip
        t0 = time.monotonic()
        start_ms = int(time.time() * 1000 + shape.warmup_s * 1000)  # the ramp begins
        end_s = shape.warmup_s + shape.ramp_s + shape.peak_s + shape.cooldown_s
        owed, n, last = 0.0, 0, 0.0
        while (now_s := time.monotonic() - t0) < end_s:
            owed += inflow_per_s(shape, now_s) * (now_s - last)
            last = now_s
            while n < int(owed):
                mid = f"{run}-{n}"
                head = {"id": mid, "produced_ms": int(time.time() * 1000)}
                producer.produce(topic, orjson.dumps(head) + b"\n" + b"x" * 256,
                                 partition=n % shape.partitions, on_delivery=delivered)  # fmt: skip
                ids.add(mid)
                n += 1
            producer.poll(0)
            time.sleep(0.01)
        producer.flush(30)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if acked <= {r[0] for r in ledger.rows()}:
                drained = True
                break
            time.sleep(0.5)
        time.sleep(1.0)
    finally:
        if scaler is not None:
            scaler.stop()
        for w in workers:
            w.stop()
        reader.close()
        loop.stop()
    rows = ledger.rows()
    done = [r[0] for r in rows]
    latency = np.array([r[4] - r[3] for r in rows], dtype=np.float64)
    events = reader.select(lambda e: e["event"] == "partition_lag")
    detected = [e for e in events if e["status"] != "OK" and e["observed_at_ms"] >= start_ms]
    reported = loop.reported() if on else []
    # what was injected: inflow above the whole group's capacity, on every partition
    slow = Injected("slow_group", (f"group:{group}", f"topic:{topic}"))
    return {
        "policy_sha256": loop.policy_sha256,
        "drained": drained,
        "produced": len(acked),
        "dropped": len(ids - acked),  # never acknowledged: the harness gave them up
        "processed": len(set(done)),
        "lost": len(acked - set(done)),
        "duplicates": len(done) - len(set(done)),
        "p50_ms": round(float(np.percentile(latency, 50)), 1) if len(latency) else None,
        "p99_ms": round(float(np.percentile(latency, 99)), 1) if len(latency) else None,
        "max_ms": round(float(latency.max()), 1) if len(latency) else None,
        "max_time_lag_s": max((e["time_lag_s"] for e in events), default=0.0),
        "detection_ms": (min(e["_received_ms"] for e in detected) - start_ms) if detected else None,
        "workers": len(workers),
        "workers_at_ms": [[t - start_ms, k] for t, k in workers_at],
        "hints_at_ms": [[t - start_ms, r] for t, r in scaler.hints] if scaler else [],
        **judge_run(loop.actions(), reported, [slow], start_ms),
        "outcomes": outcome_rows(reported),
        "verdicts": verdict_rows(reported, start_ms),
        "timeline": timeline(events, start_ms),
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


def slow_group(
    bootstrap: str, shape: SlowShape, workdir: Path, *, parallel: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    off, on = both_arms(one_slow, bootstrap, shape, workdir, parallel=parallel)
    remedy = remedy_of(on["actions"])
    adds = [a for a in on["actions"] if a["type"] == "add_partitions"]
    scaled = [w for w in on["workers_at_ms"] if w[1] > 1]
    summary = {
        "remedy": remedy,
        "causes": sorted({a["cause"] for a in on["actions"] if a["cause"]}),
        "detection_ms": on["detection_ms"],
        "first_action_ms": min((a["at_ms"] for a in on["actions"]), default=None),
        "policy_sha256": on["policy_sha256"],
        "actions": on["actions"],
        "wrong_actions": on["wrong_actions"],
        "wrong_undos": on["wrong_undos"],
        "applied_actions": on["applied_actions"],
        "verified": on["verified"],
        "verdicts": on["verdicts"],
        "off_p99_ms": off["p99_ms"],
        "on_p99_ms": on["p99_ms"],
        "ratio": _ratio(off["p99_ms"], on["p99_ms"]),
        "off_max_time_lag_s": off["max_time_lag_s"],
        "on_max_time_lag_s": on["max_time_lag_s"],
        "dropped": off["dropped"] + on["dropped"],  # either arm's: its figures lack them
        "lost": on["lost"],
        "duplicates": on["duplicates"],
        "workers_off": off["workers"],
        "workers_on": on["workers"],
        "scaled_at_ms": [w[0] for w in scaled],
        "hints": on["hints_at_ms"],
        "add_partitions": [
            {"at_ms": a["at_ms"], "mode": a["mode"], "params": a["params"]} for a in adds
        ],
        "add_partitions_at_partition_count": bool(adds)
        and on["workers"] >= shape.partitions
        and all(a["params"]["current"] == shape.partitions for a in adds),
        "off": {k: v for k, v in off.items() if k not in ("timeline", "actions")},
        "on": {k: v for k, v in on.items() if k not in ("timeline", "actions")},
        "shape": {k: getattr(shape, k) for k in shape.__dataclass_fields__},
        "targets": {
            "remedy": ["scale_consumers", "add_partitions"],
            "add_partitions_mode": "recommend",
            "wrong_actions": 0,
            "lost": 0,
            "duplicates": 0,
        },
    }
    return summary, {"off": off, "on": on}


def _action_color(action: dict[str, Any]) -> str:
    return "tab:green" if action["type"] == "scale_consumers" else "tab:red"


def plot_slow_group(runs: dict[str, dict[str, Any]], out: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), sharey=True)
    for ax, name in zip(axes, ("off", "on"), strict=True):
        res = runs[name]
        time_lag_lines(ax, res["timeline"], lw=1.2)
        action_lines(ax, res["actions"], color=_action_color)
        for t_ms, k in res["workers_at_ms"]:
            if k > 1:
                ax.axvline(t_ms / 1000, color="tab:blue", lw=0.8, ls=":")
        ax.set_title(f"lagpilot {name}: p99 {(res['p99_ms'] or 0) / 1000:.1f} s, "
                     f"workers {res['workers']}")  # fmt: skip
        ax.set_xlabel("seconds since the inflow began to rise")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
    axes[0].set_ylabel("time lag per partition (s)")
    fig.suptitle("slow_group: inflow above capacity (green: scale_consumers, blue dotted: a "
                 "worker added, red: add_partitions recommended)")  # fmt: skip
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
