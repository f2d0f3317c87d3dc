"""How fast the host runs now: ``make bench-model``'s own workload, timed in the benchmark's
process while a step warms up.

The scale benchmark's capacity is in CPU seconds, and a core of this shared host is not
the same core from one run to the next: the same pipeline at the same shape took 0.515
core in one run and 0.737 core seven minutes later (2026-12-05), while ``bench.perf.model``'s
tick went from 0.23 to 0.33-0.40 us per group-partition with nothing else running. The
probe records that speed next to each step, so a reader can tell a slower pipeline from a
slower host. It changes no verdict and no estimate.
"""

from __future__ import annotations

import time

from bench.support.model_workload import Run

#: the workload of ``make bench-model`` (its defaults: 50 groups x 50 partitions, 24 h of
#: HWM history), so the probe reads in the unit of its committed figure
GROUPS, PARTITIONS, HISTORY_H = 50, 50, 24.0
TICKS = 20  # a timed run: ~12 ms of CPU on an idle host


class HostProbe:
    """One warmed-up model, timed on demand (``us_per_group_partition``)."""

    def __init__(self) -> None:
        self._run = Run("columnar", GROUPS, PARTITIONS, HISTORY_H)
        for _ in range(4 * 12):  # the 10 s window full, as bench.perf.model does
            self._run.tick()

    def us_per_group_partition(self, repeats: int = 5) -> float:
        """CPU us per group-partition of one tick, best of ``repeats`` runs of ``TICKS``
        ticks (best: another process taking the core mid-run inflates a run, never
        deflates it)."""
        best = float("inf")
        for _ in range(repeats):
            start = time.process_time()
            for _ in range(TICKS):
                self._run.tick()
            best = min(best, (time.process_time() - start) / TICKS)
        return round(best / (GROUPS * PARTITIONS) * 1e6, 3)
