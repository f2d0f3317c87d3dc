"""The lag model alone (no broker): the cost of one tick of a topic with many groups.

One ``TopicModel`` holds a topic's groups as (groups x partitions) arrays and fits them all
in one pass, touching each row of its rate window once (when appended) and recomputing a
time lag only where the committed offset moved. Two baselines, measured in the same run on
the same inputs:

- ``rebuilt``: the same model computing every tick from the rows, as it did before issue
  16 (``bench.support.baselines.model_before_16``: the window's masks, differences and lags derived
  again every tick, every time lag searched afresh);
- ``per_group``: one ``TopicModel`` per group, each observed on its own (the loop the model
  had before it was columnar).

Inputs: ``--groups`` groups on a ``--partitions`` partition topic, each committing every 5 s
(at different phases: a twentieth of the groups commit at each tick), sampled every
250 ms, with the window full (10 s) and the HWM history a pipeline holds after
``--history-h`` hours (24: ~1,100 rows, as compacted by ``pipeline.model.history``), as in
steady state. A timed tick is what the operator does per topic per sample: apply the
tick's commits (``commit_many``), ``add_sample`` and ``observe``.

The figure is CPU time (``time.process_time``: what the tick costs a core, less disturbed
by other processes on a shared host than wall time), best of 3 runs, with BLAS on one
thread (``OPENBLAS_NUM_THREADS=1`` unless set: the matrices are small, and a second BLAS
thread only spins). Prints microseconds per group-partition per tick for all three and the
ratios; writes ``bench/results/model.json`` with the load average.

    .venv/bin/python -m bench.perf.model [--groups 50] [--partitions 50] [--smoke]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads OpenBLAS

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

from bench.support.model_workload import Run
from bench.support.results import run_stamp, write_result

ROOT = Path(__file__).resolve().parents[2]


def time_ticks(kind: str, args: argparse.Namespace) -> tuple[float, Run]:
    """CPU seconds per tick of one kind of model, best of 3 runs of ``args.ticks`` ticks
    after 12 s of warm-up (the 10 s window full)."""
    run = Run(kind, args.groups, args.partitions, args.history_h)
    for _ in range(4 * 12):
        run.tick()
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        for _ in range(args.ticks):
            run.tick()
        best = min(best, (time.process_time() - start) / args.ticks)
    return best, run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=50)
    ap.add_argument("--partitions", type=int, default=50)
    ap.add_argument("--ticks", type=int, default=40)
    ap.add_argument(
        "--history-h", type=float, default=24.0, help="hours of HWM history the models hold"
    )
    ap.add_argument("--smoke", action="store_true", help="tiny run for the test suite")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "model.json"))
    args = ap.parse_args(argv)
    stamp = run_stamp()
    if args.smoke:
        args.groups, args.partitions, args.ticks = 4, 6, 5
    load_before = os.getloadavg()[0]
    gp = args.groups * args.partitions
    # the same ticks into each kind of model, one after the other
    t_col, run = time_ticks("columnar", args)
    t_reb, _ = time_ticks("rebuilt", args)
    t_alone, _ = time_ticks("per_group", args)
    us = {k: v / gp * 1e6 for k, v in (("col", t_col), ("reb", t_reb), ("alone", t_alone))}
    at_scale = 20 * 4 * t_col * (50 * 50 / gp)  # core-seconds per second, 20x50x50
    result = {
        "groups": args.groups,
        "partitions": args.partitions,
        "ticks": args.ticks,
        "history_h": args.history_h,
        "history_rows": len(run.models[0].t_ms),
        "clock": "process_time (CPU), best of 3",
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        "columnar_ms_per_tick": round(t_col * 1e3, 3),
        "rebuilt_ms_per_tick": round(t_reb * 1e3, 3),
        "per_group_ms_per_tick": round(t_alone * 1e3, 3),
        "columnar_us_per_group_partition": round(us["col"], 3),
        "rebuilt_us_per_group_partition": round(us["reb"], 3),
        "per_group_us_per_group_partition": round(us["alone"], 3),
        "ratio_vs_rebuilt": round(t_reb / t_col, 2),
        "ratio": round(t_alone / t_col, 2),
        "cores_at_1000x50_250ms": round(at_scale, 3),
        "load_avg_1m_before": round(load_before, 2),
        "load_avg_1m_after": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }
    print(
        f"{args.groups} groups x {args.partitions} partitions, window full, "
        f"{len(run.models[0].t_ms)} history rows ({args.history_h:g} h), CPU per tick: "
        f"model {t_col * 1e3:.2f} ms ({us['col']:.3f} us per group-partition); "
        f"rebuilt every tick (before issue 16) {t_reb * 1e3:.2f} ms ({us['reb']:.2f} us): "
        f"{t_reb / t_col:.1f}x; one model per group {t_alone * 1e3:.2f} ms "
        f"({us['alone']:.2f} us): {t_alone / t_col:.1f}x"
    )
    print(
        f"at 20 topics x 50 partitions x 50 groups, 4 ticks/s: {at_scale:.2f} core for the "
        f"model's ticks alone (load average {load_before:.1f} -> {os.getloadavg()[0]:.1f})"
    )
    result = write_result(args.out, result, stamp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
