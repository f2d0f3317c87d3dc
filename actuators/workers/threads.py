"""The lanes' threads: one per lane that has work, up to a cap, started as lanes need them.

Why not ``ThreadPoolExecutor``: it starts a new thread only when its idle semaphore is empty,
and every finished task adds to that semaphore even when its thread goes straight on to a
queued task. Under a steady backlog the permits pile up, so the pool stops growing long
before ``max_workers``: a worker with 8 partitions x 16 lanes ran 16 threads. This pool
counts the threads really waiting for work, so each lane with work gets a thread, up to
``max_threads``.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class LaneThreads:
    """``submit(fn, *args)`` runs ``fn`` on an idle thread, else on a new one (up to
    ``max_threads``), else when a thread frees up. ``shutdown`` drops what has not started."""

    def __init__(self, max_threads: int, name: str) -> None:
        self._max = max_threads
        self._name = name
        self._queue: queue.SimpleQueue[tuple[Callable[..., object], tuple[Any, ...]] | None] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0  # threads waiting on the queue and not yet promised an item
        self._stopped = False

    def submit(self, fn: Callable[..., object], *args: Any) -> None:
        with self._lock:
            if self._stopped:
                return
            self._queue.put((fn, args))
            if self._idle:
                self._idle -= 1  # promised to one waiting thread
                return
            if self._threads >= self._max:
                return  # runs when a thread finishes its item
            self._threads += 1
            n = self._threads
        threading.Thread(target=self._work, name=f"{self._name}-{n}", daemon=True).start()

    @property
    def threads(self) -> int:
        return self._threads

    def shutdown(self) -> None:
        with self._lock:
            self._stopped = True
            n = self._threads
        for _ in range(n):
            self._queue.put(None)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None or self._stopped:
                return
            fn, args = item
            try:
                fn(*args)
            except BaseException:
                log.exception("a lane task raised")
            with self._lock:
                if self._stopped:
                    return
                self._idle += 1
