"""An agent worker for the integration tests: in a thread (``make_worker``) or as a process
(``python agent_worker_proc.py ...``) that the tests SIGKILL.

Its side effect is a row in the ``ledger`` table of the dedupe store's database (the SQLite
file ``--db``, or with ``--dsn`` a PostgreSQL database that workers on separate hosts share),
written with ``ctx.once_sql`` (exactly once); every attempt is also logged in ``attempts``
(at least once), so the tests can tell redeliveries from repeated side effects.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Message

from actuators.workers import (
    EffectGuard,
    PoolWorker,
    PostgresDedupeStore,
    SQLiteDedupeStore,
    Worker,
)

LEDGER_DDL = (
    "CREATE TABLE IF NOT EXISTS ledger (id INTEGER PRIMARY KEY AUTOINCREMENT, "
    "part INTEGER NOT NULL, off INTEGER NOT NULL, key TEXT, worker TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS attempts (part INTEGER, off INTEGER, worker TEXT)",
)
#: the group settings each protocol takes from the client: a short session so a SIGKILLed
#: member's partitions move within the test; under KIP-848 the broker owns the session and
#: the heartbeat (group.consumer.session.timeout.ms, 45 s by default, and its minimum)
TEST_SETTINGS: dict[str, dict[str, Any]] = {
    "classic": {
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 1000,
        "max.poll.interval.ms": 10000,
    },
    "consumer": {},
}


PG_LEDGER_DDL = (
    "CREATE TABLE IF NOT EXISTS ledger (id BIGSERIAL PRIMARY KEY, "
    "part INTEGER NOT NULL, off BIGINT NOT NULL, key TEXT, worker TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS attempts (part INTEGER, off BIGINT, worker TEXT)",
)


def init_ledger(path: Path) -> None:
    db = sqlite3.connect(path)
    for ddl in LEDGER_DDL:
        db.execute(ddl)
    db.commit()
    db.close()


def init_pg_ledger(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as db:
        for ddl in PG_LEDGER_DDL:
            db.execute(ddl)


def read_ledger(args: Any, sql: str) -> list[tuple[Any, ...]]:
    """Rows of a query on the ledger, wherever it is (SQLite file or PostgreSQL)."""
    if getattr(args, "dsn", None):
        import psycopg

        with psycopg.connect(args.dsn) as pg:
            return [tuple(r) for r in pg.execute(sql).fetchall()]
    db = sqlite3.connect(args.db)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def make_handler(name: str):
    def handle(msg: Message, ctx: EffectGuard) -> None:
        body = orjson.loads(msg.value() or b"{}")
        time.sleep(body.get("work_s", 0.0))  # a heavy payload takes a while
        store = ctx.store
        assert isinstance(store, SQLiteDedupeStore | PostgresDedupeStore)
        mark = "%s" if isinstance(store, PostgresDedupeStore) else "?"
        store.connection().execute(
            f"INSERT INTO attempts VALUES ({mark}, {mark}, {mark})",
            (ctx.partition, ctx.offset, name),
        )
        key = (msg.key() or b"").decode()

        def effect(db: Any) -> None:
            db.execute(
                f"INSERT INTO ledger (part, off, key, worker) VALUES ({mark}, {mark}, {mark}, "
                f"{mark})",
                (ctx.partition, ctx.offset, key, name),
            )

        ctx.once_sql(effect)

    return handle


def make_worker(
    args: argparse.Namespace | Any, name: str, pool: str | None = None, **extra: Any
) -> Any:
    protocol = getattr(args, "group_protocol", None) or "classic"
    common: dict[str, Any] = {
        "bootstrap": args.bootstrap,
        "group": args.group,
        "handler": make_handler(name),
        "lanes": 2,
        "max_workers": 8,
        "max_buffered_per_partition": 32,
        "dedupe": (
            PostgresDedupeStore(args.dsn)
            if getattr(args, "dsn", None)
            else SQLiteDedupeStore(args.db, synchronous="NORMAL")
        ),
        "control_topic": args.control,
        "signing_key": bytes.fromhex(args.key),
        "commit_interval_s": 0.3,
        "close_timeout_s": 5.0,
        "consumer_config": dict(TEST_SETTINGS[protocol]) if pool is None else {},
        "group_protocol": protocol,
    }
    if pool is not None:
        return PoolWorker(pool=pool, **common, **extra)
    return Worker(topics=[args.topic], instance_id=name, **common, **extra)


def main() -> None:
    p = argparse.ArgumentParser()
    for flag in ("bootstrap", "topic", "group", "control", "key", "name"):
        p.add_argument(f"--{flag}", required=True)
    p.add_argument("--db", help="the SQLite file of the dedupe store and the ledger")
    p.add_argument("--dsn", help="a PostgreSQL database instead (shared across hosts)")
    p.add_argument("--pool", help="run as this overflow pool (PoolWorker), not a Worker")
    p.add_argument("--lease-s", type=float, help="the pool's hand-off lease")
    p.add_argument("--group-protocol", choices=("classic", "consumer"), default="classic",
                   help="the group protocol the worker joins with (KIP-848: consumer)")  # fmt: skip
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {args.name} %(message)s")
    extra = {"lease_s": args.lease_s} if args.pool and args.lease_s else {}
    worker = make_worker(args, args.name, pool=args.pool, **extra)
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    worker.run()


if __name__ == "__main__":
    main()
