"""The worker process's side of process mode (processes.py is the parent's): what crosses the
pipe, and the loop a worker process runs.

Everything here crosses a process boundary, so it is plain picklable data: a message as
``ShippedMessage`` (the accessors a handler calls on a confluent-kafka ``Message``, which
cannot be pickled), the dedupe store as ``StoreSpec`` (a path or a DSN: a store holds
connections and locks, so each process opens its own), and the handler as the bytes of its
pickle (a module-level function: the process imports it by name).
"""

from __future__ import annotations

import os
import pickle
import signal
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from queue import SimpleQueue
from typing import Any

from actuators.workers.dedupe import DedupeStore, SQLiteDedupeStore
from actuators.workers.handling import HandlerRunner, Tally

#: a message on the pipe: (seq, topic, partition, offset, key, value, headers, timestamp)
Payload = tuple[int, str, int, int, bytes | None, bytes | None, Any, tuple[int, int]]
#: a worker process's answers: ("ready", pid), ("error", text) when it cannot start, and per
#: message ("done", seq, counts, failure): the handler's counters and, if it gave up, why
READY, ERROR, DONE = "ready", "error", "done"


class ShippedMessage:
    """A polled message as the handler sees it in a worker process: the same accessors as
    confluent-kafka's ``Message`` (``topic()``, ``key()``, ``value()``, ``headers()``, ...);
    ``error()`` is always None (the poll thread never ships an error event)."""

    __slots__ = ("_headers", "_key", "_offset", "_partition", "_timestamp", "_topic", "_value")

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] | None,
        timestamp: tuple[int, int],
    ) -> None:
        self._topic, self._partition, self._offset = topic, partition, offset
        self._key, self._value, self._headers, self._timestamp = key, value, headers, timestamp

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> Sequence[tuple[str, bytes | None]] | None:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return self._timestamp

    def error(self) -> None:
        return None

    def __len__(self) -> int:
        return len(self._value or b"")

    def __repr__(self) -> str:
        return f"ShippedMessage({self._topic}[{self._partition}]@{self._offset})"


def payload(seq: int, msg: Any) -> Payload:
    """What is sent of a polled message (the parent keeps the message itself)."""
    return (seq, msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(),
            msg.headers(), msg.timestamp())  # fmt: skip


@dataclass(frozen=True)
class StoreSpec:
    """How a worker process opens the worker's dedupe store: a SQLite file (every process
    on the host shares it, in WAL mode) or a PostgreSQL DSN."""

    kind: str  # "sqlite" or "postgres"
    where: str  # the SQLite path or the PostgreSQL DSN
    options: tuple[tuple[str, Any], ...] = ()  # the store's own keyword settings

    def open(self) -> DedupeStore:
        if self.kind == "postgres":
            from actuators.workers.dedupe_pg import PostgresDedupeStore

            return PostgresDedupeStore(self.where, **dict(self.options))
        return SQLiteDedupeStore(self.where, **dict(self.options))


@dataclass(frozen=True)
class ChildSettings:
    """What a worker process needs besides its pipe (picklable)."""

    handler: bytes  # pickle.dumps(handler): unpickled in the process, so an import error is
    # reported to the parent as an error, not a traceback on the process's stderr only
    group: str
    store: StoreSpec
    max_attempts: int
    retry_backoff_s: float


class _Counts(Tally):
    """The handler runner's counters in a worker process (one thread): sent with each
    message's answer and added to the worker's own counters there."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[str, int] = {}

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    def take(self) -> dict[str, int]:
        counts, self.counts = self.counts, {}
        return counts


def _shippable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else a RuntimeError with its repr (on_failure runs in
    the parent, with the original message)."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(repr(exc))


def child_main(conn: Connection, settings: ChildSettings) -> None:
    """A worker process: run the messages it is sent in the order they arrive, one at a time,
    answering each. A key always comes to the same process, one message at a time, so its
    messages run in offset order. ``None`` on the pipe (or the pipe closing) ends it after
    the message it runs."""
    # Ctrl-C reaches the whole process group: the parent shuts the workers down in order
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        handler = pickle.loads(settings.handler)
        store = settings.store.open()
    except Exception as exc:
        conn.send((ERROR, f"{type(exc).__name__}: {exc}"))
        return
    counts = _Counts()
    failures: list[BaseException] = []
    runner = HandlerRunner(
        handler,
        group=settings.group,
        store=store,
        max_attempts=settings.max_attempts,
        retry_backoff_s=settings.retry_backoff_s,
        on_failure=lambda _msg, exc: failures.append(exc),
        tally=counts,
    )
    conn.send((READY, os.getpid()))
    inbox: SimpleQueue[list[Payload] | None] = SimpleQueue()
    stopping = threading.Event()
    threading.Thread(target=_read, args=(conn, inbox, stopping), daemon=True).start()
    queue: deque[Payload] = deque()
    try:
        while not stopping.is_set():
            if not queue:
                batch = inbox.get()
                if batch is None:
                    return
                queue.extend(batch)
                continue
            seq, *fields = queue.popleft()
            runner(ShippedMessage(*fields))
            failure = _shippable(failures.pop()) if failures else None
            conn.send((DONE, seq, counts.take(), failure))
    except OSError:
        return  # the parent is gone
    finally:
        store.close()


def _read(
    conn: Connection, inbox: SimpleQueue[list[Payload] | None], stop: threading.Event
) -> None:
    """Take every batch off the pipe as it arrives, so the parent's write never waits for a
    message to finish here (a batch of large payloads would fill the pipe). ``None``, or
    the pipe closing, stops the process after the message it runs."""
    try:
        while (batch := conn.recv()) is not None:
            inbox.put(batch)
    except (EOFError, OSError):
        pass
    stop.set()
    inbox.put(None)
