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
  that database.
- ``once``: ``claim`` commits a ``claimed`` row (``INSERT .. ON CONFLICT DO NOTHING``: one
  claimer wins), ``complete`` marks it done, ``release`` deletes the claim if the effect
  raised. A row left ``claimed`` by a crash is *in doubt*, as with SQLite.
- ``prune(older_than_ms)`` forgets old done keys (an index on ``(state, at_ms)`` keeps it
  cheap); the schema is created, or migrated from an older version, at start, under an
  advisory lock so that workers starting together do not race.

Each thread has its own connection (the handler lanes call in parallel); psycopg is imported
only when a store is made, so the SDK needs it only with this store
(``pip install 'lagpilot[postgres]'``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from actuators.workers.dedupe import Claim, _now_ms, _owner_token
from schemas.runtime.errors import LagpilotError

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


class PostgresDedupeStore:
    """A dedupe store in one PostgreSQL database, shared by every host of a group."""

    def __init__(self, dsn: str, *, table: str = "lagpilot_dedupe", connect_timeout_s: int = 10):
        if not table.isidentifier():
            raise ValueError(f"table={table!r}: use a plain SQL identifier, e.g. lagpilot_dedupe")
        try:
            import psycopg
        except ImportError:
            raise DedupeStoreError(
                "PostgresDedupeStore needs psycopg 3: pip install 'lagpilot[postgres]'", False
            ) from None
        self._psycopg = psycopg
        self.dsn, self.table = dsn, table
        self._timeout_s = connect_timeout_s
        self._owner = _owner_token()
        self._local = threading.local()
        self._cond = threading.Condition()
        self._active: set[str] = set()
        self._conns: list[Any] = []
        self.schema_version = self._migrate()

    # -- connections and transactions ------------------------------------------------------

    def connection(self) -> Any:
        """This thread's connection (autocommit; transactions are explicit)."""
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            try:
                conn = self._psycopg.connect(
                    self.dsn, autocommit=True, connect_timeout=self._timeout_s
                )
            except self._psycopg.OperationalError as exc:
                raise DedupeStoreError(
                    f"cannot connect to the dedupe database ({str(exc).strip()[:200]}); check "
                    "the DSN (LAGPILOT_DEDUPE_URL), the server and its pg_hba.conf",
                    True,
                ) from None
            self._local.conn = conn
            with self._cond:
                self._conns.append(conn)
        return conn

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

    # -- the DedupeStore protocol ----------------------------------------------------------

    def claim(self, key: str) -> Claim:
        with self._cond:
            while key in self._active:  # running now on another lane of this process
                self._cond.wait()
            self._active.add(key)
        try:
            with self._tx() as db:
                won = db.execute(
                    f"INSERT INTO {self.table} VALUES (%s, 'claimed', %s, %s) "
                    "ON CONFLICT (key) DO NOTHING RETURNING key",
                    (key, self._owner, _now_ms()),
                ).fetchone()
                if won is not None:
                    return Claim.NEW
                row = db.execute(
                    f"SELECT state FROM {self.table} WHERE key = %s", (key,)
                ).fetchone()
        except BaseException:
            self._forget(key)
            raise
        self._forget(key)
        if row is None:  # released meanwhile by the other attempt: try again
            return self.claim(key)
        return Claim.DONE if row[0] == "done" else Claim.IN_DOUBT

    def take_over(self, key: str) -> None:
        with self._cond:
            self._active.add(key)
        with self._tx() as db:
            db.execute(
                f"UPDATE {self.table} SET owner = %s, at_ms = %s WHERE key = %s",
                (self._owner, _now_ms(), key),
            )

    def complete(self, key: str) -> None:
        try:
            with self._tx() as db:
                self._mark_done(db, key)
        finally:
            self._forget(key)

    def release(self, key: str) -> None:
        try:
            with self._tx() as db:
                db.execute(f"DELETE FROM {self.table} WHERE key = %s AND state = 'claimed'", (key,))
        finally:
            self._forget(key)

    def once_sql(self, key: str, fn: Callable[[Any], object]) -> bool:
        """Run ``fn(conn)`` and mark ``key`` done in one transaction; False if already done."""
        with self._tx() as db:
            inserted = db.execute(
                f"INSERT INTO {self.table} VALUES (%s, 'done', %s, %s) "
                "ON CONFLICT (key) DO NOTHING RETURNING key",
                (key, self._owner, _now_ms()),
            ).fetchone()
            if inserted is None:
                row = db.execute(
                    f"SELECT state FROM {self.table} WHERE key = %s FOR UPDATE", (key,)
                ).fetchone()
                if row is not None and row[0] == "done":
                    return False
                self._mark_done(db, key)  # a claim that never finished: ours now
            fn(db)
        return True

    def state(self, key: str) -> str | None:
        row = (
            self.connection()
            .execute(f"SELECT state FROM {self.table} WHERE key = %s", (key,))
            .fetchone()
        )
        return None if row is None else str(row[0])

    def prune(self, older_than_ms: int) -> int:
        """Forget done keys older than ``older_than_ms`` (epoch ms); returns how many.

        Keep keys at least as long as a message can be redelivered (your topic's retention
        if consumers may reset to earliest)."""
        with self._tx() as db:
            cur = db.execute(
                f"DELETE FROM {self.table} WHERE state = 'done' AND at_ms < %s", (older_than_ms,)
            )
            return int(cur.rowcount)

    def close(self) -> None:
        with self._cond:
            conns, self._conns = self._conns, []
        for conn in conns:
            conn.close()

    def _mark_done(self, db: Any, key: str) -> None:
        db.execute(
            f"INSERT INTO {self.table} VALUES (%s, 'done', %s, %s) ON CONFLICT (key) DO UPDATE "
            "SET state = 'done', owner = EXCLUDED.owner, at_ms = EXCLUDED.at_ms",
            (key, self._owner, _now_ms()),
        )

    def _forget(self, key: str) -> None:
        with self._cond:
            self._active.discard(key)
            self._cond.notify_all()
