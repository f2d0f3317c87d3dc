"""What runs the lanes: threads for plain handlers, one event loop for ``async def`` ones.

``LaneThreads``: one thread per lane that has work, up to a cap, started as lanes need them.

Why not ``ThreadPoolExecutor``: it starts a new thread only when its idle semaphore is empty,
and every finished task adds to that semaphore even when its thread goes straight on to a
queued task. Under a steady backlog the permits pile up, so the pool stops growing long
before ``max_workers``, with far fewer threads than lanes that have work. This pool
counts the threads really waiting for work, so each lane with work gets a thread, up to
``max_threads``.

``LoopLanes``: an ``async def`` handler's lanes are tasks on one event loop thread, up to the
same cap. Threads sleeping in a handler each win the interpreter lock back when they wake,
and with many of them most wake-ups wait for it; tasks on one loop switch without it, so
one loop thread runs more short handlers a second than as many threads. Blocking calls
in an async handler belong in ``asyncio.to_thread`` (``ctx.once_async`` and
``ctx.once_sql_async`` do that), whose threads are the loop's own pool, capped the same way.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
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

    def pending(self) -> int:
        """Items waiting for a thread (a hint: read without the lock)."""
        return len(self._items)

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


class LoopLanes:
    """``submit(fn, *args)`` runs the coroutine ``fn(*args)`` as a task on this object's event
    loop thread: at once if fewer than ``max_tasks`` run, else when one ends. Callable from
    any thread. ``shutdown`` drops what has not started and cancels what runs."""

    def __init__(self, max_tasks: int, name: str) -> None:
        self._max = max_tasks
        self._loop = asyncio.new_event_loop()
        # to_thread's threads (a blocking call of an async handler): as many as tasks may run
        self._loop.set_default_executor(ThreadPoolExecutor(max_tasks, f"{name}-blocking"))
        self._items: deque[tuple[Callable[..., Coroutine[Any, Any, object]], tuple[Any, ...]]]
        self._items = deque()
        self._tasks: set[asyncio.Task[None]] = set()  # the loop keeps only weak references
        self._stopped = False
        self._thread = threading.Thread(target=self._serve, name=f"{name}-loop", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., Coroutine[Any, Any, object]], *args: Any) -> None:
        if self._stopped:
            return
        if threading.current_thread() is self._thread:
            self._start(fn, args)
            return
        try:
            self._loop.call_soon_threadsafe(self._start, fn, args)
        except RuntimeError:  # the loop closed meanwhile (shutdown): dropped, as queued work is
            return

    @property
    def threads(self) -> int:
        return 1

    def pending(self) -> int:
        """Coroutines waiting for a task slot (a hint: read off the loop's thread)."""
        return len(self._items)

    @property
    def running(self) -> int:
        return len(self._tasks)

    def shutdown(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        try:
            self._loop.call_soon_threadsafe(self._loop.stop)
        except RuntimeError:
            return
        if threading.current_thread() is not self._thread:
            self._thread.join(5)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            if tasks:
                self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self._loop.run_until_complete(self._loop.shutdown_default_executor())
        finally:
            self._loop.close()

    def _start(self, fn: Callable[..., Coroutine[Any, Any, object]], args: tuple[Any, ...]) -> None:
        """On the loop thread."""
        if self._stopped:
            return
        if len(self._tasks) >= self._max:
            self._items.append((fn, args))
            return
        task = self._loop.create_task(self._guard(fn, args))
        self._tasks.add(task)
        task.add_done_callback(self._ended)

    async def _guard(
        self, fn: Callable[..., Coroutine[Any, Any, object]], args: tuple[Any, ...]
    ) -> None:
        try:
            await fn(*args)
        except asyncio.CancelledError:
            raise
        except BaseException:
            log.exception("a lane task raised")

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        while self._items and len(self._tasks) < self._max and not self._stopped:
            fn, args = self._items.popleft()
            self._start(fn, args)
