"""What the SQLite and PostgreSQL dedupe stores share: one marks table, the same statements.

Both keep a row per idempotency key (``key``, ``state`` claimed|done, ``owner``, ``at_ms``)
and give ``claim``/``complete``/``release``/``take_over``/``state``/``prune`` the same
meaning; only the connection, the transaction and ``once_sql``'s group commit differ
(SQLite: one writer, a savepoint per call, since its cost is the fsync; PostgreSQL: 2
writers, one statement marking a whole group and no savepoints, since its cost is the
statements, and a group on one connection with a savepoint per call ran at half the rate of
a transaction per call). The statements
use ``INSERT .. ON CONFLICT`` (SQLite 3.24 or newer, any supported PostgreSQL).

Within one process, two lanes never hold one key at once: a second ``claim`` of a key that is
running on another lane waits for its result (``_enter``/``_forget``), so the store's answer
is DONE or NEW, never a spurious IN_DOUBT from a neighbour.
"""

from __future__ import annotations

import abc
import contextlib
import os
import socket
import threading
import time
import uuid
from enum import StrEnum
from typing import Any


class Claim(StrEnum):
    """What ``DedupeStore.claim`` found for a key."""

    NEW = "new"  # claimed by this call: run the effect, then complete() or release()
    DONE = "done"  # the effect already happened: skip it
    IN_DOUBT = "in_doubt"  # claimed by an attempt that never finished


def now_ms() -> int:
    return int(time.time() * 1000)


def owner_token() -> str:
    """Who wrote a mark: host, process and a random suffix (a restarted process differs)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class SQLMarks(abc.ABC):
    """The marks table and the ``DedupeStore`` protocol over it; subclasses connect."""

    #: the driver's parameter mark: "?" (sqlite3) or "%s" (psycopg)
    PARAM = "?"
    #: how ``once_sql`` locks a key's row it reads (SQLite's write lock covers the file)
    LOCK_ROW = ""

    def __init__(self, table: str) -> None:
        if not table.isidentifier():
            raise ValueError(f"table={table!r}: use a plain SQL identifier, e.g. lagpilot_dedupe")
        self.table = table
        self._owner = owner_token()
        self._local = threading.local()
        self._cond = threading.Condition()
        self._active: set[str] = set()  # keys held by a lane of this process
        self._conns: list[Any] = []
        t, p = table, self.PARAM
        self._sql_claim = (
            f"INSERT INTO {t} VALUES ({p}, 'claimed', {p}, {p}) ON CONFLICT (key) DO NOTHING"
        )
        self._sql_first_done = (
            f"INSERT INTO {t} VALUES ({p}, 'done', {p}, {p}) ON CONFLICT (key) DO NOTHING"
        )
        self._sql_done = (
            f"INSERT INTO {t} VALUES ({p}, 'done', {p}, {p}) ON CONFLICT (key) DO UPDATE "
            "SET state = 'done', owner = excluded.owner, at_ms = excluded.at_ms"
        )
        self._sql_state = f"SELECT state FROM {t} WHERE key = {p}"
        self._sql_state_locked = self._sql_state + self.LOCK_ROW
        self._sql_take_over = f"UPDATE {t} SET owner = {p}, at_ms = {p} WHERE key = {p}"
        self._sql_release = f"DELETE FROM {t} WHERE key = {p} AND state = 'claimed'"
        self._sql_prune = f"DELETE FROM {t} WHERE state = 'done' AND at_ms < {p}"

    # -- what subclasses provide ---------------------------------------------------------------

    @abc.abstractmethod
    def _connect(self) -> Any:
        """A new connection in autocommit mode (transactions are explicit)."""

    @abc.abstractmethod
    def _tx(self) -> contextlib.AbstractContextManager[Any]:
        """A write transaction: commits on exit, rolls back on an exception."""

    # -- connections -----------------------------------------------------------------------------

    def connection(self) -> Any:
        """This thread's connection (autocommit; transactions are explicit)."""
        conn = getattr(self._local, "conn", None)
        if conn is None or getattr(conn, "closed", False) is True:
            conn = self._connect()
            self._local.conn = conn
            with self._cond:
                self._conns.append(conn)
        return conn

    def close(self) -> None:
        with self._cond:
            conns, self._conns = self._conns, []
        for conn in conns:
            conn.close()

    # -- the DedupeStore protocol ----------------------------------------------------------------

    def claim(self, key: str) -> Claim:
        self._enter(key)
        try:
            with self._tx() as db:
                if db.execute(self._sql_claim, (key, self._owner, now_ms())).rowcount == 1:
                    return Claim.NEW  # the key stays held until complete() or release()
                row = db.execute(self._sql_state, (key,)).fetchone()
        except BaseException:
            self._forget(key)
            raise
        self._forget(key)
        if row is None:  # released meanwhile by an attempt on another host: try again
            return self.claim(key)
        return Claim.DONE if row[0] == "done" else Claim.IN_DOUBT

    def take_over(self, key: str) -> None:
        with self._cond:
            self._active.add(key)
        with self._tx() as db:
            db.execute(self._sql_take_over, (self._owner, now_ms(), key))

    def complete(self, key: str) -> None:
        try:
            with self._tx() as db:
                self._mark_done(db, key)
        finally:
            self._forget(key)

    def release(self, key: str) -> None:
        try:
            with self._tx() as db:
                db.execute(self._sql_release, (key,))
        finally:
            self._forget(key)

    def state(self, key: str) -> str | None:
        row = self.connection().execute(self._sql_state, (key,)).fetchone()
        return None if row is None else str(row[0])

    def prune(self, older_than_ms: int) -> int:
        """Forget done keys older than ``older_than_ms`` (epoch ms); returns how many.

        Keep keys at least as long as a message can be redelivered (your topic's retention
        if consumers may reset to earliest).
        """
        with self._tx() as db:
            return int(db.execute(self._sql_prune, (older_than_ms,)).rowcount)

    # -- helpers -----------------------------------------------------------------------------------

    def _savepoint_mark(self, db: Any, key: str) -> bool:
        """``once_sql``'s first step: a savepoint, then ``_mark_first``."""
        db.execute("SAVEPOINT once_sql")
        return self._mark_first(db, key)

    def _mark_first(self, db: Any, key: str) -> bool:
        """Mark ``key`` done in the open transaction; False if it was done already. A claim
        left by a ``once`` that never finished is taken over: the effect runs in this
        transaction. The mark comes first, so a concurrent attempt on
        another connection waits on the key's row until this transaction ends."""
        if db.execute(self._sql_first_done, (key, self._owner, now_ms())).rowcount == 1:
            return True
        row = db.execute(self._sql_state_locked, (key,)).fetchone()
        if row is not None and row[0] == "done":
            return False
        self._mark_done(db, key)
        return True

    def _mark_done(self, db: Any, key: str) -> None:
        db.execute(self._sql_done, (key, self._owner, now_ms()))

    def _enter(self, key: str) -> None:
        with self._cond:
            while key in self._active:  # running now on another lane of this process
                self._cond.wait()
            self._active.add(key)

    def _forget(self, key: str) -> None:
        with self._cond:
            self._active.discard(key)
            self._cond.notify_all()
