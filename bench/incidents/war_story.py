"""The war story: the same avalanche twice, lagpilot's balancer off and on, in one run.

Each run gets a fresh topic (``agents.perception.<arm>-<run>``), consumer group and control
topic. Off: the pipeline models lag (for the plot and the detection time) but the policy is
off, so nothing acts. On: the pipeline runs the shipped policy, ``deploy/policy.default.toml``
as it is, and the actuator runs; the workers (worker SDK, with a ``PoolWorker`` of the
policy's hand-off pool) obey what it sends for the hot partitions. Both runs wait until
every produced message has been processed.

Reported: P50/P99/max end-to-end latency, worst time lag, detection time (avalanche onset
to the first non-OK status of a hot partition on lagpilot.lag), actions taken, messages
lost and duplicate side effects, and every action judged against the injected hotspot
(bench/support/judge.py: ``wrong_actions``, ``applied_actions``, ``verified``). Writes
``bench/results/war_story.json`` (``off_p99_ms``, ``on_p99_ms``, ``ratio`` = off/on,
``lost``, ``duplicates``, ``detection_ms``, ``policy_sha256``) and
``bench/results/war_story.png`` (time lag per partition over time, off vs on).
Targets: ratio >= 10, lost = 0, duplicates = 0, detection < 1 s. ``--group-protocol``:
the workers' group protocol (``classic``, the SDK's default, or ``consumer``: KIP-848),
recorded as ``group_protocol`` with, under ``consumer``, the broker's session and heartbeat
(``group_settings``).

    .venv/bin/python -m bench.incidents.war_story [--partitions 16] [--hot 4,11] [--producers 50]
        [--rate 250] [--heavy-rate 10] [--heavy-work-ms 150] [--avalanche-s 30]
        [--group-protocol classic|consumer] [--smoke]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.support import broker
from bench.support.control_loop import ControlLoop, policy_config
from bench.support.group_protocol import add_flag, broker_group_settings
from bench.support.harness import LagReader
from bench.support.judge import Injected, judge_run, partition_targets
from bench.support.plots import action_lines, pyplot, time_lag_lines
from bench.support.results import run_stamp, write_result
from bench.support.swarm import Swarm, SwarmConfig, ensure_topic
from bench.support.verdicts import p99_tail, timeline

ROOT = Path(__file__).resolve().parents[2]


def one_run(
    cfg: SwarmConfig,
    balancer: bool,
    workdir: Path,
    log: Any = print,
    view: Any = None,
    *,
    arm: str | None = None,
) -> dict[str, Any]:
    """One avalanche on fresh topics (``<cfg.topic>.<arm>-<run>``; ``arm`` defaults to on or
    off); ``view(reader, swarm, phase)`` is called ~4x a second while it runs (the demo's
    live screen). SDK workers run a ``PoolWorker`` of the policy's hand-off pool in every
    arm (it idles unless lagpilot hands a partition off)."""
    run_id = uuid.uuid4().hex[:6]
    arm = arm or ("on" if balancer else "off")
    cfg = replace(
        cfg,
        topic=f"{cfg.topic}.{arm}-{run_id}",
        group=f"agent-workers-{run_id}",
        client_id=f"agent-{run_id}-0",
        pool=policy_config().spread_pool if cfg.consumer == "sdk" else None,
        control_topic=f"lagpilot.control.ws-{run_id}",  # ControlLoop's name for the run
        outcomes_topic=f"lagpilot.outcomes.ws-{run_id}" if balancer else None,
    )
    ensure_topic(cfg.bootstrap, cfg.topic, cfg.partitions)
    loop = ControlLoop.start(cfg.bootstrap, cfg.topic, f"ws-{run_id}", workdir, on=balancer)
    reader = LagReader(cfg.bootstrap, {cfg.group}).start()
    rundir = workdir / run_id
    rundir.mkdir()
    swarm = Swarm(cfg, rundir)
    try:
        loop.wait_modelling()  # the clock starts once the pipeline samples the topic
        swarm.start_workers()
        swarm.wait_assigned()  # the producers start once the group owns every partition
        tick = _throttled(view, reader, swarm, cfg)
        swarm.run_producers(on_tick=(lambda _s: tick("producing")) if view else None)
        drained = swarm.wait_drained(
            timeout_s=cfg.avalanche_s * 4 + 60,
            on_tick=(lambda: tick("draining")) if view else None,
        )
        time.sleep(1.0)
    finally:
        swarm.stop()
        reader.close()
        loop.stop()
    res = swarm.results()
    res |= {
        "drained": drained,
        "arm": arm,
        "topic": cfg.topic,
        "group": cfg.group,
        "lanes": cfg.lanes,
        "pool": cfg.pool,
        "policy_sha256": loop.policy_sha256,
    }
    start = swarm.produced.avalanche_start_ms
    hot = set(cfg.hot_partitions)
    events = reader.select(lambda e: e["event"] == "partition_lag")
    detected = [e for e in events if e["partition"] in hot and e["status"] != "OK"
                and e["observed_at_ms"] >= start]  # fmt: skip
    res["detection_ms"] = (min(e["_received_ms"] for e in detected) - start) if detected else None
    res["first_non_ok"] = first_non_ok(detected, start)
    res["max_time_lag_s"] = max((e["time_lag_s"] for e in events), default=0.0)
    res["timeline"] = timeline(events, start)
    actions = loop.actions()
    reported = loop.reported() if balancer else []
    # what was injected: heavy documents on the hot partitions, nothing else. A hot
    # partition handed off to the pool is judged in the pool's group from then on.
    hotspot = Injected("hotspot", partition_targets(cfg.group, cfg.topic, hot, cfg.pool))
    res |= judge_run(actions, reported, [hotspot], start)  # actions: the judged rows
    res["outcomes"] = [
        {"action_id": o.get("action_id"), "result": o["result"], "type": o.get("action_type")}
        for o in reported if o.get("event") == "outcome"
    ]  # fmt: skip
    res["verifications"] = [
        {k: v.get(k) for k in ("action_id", "result", "action_type", "target", "cause", "step",
                               "why", "time_lag_at_apply_s", "time_lag_now_s")}
        | {"at_ms": v["at"] - start}
        for v in reported if v.get("event") == "verification"
    ]  # fmt: skip
    res["worker_outcomes"] = [
        {"action_id": o.get("action_id"), "action_type": o["action_type"], "did": o["did"],
         "instance": o["instance"], "partition": o.get("partition"), "lanes": o.get("lanes")}
        for o in reported if o.get("event") == "worker_outcome"
    ]  # fmt: skip
    first_spread: dict[int, int] = {}
    for a in actions:
        part = a["params"].get("partition")
        if a["type"] == "spread_partition" and isinstance(part, int):
            first_spread[part] = min(first_spread.get(part, a["issued_at"]), a["issued_at"])
    res["p99_tail"] = p99_tail(swarm.ledger.rows(), hot, first_spread)
    log(f"{arm}: p50 {res['p50_ms']} ms, p99 {res['p99_ms']} ms, max {res['max_ms']} ms, "
        f"lost {res['lost']}, duplicates {res['duplicates']}, detection {res['detection_ms']} "
        f"ms, actions {len(res['actions'])} (wrong {res['wrong_actions']}), verdicts "
        f"{[v['result'] for v in res['verifications']]}")  # fmt: skip
    return res


def first_non_ok(detected: list[dict[str, Any]], start: int) -> list[dict[str, Any]]:
    """Each hot partition's first non-OK event after the onset: which status, when it was
    judged and read back, and the time lag and lag it was judged on (what detection is)."""
    first: dict[int, dict[str, Any]] = {}
    for e in sorted(detected, key=lambda e: e["_received_ms"]):
        first.setdefault(e["partition"], e)
    return [{"partition": p, "status": e["status"], "observed_ms": e["observed_at_ms"] - start,
             "received_ms": e["_received_ms"] - start, "time_lag_s": e["time_lag_s"],
             "lag_offsets": e["lag_offsets"], "worker_reports": e.get("worker") is not None}
            for p, e in sorted(first.items())]  # fmt: skip


def _throttled(view: Any, reader: LagReader, swarm: Swarm, cfg: SwarmConfig) -> Any:
    last = [0.0]

    def tick(phase: str) -> None:
        if view is not None and time.monotonic() - last[0] >= 0.25:
            last[0] = time.monotonic()
            view(reader, swarm, cfg, phase)

    return tick


def plot(off: dict[str, Any], on: dict[str, Any], hot: tuple[int, ...], out: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), sharey=True)
    for ax, (name, res) in zip(axes, (("balancer off", off), ("balancer on", on)), strict=True):
        time_lag_lines(ax, res["timeline"], hot=hot)
        action_lines(ax, res["actions"])
        ax.set_title(f"{name}: p99 {res['p99_ms'] / 1000:.2f} s")
        ax.set_xlabel("seconds since the avalanche began")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left")
    axes[0].set_ylabel("time lag per partition (s)")
    fig.suptitle("agents.perception: time lag per partition (dashed: lagpilot actions)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--hot", default="4,11", help="comma-separated hot partitions")
    ap.add_argument("--producers", type=int, default=50)
    ap.add_argument("--rate", type=float, default=250.0, help="normal events/s, all producers")
    ap.add_argument(
        "--heavy-rate", type=float, default=10.0, help="heavy events/s per hot partition"
    )
    ap.add_argument("--heavy-work-ms", type=float, default=150.0)
    ap.add_argument("--avalanche-s", type=float, default=30.0)
    add_flag(ap)
    ap.add_argument("--smoke", action="store_true", help="tiny run for the test suite")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "war_story.json"))
    args = ap.parse_args(argv)
    stamp = run_stamp()
    args.bootstrap = broker.bootstrap(args.bootstrap)
    cfg = SwarmConfig(
        bootstrap=args.bootstrap, partitions=args.partitions,
        hot_partitions=tuple(int(p) for p in args.hot.split(",")),
        producers=args.producers, rate_per_s=args.rate, heavy_rate_per_s=args.heavy_rate,
        heavy_work_ms=args.heavy_work_ms, avalanche_s=args.avalanche_s,
        group_protocol=args.group_protocol,
    )  # fmt: skip
    if args.smoke:
        cfg = replace(cfg, partitions=4, hot_partitions=(1,), rate_per_s=40, warmup_s=3,
                      avalanche_s=5, heavy_rate_per_s=12)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        if args.smoke:  # the mechanics: both runs at once (their own topics, groups, loops)
            with ThreadPoolExecutor(2, thread_name_prefix="run") as pool:
                off_run = pool.submit(one_run, cfg, balancer=False, workdir=Path(tmp))
                on_run = pool.submit(one_run, cfg, balancer=True, workdir=Path(tmp))
                off, on = off_run.result(), on_run.result()
        else:  # the figures: one after the other, each with the machine to itself
            off = one_run(cfg, balancer=False, workdir=Path(tmp))
            on = one_run(cfg, balancer=True, workdir=Path(tmp))
    ratio = off["p99_ms"] / on["p99_ms"] if off["p99_ms"] and on["p99_ms"] else None
    result = {
        "off_p99_ms": off["p99_ms"],
        "on_p99_ms": on["p99_ms"],
        "ratio": round(ratio, 2) if ratio else None,
        "lost": off["lost"] + on["lost"],
        "duplicates": off["duplicates"] + on["duplicates"],
        "detection_ms": on["detection_ms"],
        "policy_sha256": on["policy_sha256"],
        "group_protocol": cfg.group_protocol,
        "group_settings": broker_group_settings(cfg.bootstrap, cfg.group_protocol),
        "wrong_actions": on["wrong_actions"],
        "applied_actions": on["applied_actions"],
        "verified": on["verified"],
        "off": {k: v for k, v in off.items() if k != "timeline"},
        "on": {k: v for k, v in on.items() if k != "timeline"},
        "shape": cfg.shape(),
        "targets": {
            "ratio": 10,
            "lost": 0,
            "duplicates": 0,
            "detection_ms": 1000,
            "wrong_actions": 0,
        },
    }
    out = Path(args.out)
    result = write_result(out, result, stamp)
    plot(off, on, cfg.hot_partitions, out.with_suffix(".png"))
    print(f"off p99 {result['off_p99_ms']} ms / on p99 {result['on_p99_ms']} ms = "
          f"ratio {result['ratio']} (target >= 10); lost {result['lost']}, "
          f"duplicates {result['duplicates']}, detection {result['detection_ms']} ms, "
          f"wrong actions {result['wrong_actions']}; group protocol "
          f"{result['group_protocol']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
