"""The lag model alone (no broker): the cost of one tick of a topic with many groups.

One ``TopicModel`` holds a topic's groups as (groups x partitions) arrays and fits them all
in one pass. The baseline, measured in the same run on the same inputs, is the per-group
loop the model had before: one ``TopicModel`` per group, each observed on its own (the same
numpy work, called once per group). Inputs: ``--groups`` groups on a ``--partitions``
partition topic, each committing every 5 s, sampled every 250 ms, with the window full
(10 s) and the HWM history a pipeline holds after ``--history-h`` hours (24: ~1,100 rows,
as compacted by ``pipeline.model.history``), as in steady state.

Prints microseconds per group-partition per tick for both and their ratio, and what the
figure means at the scale benchmark's shape (20 topics x 50 partitions x 50 groups, 4
ticks a second). Writes ``bench/results/model.json``.

    .venv/bin/python -m bench.model [--groups 50] [--partitions 50] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from pipeline.model.config import LagConfig  # noqa: E402
from pipeline.model.lag import TopicModel  # noqa: E402

TICK_MS = 250


RATE_PER_S = 160  # messages a second per partition (40 a tick)


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


def build(
    groups: int, partitions: int, ticks: int, history_h: float
) -> tuple[TopicModel, list[TopicModel], int]:
    """The same commits and samples into one shared model and into one model per group."""
    shared = TopicModel("t", LagConfig())
    alone = [TopicModel("t", LagConfig()) for _ in range(groups)]
    t = 1_800_000_000_000
    base = 0
    if history_h > 0:
        t_hist, hw_hist = day_of_history(history_h, partitions, t)
        base = base_offset(history_h)
        for m in (shared, *alone):
            m.history.replace(t_hist, hw_hist)
    for i in range(ticks):
        t += TICK_MS
        hw = [base + i * 40 + p for p in range(partitions)]
        for g in range(groups):
            if (i + g) % 20 == 0:  # every 5 s, groups at different phases
                for p in range(partitions):
                    offset = max(0, hw[p] - (g * 7 + p) % 90)
                    shared.commit(f"g{g}", p, offset, t - 30)
                    alone[g].commit(f"g{g}", p, offset, t - 30)
        for m in (shared, *alone):
            m.add_sample(t, hw)
            m.observe(t)
    return shared, alone, t


def time_ticks(models: list[TopicModel], t: int, ticks: int, partitions: int) -> float:
    """Seconds per tick (add_sample + observe of every model), best of 3 runs."""
    best = float("inf")
    for rep in range(3):
        start = time.perf_counter()
        for k in range(ticks):
            now = t + (rep * ticks + k + 1) * TICK_MS
            hw = [int(now // 10) + p for p in range(partitions)]
            for m in models:
                m.add_sample(now, hw)
                m.observe(now)
        best = min(best, (time.perf_counter() - start) / ticks)
    return best


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
    warm = 4 * 12  # 12 s: the 10 s window full
    shared, alone, t = build(args.groups, args.partitions, warm, args.history_h)
    gp = args.groups * args.partitions
    # the two measurements continue from the same state, each on its own models
    t_shared = time_ticks([shared], t, args.ticks, args.partitions)
    t_alone = time_ticks(alone, t, args.ticks, args.partitions)
    us_shared, us_alone = t_shared / gp * 1e6, t_alone / gp * 1e6
    at_scale = 20 * 4 * t_shared * (50 * 50 / gp)  # core-seconds per second, 20x50x50
    result = {
        "groups": args.groups,
        "partitions": args.partitions,
        "ticks": args.ticks,
        "history_h": args.history_h,
        "history_rows": len(shared.t_ms),
        "columnar_ms_per_tick": round(t_shared * 1e3, 3),
        "per_group_ms_per_tick": round(t_alone * 1e3, 3),
        "columnar_us_per_group_partition": round(us_shared, 3),
        "per_group_us_per_group_partition": round(us_alone, 3),
        "ratio": round(t_alone / t_shared, 2),
        "cores_at_1000x50_250ms": round(at_scale, 3),
        "python": platform.python_version(),
    }
    print(
        f"{args.groups} groups x {args.partitions} partitions, window full, "
        f"{len(shared.t_ms)} history rows ({args.history_h:g} h): "
        f"one model for all groups {t_shared * 1e3:.2f} ms/tick ({us_shared:.2f} us per "
        f"group-partition); one model per group {t_alone * 1e3:.2f} ms/tick "
        f"({us_alone:.2f} us): {t_alone / t_shared:.1f}x"
    )
    print(
        f"at 20 topics x 50 partitions x 50 groups, 4 ticks/s: {at_scale:.2f} core for the "
        "model's ticks alone"
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
