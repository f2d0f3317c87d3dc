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
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class LaneThreads:
    """``submit(fn, *args)`` runs ``fn`` on a waiting thread, else on a new one (up to
    ``max_threads``), else when a thread frees up. ``shutdown`` drops what has not started."""

    def __init__(self, max_threads: int, name: str) -> None:
        self._max = max_threads
        self._name = name
        self._cond = threading.Condition()
        self._items: deque[tuple[Callable[..., object], tuple[Any, ...]]] = deque()
        self._threads = 0
        self._waiting = 0  # threads blocked for work (a notified one counts until it wakes)
        self._stopped = False

    def submit(self, fn: Callable[..., object], *args: Any) -> None:
        with self._cond:
            if self._stopped:
                return
            self._items.append((fn, args))
            if self._waiting >= len(self._items):
                self._cond.notify()
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
        with self._cond:
            self._stopped = True
            self._items.clear()
            self._cond.notify_all()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._items and not self._stopped:
                    self._waiting += 1
                    self._cond.wait()
                    self._waiting -= 1
                if self._stopped:
                    return
                fn, args = self._items.popleft()
            try:
                fn(*args)
            except BaseException:
                log.exception("a lane task raised")
