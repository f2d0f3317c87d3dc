"""The lag model alone (no broker): the cost of one tick of a topic with many groups.

One ``TopicModel`` holds a topic's groups as (groups x partitions) arrays and fits them all
in one pass, touching each row of its rate window once (when appended) and recomputing a
time lag only where the committed offset moved. Two baselines, measured in the same run on
the same inputs:

- ``rebuilt``: the same model computing every tick from the rows, as it did before issue
  16 (``bench.support.model_rebuilt``: the window's masks, differences and lags derived
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

    .venv/bin/python -m bench.model [--groups 50] [--partitions 50] [--smoke]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads OpenBLAS

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

from bench.support.model_rebuilt import rebuilt_model
from pipeline.model.config import LagConfig
from pipeline.model.lag import TopicModel

ROOT = Path(__file__).resolve().parents[1]

TICK_MS = 250
RATE_PER_S = 160  # messages a second per partition (40 a tick)
COMMIT_EVERY = 20  # ticks between two commits of a group (5 s)


def day_of_history(hours: float, partitions: int, t_end: int) -> tuple[np.ndarray, np.ndarray]:
    """An HWM history as a pipeline that has run ``hours`` holds it: rows spaced as the
    compaction leaves them (about 3/4 of the bound, max(1 s, 1% of their age), apart),
    ending 12 s before ``t_end``."""
    ages, a = [], 12.0
    while a < hours * 3_600:
        ages.append(a)
        a += 0.75 * max(1.0, 0.01 * a)
    age = np.array(ages[::-1])
    t = (t_end - age * 1000).astype(np.int64)
    hw = (base_offset(hours) - RATE_PER_S * age).astype(np.int64)[:, None]
    return t, hw + np.arange(partitions, dtype=np.int64)


def base_offset(hours: float) -> int:
    return int(RATE_PER_S * hours * 3_600) + 1


class Run:
    """One kind of model (``columnar``, ``rebuilt`` or ``per_group``) fed the ticks every
    kind is fed: the tick ``i`` samples every partition at ``base + 40 i + p`` and the
    groups whose phase is due commit every partition a little behind it (the commits source
    coalesces to one row per group-partition)."""

    def __init__(self, kind: str, groups: int, partitions: int, history_h: float) -> None:
        self.groups, self.partitions = groups, partitions
        self.t0 = 1_800_000_000_000
        self.base = base_offset(history_h) if history_h > 0 else 0
        cfg = LagConfig()
        if kind == "per_group":
            self.models = [TopicModel("t", cfg) for _ in range(groups)]
        else:
            self.models = [rebuilt_model("t", cfg) if kind == "rebuilt" else TopicModel("t", cfg)]
        if history_h > 0:
            t_hist, hw_hist = day_of_history(history_h, partitions, self.t0)
            for m in self.models:
                m.history.replace(t_hist, hw_hist)
        self.i = 0

    def commits(self, i: int, hw: list[int]) -> dict[int, list[list[object]]]:
        t = self.t0 + i * TICK_MS
        return {
            g: [[f"g{g}", p, max(0, hw[p] - (g * 7 + p) % 90), t - 30] for p in range(len(hw))]
            for g in range(self.groups)
            if (i + g) % COMMIT_EVERY == 0
        }

    def tick(self) -> None:
        self.i += 1
        i, t = self.i, self.t0 + self.i * TICK_MS
        hw = [self.base + i * 40 + p for p in range(self.partitions)]
        due = self.commits(i, hw)
        if len(self.models) == 1:  # one model for every group
            due = {0: [r for rows in due.values() for r in rows]}
        for g, m in enumerate(self.models):
            if due.get(g):
                m.commit_many(due[g])
            m.add_sample(t, hw)
            m.observe(t)


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
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
