"""Idempotent side effects: idempotency keys, dedupe stores, and each message's ``EffectGuard``.

Kafka redelivers: after a crash or a rebalance, every message above the last committed
offset is processed again. A handler's *side effect* (a tool call, a write, a payment) must
not happen twice. Each message gets an idempotency key (the producer's ``idempotency-key``
header, else ``group/topic/partition/offset``) and a dedupe store remembers which keys are done.

The guarantee depends on where the side effect lands, and we say exactly what it is:

``ctx.once_sql(fn)`` (SQLite store): exactly once. ``fn(db)`` writes through the store's own
    connection inside one ``BEGIN IMMEDIATE`` transaction that also records the key as done,
    so the effect and the mark commit together or not at all. A crash before the commit
    leaves neither; redelivery runs ``fn`` again on a clean slate. Concurrent attempts (two
    processes, or a revoked worker still finishing) serialize on the write lock and the
    second sees the mark. Use it for effects kept in that database file.

``ctx.once(fn)``: for effects elsewhere (HTTP, another database). The key is *claimed*
    (committed) before ``fn`` runs and marked *done* after it returns; if ``fn`` raises,
    the claim is released and a retry is clean. A done key is never run again. A crash
    between claim and done leaves the key *in doubt*: the effect may or may not have
    happened, and no store can know. ``in_doubt`` picks the outcome: ``"raise"`` (default:
    ``InDoubtError``, the message goes to the worker's failure path for a human or DLQ),
    ``"retry"`` (run again: exactly once only if ``fn`` passes ``ctx.key`` to a downstream
    that dedupes on it, as payment APIs do), or ``"skip"`` (at most once).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from actuators.workers.dedupe_sql import Claim, SQLMarks
from schemas.errors import LagpilotError

T = TypeVar("T")
InDoubt = Literal["raise", "retry", "skip"]
IDEMPOTENCY_HEADER = "idempotency-key"


class InDoubtError(LagpilotError, RuntimeError):
    """A previous attempt claimed this key and never finished: its effect is unknown.

    Not retriable by waiting; decide per effect (``in_doubt="retry"`` if the downstream
    dedupes on ``ctx.key``, ``"skip"`` for at-most-once), or inspect the effect by hand.
    """

    retriable = False
    code = "in_doubt"
    hint = "pass in_doubt='retry' if the downstream dedupes on ctx.key, 'skip' for at-most-once"


def idempotency_key(
    group: str,
    topic: str,
    partition: int,
    offset: int,
    headers: Sequence[tuple[str, bytes | None]] | Mapping[str, bytes | None] | None = None,
) -> str:
    """The producer's ``idempotency-key`` header if set, else ``group/topic/partition/offset``.

    The header lets a producer's own retries (two messages, same intent) dedupe too; the
    fallback identifies one message of one group, so an overflow pool working in the owner
    group's name uses the owner's keys.
    """
    if not headers:  # most messages carry none: no type check, no loop
        return f"{group}/{topic}/{partition}/{offset}"
    items = headers.items() if isinstance(headers, Mapping) else headers
    for name, value in items:
        if name == IDEMPOTENCY_HEADER and value:
            return value.decode("utf-8", "replace")
    return f"{group}/{topic}/{partition}/{offset}"


class DedupeStore(Protocol):
    """Where done keys are remembered. ``claim`` -> effect -> ``complete`` (or ``release``)."""

    def claim(self, key: str) -> Claim: ...

    def complete(self, key: str) -> None: ...

    def release(self, key: str) -> None: ...

    def take_over(self, key: str) -> None: ...

    def state(self, key: str) -> str | None: ...

    def close(self) -> None: ...


class MemoryDedupeStore:
    """Dedupe in this process's memory: survives rebalances, not restarts. For tests and for
    effects that are themselves idempotent."""

    def __init__(self) -> None:
        self._states: dict[str, str] = {}
        self._cond = threading.Condition()

    def claim(self, key: str) -> Claim:
        with self._cond:
            while self._states.get(key) == "claimed":
                # claimed in this process = running now on another lane: wait for its result
                self._cond.wait()
            if self._states.get(key) == "done":
                return Claim.DONE
            self._states[key] = "claimed"
            return Claim.NEW

    def complete(self, key: str) -> None:
        with self._cond:
            self._states[key] = "done"
            self._cond.notify_all()

    def release(self, key: str) -> None:
        with self._cond:
            self._states.pop(key, None)
            self._cond.notify_all()

    def take_over(self, key: str) -> None:
        with self._cond:
            self._states[key] = "claimed"

    def state(self, key: str) -> str | None:
        with self._cond:
            return self._states.get(key)

    def close(self) -> None:
        return None


#: at most this many once_sql calls share one commit (all lanes queued at once, usually fewer)
MAX_GROUP = 256


@dataclass
class _Group:
    """One group transaction of ``once_sql`` calls; its members wait for ``committed``."""

    committed: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None  # why it did not commit, raised in every member


class SQLiteDedupeStore(SQLMarks):
    """The default store: a SQLite file shared by every worker process on the host (WAL mode).

    ``synchronous="FULL"`` makes a done mark survive power loss, not only a process crash;
    ``"NORMAL"`` is faster and still survives SIGKILL.

    ``once_sql`` commits in groups on one writer connection per store: the lanes' calls share
    one transaction, each in its own savepoint (``fn`` raising undoes only its own writes). The
    call that finds nobody queued to join commits the group; the others wait for that commit, so
    every caller returns only after the commit that holds its effect and mark, and a failed
    commit raises in each of them. One commit (an fsync, for SQLite) serves the
    whole group instead of one per message; while it runs, the lanes that arrive queue up and
    form the next group.
    """

    TABLE = "lagpilot_dedupe"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        busy_timeout_ms: int = 30_000,
    ) -> None:
        super().__init__(self.TABLE)
        self.path = Path(path)
        self._synchronous = synchronous
        self._busy_timeout_ms = busy_timeout_ms
        # every write goes through one writer connection, one writer at a time: lanes queue
        # on the group lock, not in SQLite's busy handler, whose sleeps (up to 100 ms each)
        # collapse throughput under many lanes
        self._writer_conn: sqlite3.Connection | None = None
        self._write = threading.Lock()  # the writer's, held by a group's member
        self._open: _Group | None = None  # the open group transaction of once_sql calls
        self._members = 0  # once_sql calls in the open group
        self._joining = 0  # once_sql calls queued on _write to join the open group
        self._joins = threading.Lock()
        self.groups = 0  # group transactions ended so far (for tests and benchmarks)
        with self._tx() as db:
            db.execute(
                f"CREATE TABLE IF NOT EXISTS {self.TABLE} (key TEXT PRIMARY KEY, "
                "state TEXT NOT NULL, owner TEXT NOT NULL, at_ms INTEGER NOT NULL)"
            )

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout={self._busy_timeout_ms}")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self._synchronous}")
        return conn

    def _writer(self) -> sqlite3.Connection:
        """The writer connection: once_sql's groups and every other write (hold ``_write``)."""
        if self._writer_conn is None:
            self._writer_conn = self.connection()
        return self._writer_conn

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._write:
            self._end_batch()  # the writer is the group's connection too: commit it first
            db = self._writer()
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def once_sql(self, key: str, fn: Callable[[Any], object]) -> bool:
        """Run ``fn(db)`` and mark ``key`` done in one transaction; False if already done.

        ``db`` is the writer connection, inside the group transaction (see the module
        docstring); the call returns once that transaction committed.
        """
        with self._joins:
            self._joining += 1
        with self._write:
            with self._joins:
                self._joining -= 1
            db = self._writer()
            if self._open is None:
                db.execute("BEGIN IMMEDIATE")
                self._open, self._members = _Group(), 0
            group = self._open
            self._members += 1
            raised: BaseException | None = None
            ran = False
            try:
                ran = self._savepoint_mark(db, key)
                if ran:
                    fn(db)
                db.execute("RELEASE SAVEPOINT once_sql")
            except BaseException as exc:
                raised = exc
                try:
                    db.execute("ROLLBACK TO SAVEPOINT once_sql")
                    db.execute("RELEASE SAVEPOINT once_sql")
                except BaseException as broken:  # the connection or transaction is gone
                    self._end_batch(broken)
            if not self._joining or self._members >= MAX_GROUP:  # commit the group now
                self._end_batch()
        if raised is not None:
            raise raised
        group.committed.wait()
        if group.error is not None:
            raise group.error
        return ran

    def _end_batch(self, failed: BaseException | None = None) -> None:
        """Commit the open group (roll it back if ``failed``) and wake its members (hold
        ``_write``)."""
        group, self._open = self._open, None
        if group is None:
            return
        db = self._writer()
        try:
            if failed is not None:
                raise failed
            db.execute("COMMIT")
        except BaseException as exc:
            with contextlib.suppress(Exception):
                db.execute("ROLLBACK")
            group.error = exc
        self.groups += 1
        group.committed.set()

    def close(self) -> None:
        with self._write:
            self._end_batch()
        super().close()


def open_store(where: str | os.PathLike[str]) -> DedupeStore:
    """A ``postgresql://`` (or ``postgres://``) URL: ``PostgresDedupeStore``; else a SQLite path."""
    text = os.fspath(where)
    if text.startswith(("postgresql://", "postgres://")):
        from actuators.workers.dedupe_pg import PostgresDedupeStore

        return PostgresDedupeStore(text)
    return SQLiteDedupeStore(Path(text))


@dataclass(slots=True)
class EffectGuard:
    """The handler's second argument (``ctx``): it guards one message's side effects, so they
    happen once. It holds the message's idempotency key, where it came from, which attempt
    this is, and the dedupe store that ``once`` and ``once_sql`` mark done keys in.
    (Named ``Context`` before 2026-12: the name said nothing of what it holds.)"""

    key: str
    group: str
    topic: str
    partition: int
    offset: int
    attempt: int
    store: DedupeStore

    def once(self, fn: Callable[[], object], *, in_doubt: InDoubt = "raise") -> bool:
        """Run ``fn`` unless this message's effect is already done; True if it ran.

        See the module docstring for the exact guarantee and ``in_doubt``.
        """
        claim = self.store.claim(self.key)
        if claim is Claim.DONE:
            return False
        if claim is Claim.IN_DOUBT:
            if in_doubt == "skip":
                return False
            if in_doubt == "raise":
                raise InDoubtError(
                    f"idempotency key {self.key!r} was claimed by an attempt that never "
                    "finished; its effect is unknown. Pass in_doubt='retry' if the effect "
                    "dedupes on ctx.key downstream, or 'skip' for at-most-once"
                )
            self.store.take_over(self.key)
        try:
            fn()
        except BaseException:
            self.store.release(self.key)
            raise
        self.store.complete(self.key)
        return True

    def once_sql(self, fn: Callable[[Any], object]) -> bool:
        """Exactly once for effects written through the store's own connection: ``fn(db)``
        gets a ``sqlite3.Connection`` (SQLite store) or a psycopg connection (PostgreSQL)."""
        once_sql = getattr(self.store, "once_sql", None)
        if once_sql is None:
            raise TypeError(
                "ctx.once_sql needs a transactional dedupe store: SQLiteDedupeStore (the "
                "default) or PostgresDedupeStore; "
                f"this worker uses {type(self.store).__name__}; use ctx.once for other stores"
            )
        return bool(once_sql(self.key, fn))

    async def once_async(self, fn: Callable[[], object], *, in_doubt: InDoubt = "raise") -> bool:
        """``once`` from an ``async def`` handler: the claim, ``fn`` and the mark run on a
        thread of the lanes' loop (``asyncio.to_thread``), so the loop's other lanes go on
        while a store waits (a claim held by another lane waits for its result)."""
        return await asyncio.to_thread(self.once, fn, in_doubt=in_doubt)

    async def once_sql_async(self, fn: Callable[[Any], object]) -> bool:
        """``once_sql`` from an ``async def`` handler, on a thread of the lanes' loop: ``fn(db)``
        is plain (blocking) code on the store's connection, inside the store's transaction."""
        return await asyncio.to_thread(self.once_sql, fn)
