"""The lane threads' side of a worker: the handler wrapper and the counters it keeps.

``Engine`` (the poll thread's side: polling, control commands, backpressure, commits) hands
each message to the lanes; a lane runs ``HandlerRunner`` on it: the message's idempotency key
and ``EffectGuard``, the handler, retries with a growing backoff, and the failure path. It
counts in a ``Tally``: one dict per counting thread, so the lanes take no shared lock to count
a message.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable

from confluent_kafka import Message

from actuators.workers.dedupe import DedupeStore, EffectGuard, InDoubtError, idempotency_key

log = logging.getLogger(__name__)

Handler = Callable[[Message, EffectGuard], None]
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
        handler: Handler,
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
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        assert topic is not None and partition is not None and offset is not None
        key = idempotency_key(self._group, topic, partition, offset, msg.headers())
        for attempt in range(1, self._max_attempts + 1):
            ctx = EffectGuard(key, self._group, topic, partition, offset, attempt, self._store)
            try:
                self._handler(msg, ctx)
            except Exception as exc:
                final = attempt == self._max_attempts or isinstance(exc, InDoubtError)
                if not final:
                    self._count("retried")
                    time.sleep(self._retry_backoff_s * attempt)
                    continue
                self._count("failed")
                log.warning("giving up on %s after %d attempts: %r", key, attempt, exc)
                if self._on_failure is not None:
                    try:
                        self._on_failure(msg, exc)
                    except Exception:
                        log.exception("on_failure raised for %s", key)
                return
            self._count("processed")
            return
