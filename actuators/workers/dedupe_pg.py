"""``PostgresDedupeStore``: once-only side effects across hosts (psycopg 3).

Why: the SQLite store is one file per host. When a partition moves to a worker on another
host (a rebalance, a hand-off to a pool, a host lost), the new owner's file has never seen
the keys the old owner finished, so messages above the committed prefix, and work that
finished but was not committed before a crash, repeat their side effects. Every worker of a
group (and its pool) pointing at one PostgreSQL database share the marks instead.

The guarantees are the SQLite store's (see ``dedupe.py``), now across hosts:

- ``once_sql(key, fn)``: exactly once. ``fn(conn)`` writes through the store's connection in
  the one transaction that also inserts the key as done. The done row is inserted *first*,
  so a concurrent attempt on another host blocks on the primary key until this transaction
  ends, then sees the mark (commit) or a clean slate (rollback). Use it for effects kept in
  that database. Calls commit in groups, on ``writers`` connections (see ``once_sql``).
- ``once``: ``claim`` commits a ``claimed`` row (``INSERT .. ON CONFLICT DO NOTHING``: one
  claimer wins), ``complete`` marks it done, ``release`` deletes the claim if the effect
  raised. A row left ``claimed`` by a crash is *in doubt*, as with SQLite.
- ``prune(older_than_ms)`` forgets old done keys (an index on ``(state, at_ms)`` keeps it
  cheap); the schema is created, or migrated from an older version, at start, under an
  advisory lock so that workers starting together do not race.

Each thread has its own connection for ``once``'s claims; psycopg is imported
only when a store is made, so the SDK needs it only with this store
(``pip install 'lagpilot[postgres]'``). The marks and their statements are the SQLite
store's (``dedupe_sql.SQLMarks``).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable, Iterator
from typing import Any

from actuators.workers.dedupe_sql import SQLMarks, now_ms
from schemas.errors import LagpilotError

#: schema migrations, in order; the version table says how many have run
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (  # v1: the marks
        "CREATE TABLE IF NOT EXISTS {t} (key TEXT PRIMARY KEY, state TEXT NOT NULL "
        "CHECK (state IN ('claimed', 'done')), owner TEXT NOT NULL, at_ms BIGINT NOT NULL)",
    ),
    (  # v2: pruning by age without a full scan
        "CREATE INDEX IF NOT EXISTS {t}_state_at ON {t} (state, at_ms)",
    ),
)
_LOCK_ID = 0x6C61_6770_6465_6475  # "lagpdedu": the advisory lock of schema migrations


class DedupeStoreError(LagpilotError, RuntimeError):
    """The PostgreSQL store cannot be reached or set up; the message says what to change."""

    def __init__(self, message: str, retriable: bool) -> None:
        super().__init__(message, retriable=retriable)


#: at most this many once_sql calls share one transaction
MAX_GROUP = 256


class _Call:
    """One ``once_sql`` call queued on a writer; its thread waits for ``ended``.

    ``ended`` is a bare lock, taken at the start and released once, by the leader: the
    cheapest wake-up CPython has (an ``Event`` runs a ``Condition`` in Python on both
    sides, and the leader wakes a whole group in a row)."""

    __slots__ = ("ended", "error", "fn", "key", "lead", "ran")

    def __init__(self, key: str, fn: Callable[[Any], object]) -> None:
        self.key, self.fn = key, fn
        self.ended = threading.Lock()
        self.ended.acquire()
        self.lead = False  # woken to commit the next group, not with a result
        self.ran = False
        self.error: BaseException | None = None  # raised in the call's own thread


class _Writer:
    """A connection whose queued once_sql calls commit in groups, one group at a time."""

    def __init__(self) -> None:
        self.conn: Any = None
        self.mutex = threading.Lock()
        self.queue: list[_Call] = []
        self.busy = False  # a leader runs a group; calls queue for the next one
        self.running = threading.Lock()  # held while a group's transaction is open


class PostgresDedupeStore(SQLMarks):
    """A dedupe store in one PostgreSQL database, shared by every host of a group.

    ``writers``: the connections that ``once_sql``'s groups commit on (2 by default). Each
    runs its group's ``fn``s one after another, so more writers help when ``fn``'s
    statements wait on the server (slow queries, row locks) rather than on CPU; otherwise
    fewer writers do better (fewer, larger groups: less time in the interpreter lock per
    message). ``once``'s claims use a connection per
    thread instead.
    """

    PARAM = "%s"
    LOCK_ROW = " FOR UPDATE"

    def __init__(
        self,
        dsn: str,
        *,
        table: str = "lagpilot_dedupe",
        connect_timeout_s: int = 10,
        writers: int = 2,
    ):
        super().__init__(table)
        self._sql_mark_many = (
            f"INSERT INTO {table} SELECT k, 'done', %s, %s FROM unnest(%s::text[]) AS k "
            "ON CONFLICT (key) DO NOTHING RETURNING key"
        )
        if not isinstance(writers, int) or writers < 1:
            raise ValueError(f"writers={writers!r}: pass an integer >= 1 (2 is the default)")
        self._writers = [_Writer() for _ in range(writers)]
        self._next_writer = itertools.count()
        self.groups = 0  # group transactions ended so far (for tests and benchmarks)
        try:
            import psycopg
        except ImportError:
            raise DedupeStoreError(
                "PostgresDedupeStore needs psycopg 3: pip install 'lagpilot[postgres]'", False
            ) from None
        self._psycopg = psycopg
        self._pipeline = psycopg.Pipeline.is_supported()  # libpq >= 14; else one at a time
        self.dsn = dsn
        self._timeout_s = connect_timeout_s
        self.schema_version = self._migrate()

    # -- connections and transactions ------------------------------------------------------

    def _connect(self) -> Any:
        try:
            return self._psycopg.connect(self.dsn, autocommit=True, connect_timeout=self._timeout_s)
        except self._psycopg.OperationalError as exc:
            raise DedupeStoreError(
                f"cannot connect to the dedupe database ({str(exc).strip()[:200]}); check "
                "the DSN (LAGPILOT_DEDUPE_URL), the server and its pg_hba.conf",
                True,
            ) from None

    @contextlib.contextmanager
    def _tx(self) -> Iterator[Any]:
        conn = self.connection()
        with conn.transaction():
            yield conn

    def _migrate(self) -> int:
        t = self.table
        with self._tx() as db:
            db.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_ID,))
            db.execute(f"CREATE TABLE IF NOT EXISTS {t}_schema (version INTEGER NOT NULL)")
            row = db.execute(f"SELECT version FROM {t}_schema").fetchone()
            done = 0 if row is None else int(row[0])
            if done > len(MIGRATIONS):
                raise DedupeStoreError(
                    f"{t} is at schema v{done}, newer than this SDK knows (v{len(MIGRATIONS)}); "
                    "upgrade lagpilot on this host",
                    False,
                )
            for steps in MIGRATIONS[done:]:
                for sql in steps:
                    db.execute(sql.format(t=t))
            if row is None:
                db.execute(f"INSERT INTO {t}_schema VALUES (%s)", (len(MIGRATIONS),))
            else:
                db.execute(f"UPDATE {t}_schema SET version = %s", (len(MIGRATIONS),))
        return len(MIGRATIONS)

    def once_sql(self, key: str, fn: Callable[[Any], object]) -> bool:
        """Run ``fn(conn)`` and mark ``key`` done in one transaction; False if already done.

        Group commit on ``writers`` connections (each lane thread keeps one), leader and
        followers: a call queues on its writer; when no group is running it leads one,
        taking every call queued by then (its own first): one statement marks all their
        keys (``_mark_group``), then each new key's ``fn`` runs on the leader's thread, one
        after another, and one commit ends the group. The leader hands the next group to the
        first call queued meanwhile; the others return after their group's commit. So a
        message costs one statement (``fn``'s) and one wake-up, not two statements and a
        lock hand-over each. There are no savepoints (they would double the statements):
        when a call's ``fn`` raises, the group's transaction is rolled back, that call
        raises, and every other call of the group runs again (its ``fn`` too) at once.
        ``fn`` must write only through ``conn``, so running it again is harmless, as a retry
        after a crash would be.
        """
        w = self._writer_of_thread()
        call = _Call(key, fn)
        with w.mutex:
            w.queue.append(call)
            lead, w.busy = not w.busy, True
        if not lead:
            call.ended.acquire()
            lead = call.lead
        if lead:
            self._lead(w)
        if call.error is not None:
            raise call.error
        return call.ran

    def _lead(self, w: _Writer) -> None:
        """Run one group of ``w``'s queue (the leader's call is its first), then hand the
        writer to the next queued call, or leave it idle."""
        with w.mutex:
            calls, w.queue = w.queue[:MAX_GROUP], w.queue[MAX_GROUP:]
        try:
            with w.running:
                self._run_group(w, calls)
        finally:
            with w.mutex:
                if w.queue:
                    w.queue[0].lead = True
                    w.queue[0].ended.release()
                else:
                    w.busy = False
            for c in calls[1:]:
                c.ended.release()

    def _run_group(self, w: _Writer, calls: list[_Call]) -> None:
        """One transaction for ``calls``; each ends with ``ran`` or ``error``. A raising
        ``fn`` rolls it back and the others run again without it.

        The group's ``fn``s first run in pipeline mode: their statements go out without
        waiting for each other's results, so the group costs a few round trips, not one per
        call (each round trip gives up the interpreter lock, and winning it back among busy
        lanes is what bounded the store's rate). An error in pipeline mode can surface at a
        later statement than the one that caused it, so on any error the group is rolled
        back and runs again one statement at a time (``_run_group_stepwise``), which
        names the call that failed; every call's ``fn`` then runs again, as the rule for a
        failed group already says."""
        if self._pipeline and self._run_group_pipelined(w, calls):
            return
        self._run_group_stepwise(w, calls)

    def _run_group_pipelined(self, w: _Writer, calls: list[_Call]) -> bool:
        """``calls`` committed in one transaction with their ``fn``s pipelined; False (rolled
        back, nothing recorded on the calls) when anything raised."""
        try:
            db = self._writer_conn(w)
            db.execute("BEGIN")
            try:
                fresh = self._mark_group(db, [c.key for c in calls])
                ran = []
                with db.pipeline():
                    for c in calls:
                        if c.key in fresh:
                            fresh.discard(c.key)  # a second call of one key finds it done
                            ran.append(c)
                            c.fn(db)
                db.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(Exception):
                    db.execute("ROLLBACK")
                raise
        except Exception:
            # a fresh connection for the stepwise run: an aborted pipeline can leave psycopg's
            # cache of prepared statements naming ones the server never prepared
            conn, w.conn = w.conn, None
            if conn is not None:
                with self._cond:
                    self._conns.remove(conn)
                with contextlib.suppress(Exception):
                    conn.close()
            return False
        for c in calls:
            c.ran = False
        for c in ran:
            c.ran = True
        self.groups += 1
        return True

    def _run_group_stepwise(self, w: _Writer, calls: list[_Call]) -> None:
        """``_run_group`` one statement at a time: a raising ``fn`` is known at once."""
        while calls:
            failed: _Call | None = None
            try:
                db = self._writer_conn(w)
                db.execute("BEGIN")
                try:
                    fresh = self._mark_group(db, [c.key for c in calls])
                    for c in calls:
                        c.ran = c.key in fresh
                        if c.ran:
                            fresh.discard(c.key)  # a second call of one key finds it done
                            failed = c
                            c.fn(db)
                            failed = None
                    db.execute("COMMIT")
                except BaseException:
                    with contextlib.suppress(Exception):
                        db.execute("ROLLBACK")
                    raise
            except BaseException as exc:
                self.groups += 1
                if failed is None:  # the connection, the marks or the commit: every call's
                    for c in calls:
                        c.error, c.ran = exc, False
                    return
                failed.error, failed.ran = exc, False
                calls = [c for c in calls if c is not failed]
                continue
            self.groups += 1
            return

    def _mark_group(self, db: Any, keys: list[str]) -> set[str]:
        """Mark ``keys`` done in the open transaction, in one statement; the keys whose
        effect must run now. A key already done is not among them; a claim left by a
        ``once`` that never finished is taken over (``_mark_first``'s rule). The marks come
        first, so a concurrent attempt on another connection waits on a key's row until this
        transaction ends; they are inserted in key order, so two groups that share keys take
        their rows in one order and do not deadlock on them."""
        ordered = sorted(set(keys))
        rows = db.execute(self._sql_mark_many, (self._owner, now_ms(), ordered)).fetchall()
        fresh = {r[0] for r in rows}
        for key in ordered:
            if key not in fresh:
                row = db.execute(self._sql_state_locked, (key,)).fetchone()
                if row is None or row[0] != "done":
                    self._mark_done(db, key)
                    fresh.add(key)
        return fresh

    def _writer_of_thread(self) -> _Writer:
        w: _Writer | None = getattr(self._local, "writer", None)
        if w is None:
            w = self._local.writer = self._writers[next(self._next_writer) % len(self._writers)]
        return w

    def _writer_conn(self, w: _Writer) -> Any:
        """The writer's connection, (re)connected when needed (as its group's leader)."""
        if w.conn is None or w.conn.closed:
            w.conn = self._connect()
            with self._cond:
                self._conns.append(w.conn)
        return w.conn

    def close(self) -> None:
        """Close the connections, each writer's once its running group has ended."""
        for w in self._writers:
            with w.running:
                pass
        super().close()
