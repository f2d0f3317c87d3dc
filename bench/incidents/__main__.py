"""The incident suite: each incident on the real broker, lagpilot off and on, in one run.

Every scenario runs the shipped policy, ``deploy/policy.default.toml``, as it is
(bench/support/control_loop.py), on topics named ``agents.<scenario>.<arm>-<run>`` and
producers named ``agent-<run>-<i>`` that its allow-lists cover, with SDK workers beside a
``PoolWorker`` of its hand-off pool. Scenarios (``--scenarios``, comma-separated; all by
default):

- ``avalanche`` (the war story's heavy documents on two partitions), four arms in one run:
  ``naive`` (confluent-kafka consumers as its documentation writes them, library defaults,
  one thread per SDK worker thread: bench/support/naive.py), ``sdk`` (the worker SDK, the
  control loop off), ``static`` (the SDK with every partition on the policy's
  ``hotspot.lanes`` from the start, the loop off: the best setting chosen in advance) and
  ``lagpilot`` (the SDK, the loop on). ``ratio_vs_naive`` = naive p99 / lagpilot p99,
  ``ratio_vs_static`` = lagpilot p99 / static p99 (what acting only when needed costs).
- ``flood`` (bench/incidents/flood.py): one of several producers floods a topic beyond what its
  consumers process.
- ``storm`` (bench/incidents/storm.py): each member that takes the heavy partition dies on it;
  reports rebalances per minute off and on, and the hand-off to the dedicated pool.
- ``slow_group`` (bench/incidents/slow_group.py): inflow rises above the group's capacity on
  every partition; the same ``lagpilot workers`` supervisor is scaled by lagpilot and, in
  the ``poll30`` arm, by a lag poll every 30 s as KEDA's Kafka scaler does by default;
  reports each arm's time to drain and ``drain_ratio_vs_poll30``.
- ``mixed`` (bench/incidents/mixed.py): a hotspot in one group, a producer flood on a second
  topic and a healthy group with heavy-tailed traffic, in one run under one pipeline and one
  actuator; each incident judged against its own remedy, any action on the healthy group
  wrong; per group p99 off and on.
- ``calm`` (bench/incidents/calm.py): minutes of healthy heavy-tailed traffic with a rolling
  restart of the group's members and a member joining and leaving, the loop on; nothing
  injected (target ``applied_actions`` 0).

Each scenario knows what it injected (bench/support/judge.py ``Injected``) and reports every
action the loop issued, judged against it (``actions``, ``wrong_actions``,
``applied_actions``, ``verified``: the product's own ``verification`` events only), with
``policy_sha256``, ``dropped`` (records a producer gave up on), ``lost``, ``duplicates``,
each arm's p99 and its ``shape``, under ``scenarios.<name>`` in
``bench/results/incidents.json``, with a PNG per scenario. The scenarios run are merged
into the file (other scenarios' entries are kept); each entry has its own ``measured_at``,
``commit`` and the host's 1-minute load average at its start and end (``load_avg_1m``).

``--group-protocol classic|consumer``: the SDK workers' group protocol in the storm and the
avalanche's SDK arms (the naive arm is the library's documented consumer, classic; the
other scenarios run the SDK's default); each of those two records ``group_protocol``.

    .venv/bin/python -m bench.incidents [--scenarios avalanche,flood,storm,slow_group,mixed,calm]
        [--smoke] [--group-protocol classic|consumer]
        [--avalanche-s 30] [--heavy-rate 10] [--heavy-work-ms 150]
        [--flood-s 30] [--flood-factor 10] [--producers 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.incidents.war_story import one_run
from bench.support import broker
from bench.support.control_loop import policy_config
from bench.support.group_protocol import add_flag
from bench.support.machine import load_avg_1m
from bench.support.plots import action_lines, pyplot, time_lag_lines
from bench.support.results import run_stamp
from bench.support.swarm import SwarmConfig
from bench.support.verdicts import merge_results, remedy_of

ROOT = Path(__file__).resolve().parents[2]

SCENARIOS = ("avalanche", "flood", "storm", "slow_group", "mixed", "calm")
#: the avalanche's arms, in the order they run and are drawn
ARMS = ("naive", "sdk", "static", "lagpilot")
#: what each arm reports beside its p99 (``arms.<name>``)
ARM_KEYS = ("p50_ms", "p99_ms", "max_ms", "rebalances", "dropped", "lost", "duplicates",
            "produced", "processed", "drained", "max_time_lag_s", "consumer", "lanes",
            "detection_ms", "p99_tail", "policy_sha256")  # fmt: skip


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


def avalanche(
    cfg: SwarmConfig, workdir: Path, *, parallel: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The four arms on the same avalanche, one after the other (``parallel``: two at a time,
    for the smoke, whose checks are mechanics); returns (summary, runs for the plot). The
    static arm's lanes are the policy's ``hotspot.lanes``: what lagpilot spreads a hot
    partition to, given to every partition from the start."""
    lanes = policy_config().spread_lanes
    arms = {
        "naive": (replace(cfg, consumer="naive"), False),
        "sdk": (cfg, False),
        "static": (replace(cfg, lanes=lanes), False),
        "lagpilot": (cfg, True),
    }
    with ThreadPoolExecutor(2 if parallel else 1, thread_name_prefix="arm") as pool:
        futures = {name: pool.submit(one_run, c, on, workdir, arm=name)
                   for name, (c, on) in arms.items()}  # fmt: skip
        runs = {name: f.result() for name, f in futures.items()}
    on = runs["lagpilot"]
    p99 = {name: r["p99_ms"] for name, r in runs.items()}
    summary = {
        "policy_sha256": on["policy_sha256"],
        "group_protocol": cfg.group_protocol,
        "remedy": remedy_of(on["actions"]),
        "detection_ms": on["detection_ms"],
        "first_action_ms": min((a["at_ms"] for a in on["actions"]), default=None),
        "actions": on["actions"],
        "wrong_actions": on["wrong_actions"],
        "wrong_undos": on["wrong_undos"],
        "applied_actions": on["applied_actions"],
        "verified": on["verified"],
        "naive_p99_ms": p99["naive"],
        "sdk_p99_ms": p99["sdk"],
        "static_p99_ms": p99["static"],
        "on_p99_ms": p99["lagpilot"],
        "ratio_vs_naive": _ratio(p99["naive"], p99["lagpilot"]),
        "ratio_vs_static": _ratio(p99["lagpilot"], p99["static"]),
        "on_p99_over_heavy_work": _ratio(p99["lagpilot"], cfg.heavy_work_ms),
        "dropped": sum(r["dropped"] for r in runs.values()),  # any arm's: its figures lack them
        "lost": on["lost"],
        "duplicates": on["duplicates"],
        "arms": {name: {k: r.get(k) for k in ARM_KEYS} for name, r in runs.items()},
        "outcomes": on["outcomes"],
        "verifications": on["verifications"],
        "worker_outcomes": on["worker_outcomes"],
        "shape": {
            **cfg.shape(),
            "max_workers": cfg.max_workers,
            "static_lanes": lanes,
            "pool": on["pool"],
            "naive": runs["naive"]["naive"],
        },
        "targets": {
            "ratio_vs_naive": 10,
            "ratio_vs_static": 1.5,
            "on_p99_over_heavy_work": 1.5,
            "wrong_actions": 0,
            "lost": 0,
            "duplicates": 0,
        },
    }
    return summary, runs


def plot_avalanche(runs: dict[str, dict[str, Any]], hot: tuple[int, ...], out: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, len(runs), figsize=(20, 4.5), sharey=True)
    for ax, (name, res) in zip(axes, runs.items(), strict=True):
        time_lag_lines(ax, res["timeline"], hot=hot)
        action_lines(ax, res["actions"])
        p99 = res["p99_ms"] / 1000 if res["p99_ms"] else float("nan")
        ax.set_title(f"{name}: p99 {p99:.2f} s, rebalances {res['rebalances']}")
        ax.set_xlabel("seconds since the avalanche began")
        ax.set_yscale("symlog", linthresh=1.0)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left")
    axes[0].set_ylabel("time lag per partition (s)")
    fig.suptitle("avalanche: naive consumers vs worker SDK vs SDK on static lanes vs lagpilot "
                 "(dashed: actions)")  # fmt: skip
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def _timed(run: Any) -> tuple[dict[str, Any], dict[str, Any], tuple[float, float]]:
    """``run()``'s (summary, runs) with its ``took_s``, and the host's 1-minute load average
    at its start and end (the machine is shared: the figures follow its load)."""
    t0, load_start = time.monotonic(), load_avg_1m()
    summary, runs = run()
    summary["took_s"] = round(time.monotonic() - t0, 1)
    return summary, runs, (load_start, load_avg_1m())


def _avalanche_job(args: argparse.Namespace, tmp: Path) -> tuple[str, Any, Any]:
    """The avalanche as a (name, run, report) job, smoke-sized when ``--smoke``."""
    cfg = SwarmConfig(
        bootstrap=args.bootstrap, topic="agents.avalanche", avalanche_s=args.avalanche_s,
        heavy_rate_per_s=args.heavy_rate, heavy_work_ms=args.heavy_work_ms,
        group_protocol=args.group_protocol,
    )  # fmt: skip
    if args.smoke:
        # one hot partition of four for 5 s, and 8 threads: every arm, the 8 naive
        # consumers' joins included, fits in a short smoke
        cfg = replace(cfg, partitions=4, hot_partitions=(1,), rate_per_s=40, warmup_s=3,
                      avalanche_s=5, heavy_rate_per_s=12, max_workers=8)  # fmt: skip

    def report(summary: dict[str, Any], runs: Any, out: Path) -> None:
        plot_avalanche(runs, cfg.hot_partitions, out.with_name(f"{out.stem}_avalanche.png"))
        print(f"avalanche: p99 naive {summary['naive_p99_ms']} ms, sdk {summary['sdk_p99_ms']} "
              f"ms, static {summary['static_p99_ms']} ms, lagpilot {summary['on_p99_ms']} ms; "
              f"ratio_vs_naive {summary['ratio_vs_naive']}, ratio_vs_static "
              f"{summary['ratio_vs_static']}; wrong actions {summary['wrong_actions']}; "
              f"remedy {summary['remedy']}")  # fmt: skip

    return "avalanche", lambda: avalanche(cfg, tmp, parallel=bool(args.smoke)), report


def _scenario_jobs(args: argparse.Namespace, wanted: list[str], tmp: Path) -> list[Any]:
    """(name, run, report) of the wanted scenarios other than the avalanche, smoke-sized when
    ``--smoke``; ``run()`` returns (summary, runs), ``report`` plots and prints them."""
    jobs: list[Any] = []
    par = bool(args.smoke)
    if "flood" in wanted:
        from bench.incidents.flood import flood, plot_flood
        from bench.support.flood_load import FloodShape

        shape = FloodShape(producers=args.producers, flood_s=args.flood_s,
                           flood_factor=args.flood_factor)  # fmt: skip
        if args.smoke:
            # 5x its rate for 5 s: over the group's capacity (the flood), and a backlog
            # that drains in seconds (10x took most of the smoke's time, draining)
            shape = replace(shape, warmup_s=4, flood_s=5, cooldown_s=3, flood_factor=5)

        def report_flood(summary: dict[str, Any], runs: Any, out: Path) -> None:
            plot_flood(runs, out.with_name(f"{out.stem}_flood.png"))
            print(f"flood: worst time lag off {summary['off_max_time_lag_s']} s, on "
                  f"{summary['on_max_time_lag_s']} s; throttled {summary['throttled']}; "
                  f"remedy {summary['remedy']}")  # fmt: skip

        jobs.append(("flood", lambda: flood(args.bootstrap, shape, tmp, parallel=par),
                     report_flood))  # fmt: skip
    if "storm" in wanted:
        from bench.incidents.storm import StormShape, plot_storm, storm

        storm_shape = StormShape(storm_s=args.storm_s, group_protocol=args.group_protocol)
        if args.smoke:
            # too short for the storm to be detected: the mechanics only. 16 s: the first
            # member killed by the heavy document (at 4 s) is noticed by the broker after
            # its 6 s session timeout, and that rebalance must land inside the window even
            # on a loaded machine (10 s missed it at load 25)
            storm_shape = replace(storm_shape, warmup_s=4, storm_s=16, drain_s=3)

        def report_storm(summary: dict[str, Any], runs: Any, out: Path) -> None:
            plot_storm(runs, out.with_name(f"{out.stem}_storm.png"))
            print(f"storm: rebalances/min off {summary['off_rebalances_per_min']}, on "
                  f"{summary['on_rebalances_per_min']} ({summary['rebalance_ratio']}x); "
                  f"remedy {summary['remedy']}")  # fmt: skip

        jobs.append(("storm", lambda: storm(args.bootstrap, storm_shape, tmp, parallel=par),
                     report_storm))  # fmt: skip
    if "slow_group" in wanted:
        from bench.incidents.slow_group import SlowShape, plot_slow_group, slow_group

        slow_shape = SlowShape(peak_s=args.slow_peak_s, poll_interval_s=args.slow_poll_s,
                               poll_phase_s=args.slow_poll_s / 2)  # fmt: skip
        if args.smoke:
            # two partitions, 0.7x what two workers process, and a 5 s poll: both arms
            # scale within the smoke (the mechanics: the supervisor obeys either publisher)
            slow_shape = replace(slow_shape, partitions=2, base_per_s=10.0, peak_per_s=70.0,
                                 warmup_s=6, ramp_s=2, peak_s=10, cooldown_s=1,
                                 poll_interval_s=5.0, poll_phase_s=2.5,
                                 drain_timeout_s=60.0)  # fmt: skip

        def report_slow(summary: dict[str, Any], runs: Any, out: Path) -> None:
            plot_slow_group(runs, out.with_name(f"{out.stem}_slow_group.png"))
            print(f"slow_group: drained after {summary['poll30_drain_s']} s with the 30 s poll, "
                  f"{summary['on_drain_s']} s with lagpilot ({summary['drain_ratio_vs_poll30']}"
                  f"x); verified {summary['verified']}; wrong actions "
                  f"{summary['wrong_actions']}; remedy {summary['remedy']}")  # fmt: skip

        jobs.append(("slow_group",
                     lambda: slow_group(args.bootstrap, slow_shape, tmp, parallel=par),
                     report_slow))  # fmt: skip
    if "mixed" in wanted:
        from bench.incidents.mixed import MixedShape, mixed, plot_mixed

        mixed_shape = MixedShape.smoke() if args.smoke else MixedShape()

        def report_mixed(summary: dict[str, Any], runs: Any, out: Path) -> None:
            plot_mixed(runs, out.with_name(f"{out.stem}_mixed.png"))
            print(f"mixed: p99 off {summary['off_p99_ms']} ms, on {summary['on_p99_ms']} ms; "
                  f"wrong actions {summary['wrong_actions']}; "
                  f"remedy {summary['remedy']}")  # fmt: skip

        jobs.append(("mixed", lambda: mixed(args.bootstrap, mixed_shape, tmp, parallel=par),
                     report_mixed))  # fmt: skip
    if "calm" in wanted:
        from bench.incidents.calm import CalmShape, calm, plot_calm

        calm_shape = CalmShape.smoke() if args.smoke else CalmShape()

        def report_calm(summary: dict[str, Any], runs: Any, out: Path) -> None:
            plot_calm(runs, out.with_name(f"{out.stem}_calm.png"))
            print(f"calm: applied actions {summary['applied_actions']}, wrong actions "
                  f"{summary['wrong_actions']}; p99 {summary['on_p99_ms']} ms; remedy "
                  f"{summary['remedy']}")  # fmt: skip

        jobs.append(("calm", lambda: calm(args.bootstrap, calm_shape, tmp), report_calm))
    return jobs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--avalanche-s", type=float, default=30.0)
    ap.add_argument("--heavy-rate", type=float, default=10.0, help="per hot partition, /s")
    ap.add_argument("--heavy-work-ms", type=float, default=150.0)
    ap.add_argument("--flood-s", type=float, default=30.0)
    ap.add_argument("--flood-factor", type=float, default=10.0)
    ap.add_argument("--producers", type=int, default=3, help="flood: producers on the topic")
    ap.add_argument("--storm-s", type=float, default=180.0, help="storm: heavy documents, s")
    ap.add_argument("--slow-peak-s", type=float, default=60.0, help="slow_group: peak inflow, s")
    ap.add_argument("--slow-poll-s", type=float, default=30.0,
                    help="slow_group: the baseline's lag poll interval, s")  # fmt: skip
    add_flag(ap)
    ap.add_argument("--smoke", action="store_true", help="tiny runs for the test suite")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "incidents.json"))
    args = ap.parse_args(argv)
    stamp = run_stamp()
    args.bootstrap = broker.bootstrap(args.bootstrap)
    wanted = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = sorted(set(wanted) - set(SCENARIOS))
    if unknown:
        ap.error(f"--scenarios: unknown {unknown}; choose from {', '.join(SCENARIOS)}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    scenarios: dict[str, dict[str, Any]] = {}
    loads: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        jobs = _scenario_jobs(args, wanted, Path(tmp))
        if "avalanche" in wanted:
            jobs.insert(0, _avalanche_job(args, Path(tmp)))
        # one scenario after another. The smoke checks mechanics, not figures: both arms of
        # a scenario at once (each arm has its own topics and control loop). All six arms
        # at once put ~9 runnable processes on 2 cores: the pipelines fell 10-15 s behind
        # and a detection could land after the run ended. The figures come from the
        # sequential runs (``bench.support.control_loop.both_arms``).
        for name, run, report in jobs:
            summary, runs, loads[name] = _timed(run)
            scenarios[name] = summary
            report(summary, runs, out)
    # merged: the scenarios run here replace their entries, the others' are kept
    merge_results(out, scenarios, commit=stamp["commit"], loads=loads, stamp=stamp)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
