"""The lag model benchmark's workload (no broker): ``Run``, one kind of model fed the same
ticks of a topic with many groups, on an HWM history as a pipeline holds it.

``bench.perf.model`` times it for every kind (``columnar``, today's model; ``rebuilt``
and ``per_group``, its baselines); the scale benchmark's host probe
(``bench.support.host_probe``) times the ``columnar`` kind as the host's speed.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads OpenBLAS

import numpy as np

from bench.support.baselines.model_before_16 import rebuilt_model
from pipeline.model.config import LagConfig
from pipeline.model.lag import TopicModel

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
