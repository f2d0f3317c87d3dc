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
(``pip install 'lagpilot[postgres]'``). The marks and their statements are the SQLite
store's (``dedupe_sql.SQLMarks``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from actuators.workers.dedupe_sql import SQLMarks
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


class PostgresDedupeStore(SQLMarks):
    """A dedupe store in one PostgreSQL database, shared by every host of a group."""

    PARAM = "%s"
    LOCK_ROW = " FOR UPDATE"

    def __init__(self, dsn: str, *, table: str = "lagpilot_dedupe", connect_timeout_s: int = 10):
        super().__init__(table)
        try:
            import psycopg
        except ImportError:
            raise DedupeStoreError(
                "PostgresDedupeStore needs psycopg 3: pip install 'lagpilot[postgres]'", False
            ) from None
        self._psycopg = psycopg
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
        """Run ``fn(conn)`` and mark ``key`` done in one transaction; False if already done."""
        with self._tx() as db:
            if not self._mark_first(db, key):
                return False
            fn(db)
        return True
