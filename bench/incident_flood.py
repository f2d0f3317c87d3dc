"""The ``flood`` incident: one of several producers floods a topic beyond its consumers.

``producers`` agents (``RateProducer``, the SDK's producer wrapper, client ids
``<run>-agent-<i>``) each write ``rate_per_s`` records of ``record_bytes`` to one topic; from
``warmup_s``, agent 0 writes ``flood_factor`` times that for ``flood_s``. Worker SDK workers
(``max_workers`` threads, ``work_ms`` a record) can process less than the flood. Off: the
pipeline models lag, the policy is off. On: the policy runs in act mode with a generated
policy file (diagnosis on: ``inflow_burst`` -> ``throttle_producer``) whose ``[producers]``
map names every agent as a writer of the topic (the fallback for producers that do not
report rates) and whose allow-list admits them; the pipeline reads the run's producer rates
topic (``LAGPILOT_PRODUCERS_TOPIC``), so the throttle goes to the client whose rate rose,
and the run's outcomes topic (``LAGPILOT_OUTCOMES_TOPIC``), so it verifies the throttle; the
actuator applies quotas through the Kafka protocol, leased.

Reported per run: the worst time lag, p99 latency, lost and duplicates, each producer's
achieved rate before and during the flood, and, for the on run, which client ids were
throttled, how often each throttle was renewed, and whether it was released.
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

from actuators.workers import RateProducer, Worker
from bench.support.control_loop import ControlLoop, both_arms, read_topic
from bench.support.control_loop import policy_toml as policy_toml_of
from bench.support.harness import LagReader
from bench.support.plots import action_lines, pyplot, time_lag_lines
from bench.support.swarm import Ledger, ensure_topic
from bench.support.verdicts import timeline, verdicts_by_target, verified_of


@dataclass(frozen=True)
class FloodShape:
    partitions: int = 6
    producers: int = 3
    rate_per_s: float = 100.0  # each producer, records/s, before and after the flood
    record_bytes: int = 1024
    flood_factor: float = 10.0  # agent 0 writes this many times its rate during the flood
    warmup_s: float = 10.0
    flood_s: float = 30.0
    cooldown_s: float = 15.0
    work_ms: float = 8.0  # per record, in the workers
    max_workers: int = 4  # worker threads: capacity ~ max_workers / work_ms
    time_lag_s: float = 1.0  # the policy's entry threshold
    lease_s: float = 8.0


def policy_toml(shape: FloodShape, topic: str, client_ids: list[str], prefix: str) -> str:
    calm_bytes = int(shape.rate_per_s * shape.record_bytes)
    producers = "\n".join(f'"{c}" = ["{topic}"]' for c in client_ids)
    extra = f"""
[throttle]
start_bytes_per_s = {calm_bytes * 2}
floor_bytes_per_s = {calm_bytes}
step_ratio = 0.5
lease_s = {shape.lease_s}

[producers]
{producers}
"""
    return policy_toml_of(version="incident-flood", time_lag_s=shape.time_lag_s,
                          enabled=["throttle_producer", "release_producer"],
                          throttle_client_ids=[f"{prefix}*"], extra=extra)  # fmt: skip


class _Agents:
    """The producers: paced per second, counting what each one got written per second."""

    def __init__(self, bootstrap: str, topic: str, rates_topic: str, shape: FloodShape,
                 run: str) -> None:  # fmt: skip
        self.shape, self.topic = shape, topic
        self.client_ids = [f"{run}-agent-{i}" for i in range(shape.producers)]
        self.producers = [
            RateProducer({"bootstrap.servers": bootstrap, "client.id": c, "linger.ms": 5,
                          "enable.idempotence": True,  # no second copy of a retried record
                          "queue.buffering.max.messages": 2000}, rates_topic=rates_topic)
            for c in self.client_ids
        ]  # fmt: skip
        self.ids: set[str] = set()
        self.per_second: list[dict[str, int]] = []  # [second][client id] -> records written
        self.flood_start_ms = 0
        self.flood_end_ms = 0
        self._lock = threading.Lock()

    def _one(self, i: int, t0: float, end_s: float) -> None:
        p, client = self.producers[i], self.client_ids[i]
        owed = 0.0  # records due so far: the rate integrated over the real elapsed time
        n = 0
        pad = b"x" * self.shape.record_bytes
        last = time.monotonic() - t0
        while (now_s := time.monotonic() - t0) < end_s:
            s = self.shape
            flooding = i == 0 and s.warmup_s <= now_s < s.warmup_s + s.flood_s
            rate = s.rate_per_s * (s.flood_factor if flooding else 1.0)
            owed += rate * (now_s - last)
            last = now_s
            while n < int(owed):
                mid = f"{client}-{n}"
                head = {"id": mid, "produced_ms": int(time.time() * 1000),
                        "work_ms": self.shape.work_ms, "heavy": flooding}  # fmt: skip
                try:
                    p.produce(self.topic, value=orjson.dumps(head) + b"\n" + pad, key=mid.encode())
                except BufferError:  # throttled: the client's queue is full, wait for it
                    p.poll(0.05)
                    owed = n  # what could not be written is not owed later
                    break
                n += 1
                second = int(now_s)
                with self._lock:
                    self.ids.add(mid)
                    while len(self.per_second) <= second:
                        self.per_second.append({})
                    self.per_second[second][client] = self.per_second[second].get(client, 0) + 1
            p.poll(0)
            time.sleep(0.01)
        p.flush(30)

    def run(self) -> None:
        s = self.shape
        t0 = time.monotonic()
        end_s = s.warmup_s + s.flood_s + s.cooldown_s
        self.flood_start_ms = int(time.time() * 1000 + s.warmup_s * 1000)
        self.flood_end_ms = self.flood_start_ms + int(s.flood_s * 1000)
        threads = [threading.Thread(target=self._one, args=(i, t0, end_s), daemon=True)
                   for i in range(s.producers)]  # fmt: skip
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for p in self.producers:
            p.close()

    def rates(self) -> dict[str, dict[str, float]]:
        """Each client's mean records/s before the flood and during it (edges left out)."""
        s = self.shape
        before = range(2, int(s.warmup_s))
        during = range(int(s.warmup_s) + 2, int(s.warmup_s + s.flood_s))
        out: dict[str, dict[str, float]] = {}

        def mean(client: str, seconds: range) -> float:
            n = len(self.per_second)
            vals = [self.per_second[t].get(client, 0) for t in seconds if t < n]
            return round(float(np.mean(vals)), 1) if vals else 0.0

        for c in self.client_ids:
            out[c] = {"before_per_s": mean(c, before), "during_per_s": mean(c, during)}
        return out


def one_flood(bootstrap: str, shape: FloodShape, workdir: Path, *, on: bool) -> dict[str, Any]:
    run = f"fl{uuid.uuid4().hex[:6]}"
    topic, group = f"incident-flood.{'on' if on else 'off'}-{run}", f"flood-workers-{run}"
    rates_topic = f"lagpilot.producers.{run}"
    ensure_topic(bootstrap, topic, shape.partitions)
    ensure_topic(bootstrap, rates_topic, 1)
    agents = _Agents(bootstrap, topic, rates_topic, shape, run)
    loop = ControlLoop.start(bootstrap, topic, run, workdir,
                             policy_toml(shape, topic, agents.client_ids, f"{run}-agent-"),
                             on=on, LAGPILOT_PRODUCERS_TOPIC=rates_topic)  # fmt: skip
    control, outcomes = loop.control, loop.outcomes
    reader = LagReader(bootstrap, {group}).start()
    ledger = Ledger(workdir / f"effects-{run}.sqlite")

    def handle(msg: Any, ctx: Any) -> None:
        head = orjson.loads(msg.value().split(b"\n", 1)[0])
        time.sleep(head["work_ms"] / 1000)
        ctx.once_sql(lambda db: db.execute(
            "INSERT INTO effects VALUES (?, ?, ?, ?, ?)",
            (head["id"], msg.partition(), int(head["heavy"]), head["produced_ms"],
             int(time.time() * 1000)),
        ))  # fmt: skip

    worker = Worker(bootstrap=bootstrap, group=group, topics=[topic], handler=handle,
                    max_workers=shape.max_workers, dedupe=ledger.path, control_topic=control,
                    outcomes_topic=outcomes if on else None, instance_id=f"{run}-w",
                    commit_interval_s=0.2)  # fmt: skip
    drained = False
    try:
        loop.wait_modelling()
        worker.start()
        deadline = time.monotonic() + 60
        while len(worker.assignment()) < shape.partitions and time.monotonic() < deadline:
            time.sleep(0.2)  # the clock starts once the group owns every partition
        agents.run()
        deadline = time.monotonic() + shape.flood_s * shape.flood_factor + 60
        while time.monotonic() < deadline:
            if agents.ids <= {r[0] for r in ledger.rows()}:
                drained = True
                break
            time.sleep(0.5)
        time.sleep(1.0)
    finally:
        worker.stop()
        reader.close()
        loop.stop()
    rows = ledger.rows()
    ids = [r[0] for r in rows]
    latency = np.array([r[4] - r[3] for r in rows], dtype=np.float64)
    start = agents.flood_start_ms
    events = reader.select(lambda e: e["event"] == "partition_lag")
    detected = [e for e in events if e["status"] != "OK" and e["observed_at_ms"] >= start]
    actions = loop.actions()
    reported_outcomes = loop.reported() if on else []
    results = [o for o in reported_outcomes if o.get("event") == "outcome"]
    verifications = [
        {k: v.get(k) for k in ("result", "action_type", "target", "cause", "step", "why",
                               "time_lag_at_apply_s", "time_lag_now_s")}
        | {"at_ms": v["at"] - start}
        for v in reported_outcomes if v.get("event") == "verification"
    ]  # fmt: skip
    throttles = [a for a in actions if a["type"] == "throttle_producer"]
    by_target: dict[str, int] = {}
    for a in throttles:
        by_target[a["params"]["name"]] = by_target.get(a["params"]["name"], 0) + 1
    released = sorted({a["params"]["name"] for a in actions if a["type"] == "release_producer"})
    reported = read_topic(bootstrap, rates_topic)
    return {
        "drained": drained,
        "produced": len(agents.ids),
        "processed": len(set(ids)),
        "lost": len(agents.ids - set(ids)),
        "duplicates": len(ids) - len(set(ids)),
        "p50_ms": round(float(np.percentile(latency, 50)), 1) if len(latency) else None,
        "p99_ms": round(float(np.percentile(latency, 99)), 1) if len(latency) else None,
        "max_ms": round(float(latency.max()), 1) if len(latency) else None,
        "max_time_lag_s": max((e["time_lag_s"] for e in events), default=0.0),
        "detection_ms": (min(e["_received_ms"] for e in detected) - start) if detected else None,
        "actions": [
            {
                "at_ms": a["issued_at"] - start,
                "type": a["type"],
                "target": a["target"],
                "mode": a["mode"],
                "cause": a["reason"].get("cause"),
            }
            for a in actions
        ],
        "outcomes": [
            {"result": o["result"], "type": o.get("action_type"), "target": o.get("target")}
            for o in results
        ],
        "verifications": verifications,
        "throttled": sorted(by_target),
        "throttle_actions_per_client": by_target,
        "released": released,
        "producer_rates": agents.rates(),
        "reported_rates_events": len(reported),
        "flooder": agents.client_ids[0],
        "timeline": timeline(events, start),
        "rates_timeline": agents.per_second,
        "client_ids": agents.client_ids,
        "warmup_s": shape.warmup_s,
    }


def flood(
    bootstrap: str, shape: FloodShape, workdir: Path, *, parallel: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    off, on = both_arms(one_flood, bootstrap, shape, workdir, parallel=parallel)
    others = [c for c in on["client_ids"] if c != on["flooder"]]
    kept = {c: round(on["producer_rates"][c]["during_per_s"] / shape.rate_per_s, 3) for c in others}
    first = min((a["at_ms"] for a in on["actions"]), default=None)
    seen: list[str] = []
    for a in sorted(on["actions"], key=lambda a: a["at_ms"]):
        if a["type"] not in seen:
            seen.append(a["type"])
    summary = {
        "remedy": seen,
        "detection_ms": on["detection_ms"],
        "first_action_ms": first,
        "verified": verified_of(on["actions"], on["verifications"]),
        "verdicts": verdicts_by_target(on["actions"], on["verifications"]),
        "cause": sorted({a["cause"] for a in on["actions"] if a.get("cause")}),
        "off_p99_ms": off["p99_ms"],
        "on_p99_ms": on["p99_ms"],
        "ratio": round(off["p99_ms"] / on["p99_ms"], 2) if off["p99_ms"] and on["p99_ms"] else None,
        "off_max_time_lag_s": off["max_time_lag_s"],
        "on_max_time_lag_s": on["max_time_lag_s"],
        "time_lag_ratio": round(off["max_time_lag_s"] / on["max_time_lag_s"], 2)
        if on["max_time_lag_s"]
        else None,
        "lost": on["lost"],
        "duplicates": on["duplicates"],
        "flooder": on["flooder"],
        "throttled": on["throttled"],
        "only_flooder_throttled": on["throttled"] == [on["flooder"]],
        "throttle_renewals": {c: n - 1 for c, n in on["throttle_actions_per_client"].items()},
        "released": on["released"],
        "others_rate_kept": kept,
        "others_within_10pct": all(abs(v - 1.0) <= 0.10 for v in kept.values()) if kept else None,
        "off": {k: v for k, v in off.items() if k not in ("timeline", "rates_timeline")},
        "on": {k: v for k, v in on.items() if k not in ("timeline", "rates_timeline")},
        "shape": {k: getattr(shape, k) for k in shape.__dataclass_fields__},
        "targets": {
            "time_lag_ratio": 5,
            "only_flooder_throttled": True,
            "others_within_10pct": True,
            "lost": 0,
            "duplicates": 0,
        },
    }
    return summary, {"off": off, "on": on}


def plot_flood(runs: dict[str, dict[str, Any]], out: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(13, 7), sharex="col")
    for col, name in enumerate(("off", "on")):
        res = runs[name]
        ax = axes[0][col]
        time_lag_lines(ax, res["timeline"])
        action_lines(ax, res["actions"], lw=0.6)
        ax.set_title(f"lagpilot {name}: worst time lag {res['max_time_lag_s']:.1f} s")
        ax.set_ylabel("time lag (s)")
        ax.grid(alpha=0.3)
        ax = axes[1][col]
        warm = res["warmup_s"]
        for c in res["client_ids"]:
            ys = [sec.get(c, 0) for sec in res["rates_timeline"]]
            xs = [t - warm for t in range(len(ys))]
            ax.plot(xs, ys, label=c.split("-", 1)[1] + (" (floods)" if c == res["flooder"] else ""))
        ax.set_ylabel("records/s written")
        ax.set_xlabel("seconds since the flood began")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("flood: one producer floods (top: time lag per partition; bottom: producer rates)")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
