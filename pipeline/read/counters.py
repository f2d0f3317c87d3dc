"""The readers' counters, from the processes they run in to their replica's Prometheus.

The commits source runs in a process Quix spawns, the watermark sampler in one the source
spawns; Prometheus lives in the pipeline's main process. The source sends its cumulative
totals (the sampler's with them: each tick carries its own) with its run id on a queue that
the main process made before the spawn (``CounterChannel``); the main process folds each
total into a counter by its increase (``RunTotals``).

Not in the headers of the messages the source produces: with two replicas a topic's
batches go to the watermarks partition its name hashes to, so each replica's model reads
the other's batches too, and would count the other source's totals as its own (and, the
two run ids alternating, count every total again at each change). A queue joins one
source to one replica.
"""

from __future__ import annotations

import contextlib
import queue
from collections.abc import Mapping
from typing import Any

#: a stat named with this prefix is a gauge (its value as it is now), not a total
GAUGE_PREFIX = "gauge|"
#: totals waiting in the queue at most; a full queue drops the new totals (they are
#: cumulative: the next ones carry them)
MAX_QUEUED = 16


class CounterChannel:
    """A one-way queue of ``(run, totals)`` from a source's process to the main one.

    Made in the main process and held by the source object Quix pickles into its process
    (a spawn context's queue crosses a spawn)."""

    def __init__(self) -> None:
        import multiprocessing

        self._queue: Any = multiprocessing.get_context("spawn").Queue(MAX_QUEUED)

    def send(self, run: str, totals: Mapping[str, float]) -> None:
        """Never blocks: the source's loop must not wait for the main process."""
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait((run, dict(totals)))

    def receive(self, timeout_s: float) -> tuple[str, dict[str, float]] | None:
        """The next totals sent, or None if none came within ``timeout_s``. Raises
        ``EOFError`` once the queue is closed (``close``, or the process ending under a
        reader that still waits: its pipe goes first)."""
        try:
            run, totals = self._queue.get(timeout=timeout_s)
        except queue.Empty:
            return None
        except (OSError, ValueError) as exc:
            raise EOFError("the counter channel is closed") from exc
        return str(run), dict(totals)

    def close(self) -> None:
        self._queue.close()


class RunTotals:
    """Cumulative totals -> increases (pure).

    A new run of the source counts from zero, so a run id never seen before starts from
    nothing; totals arrive in the order they were sent, so within a run a lower total
    cannot occur but is ignored (no negative increase)."""

    def __init__(self) -> None:
        self.run = ""
        self.seen: dict[str, float] = {}

    def increase(self, run: str, totals: Mapping[str, float]) -> dict[str, float]:
        if run != self.run:
            self.run, self.seen = run, {}
        out = {}
        for stat, total in totals.items():
            delta = total - self.seen.get(stat, 0.0)
            if delta > 0:
                self.seen[stat] = total
                out[stat] = delta
        return out
