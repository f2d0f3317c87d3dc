"""The lane threads' side of a worker: the handler wrapper and the counters it keeps.

``Engine`` (the poll thread's side: polling, control commands, backpressure, commits) hands
each message to the lanes; a lane runs ``HandlerRunner`` on it: the message's idempotency key
and ``EffectGuard``, the handler, retries with a growing backoff, and the failure path. It
counts in a ``Tally``: one dict per counting thread, so the lanes take no shared lock to count
a message.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable

from confluent_kafka import Message

from actuators.workers.dedupe import DedupeStore, EffectGuard, InDoubtError, idempotency_key

log = logging.getLogger(__name__)

Handler = Callable[[Message, EffectGuard], None]
AsyncHandler = Callable[[Message, EffectGuard], Awaitable[None]]
FailureHook = Callable[[Message, BaseException], None]


class Tally:
    """Counters, one dict per thread that counts; ``snapshot`` adds them up."""

    def __init__(self) -> None:
        self._dicts: list[dict[str, int]] = []
        self._local = threading.local()
        self._lock = threading.Lock()  # only to register a thread's dict

    def count(self, name: str, n: int = 1) -> None:
        counts: dict[str, int] | None = getattr(self._local, "counts", None)
        if counts is None:
            counts = self._local.counts = {}
            with self._lock:
                self._dicts.append(counts)
        counts[name] = counts.get(name, 0) + n  # only this thread writes its dict

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            dicts = list(self._dicts)
        out: Counter[str] = Counter()
        for counts in dicts:
            out.update(dict(counts))  # dict() copies in one step under the GIL
        return dict(out)


class HandlerRunner:
    """Runs ``handler(msg, ctx)`` for one message on a lane thread; never raises.

    A handler that raises is retried ``max_attempts`` times in all (sleeping
    ``retry_backoff_s`` x the attempt number between tries), except on ``InDoubtError``,
    which no retry can settle; then the message is counted ``failed``, passed to
    ``on_failure`` and skipped, so one bad message never wedges its partition.
    """

    def __init__(
        self,
        handler: Handler | AsyncHandler,
        *,
        group: str,
        store: DedupeStore,
        max_attempts: int,
        retry_backoff_s: float,
        on_failure: FailureHook | None,
        tally: Tally,
    ) -> None:
        self._handler = handler
        self._group = group
        self._store = store
        self._max_attempts = max_attempts
        self._retry_backoff_s = retry_backoff_s
        self._on_failure = on_failure
        self._count = tally.count

    def __call__(self, msg: Message) -> None:
        key = self._key(msg)
        for attempt in range(1, self._max_attempts + 1):
            try:
                self._handler(msg, self._guard(msg, key, attempt))
            except Exception as exc:
                backoff_s = self._failed(msg, key, attempt, exc)
                if backoff_s is None:
                    return
                time.sleep(backoff_s)
                continue
            self._count("processed")
            return

    def _key(self, msg: Message) -> str:
        return idempotency_key(self._group, msg.topic() or "", msg.partition() or 0,
                               msg.offset() or 0, msg.headers())  # fmt: skip

    def _guard(self, msg: Message, key: str, attempt: int) -> EffectGuard:
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        assert topic is not None and partition is not None and offset is not None
        return EffectGuard(key, self._group, topic, partition, offset, attempt, self._store)

    def _failed(self, msg: Message, key: str, attempt: int, exc: Exception) -> float | None:
        """The backoff before the next attempt, or None: given up (counted, reported)."""
        if attempt < self._max_attempts and not isinstance(exc, InDoubtError):
            self._count("retried")
            return self._retry_backoff_s * attempt
        self._count("failed")
        log.warning("giving up on %s after %d attempts: %r", key, attempt, exc)
        if self._on_failure is not None:
            try:
                self._on_failure(msg, exc)
            except Exception:
                log.exception("on_failure raised for %s", key)
        return None


class AsyncHandlerRunner(HandlerRunner):
    """``HandlerRunner`` for an ``async def`` handler, awaited on the lanes' event loop; the
    backoff between attempts is an ``asyncio.sleep``, so the other lanes go on meanwhile."""

    async def __call__(self, msg: Message) -> None:  # type: ignore[override]
        key = self._key(msg)
        for attempt in range(1, self._max_attempts + 1):
            try:
                await self._handler(msg, self._guard(msg, key, attempt))  # type: ignore[misc]
            except Exception as exc:
                backoff_s = self._failed(msg, key, attempt, exc)
                if backoff_s is None:
                    return
                await asyncio.sleep(backoff_s)
                continue
            self._count("processed")
            return


def is_async_handler(handler: object) -> bool:
    """True for an ``async def`` handler (a function, a bound method, a partial of one, or an
    object whose ``__call__`` is ``async def``): its lanes are tasks on one event loop."""
    while isinstance(handler, functools.partial):
        handler = handler.func
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004 (an object with an async __call__)
    )
