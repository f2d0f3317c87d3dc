"""PostgresDedupeStore on a real PostgreSQL server: the SQLite store's guarantees, across
hosts. A "host" here is a store object with its own connections and owner token (and, in
the cross-host test, its own working folder): what two machines pointing at one database are.
"""

from __future__ import annotations

import functools
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from actuators.workers import Claim, EffectGuard, InDoubtError, SQLiteDedupeStore
from actuators.workers.dedupe_pg import MIGRATIONS, PostgresDedupeStore


@pytest.fixture
def table() -> str:
    return f"dd_{uuid.uuid4().hex[:10]}"


def ctx(store: Any, offset: int = 7) -> EffectGuard:
    return EffectGuard(f"g/t/0/{offset}", "g", "t", 0, offset, 1, store)


def effects(dsn: str, table: str) -> list[tuple[str, str]]:
    with psycopg.connect(dsn) as db:
        return [(r[0], r[1]) for r in db.execute(f"SELECT key, host FROM {table}_fx ORDER BY id")]


def make_effects_table(dsn: str, table: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute(f"CREATE TABLE {table}_fx (id SERIAL PRIMARY KEY, key TEXT, host TEXT)")


def test_schema_is_created_at_start_and_migrated_from_v1(postgres_dsn: str, table: str) -> None:
    with psycopg.connect(postgres_dsn, autocommit=True) as db:  # a v1 database, as made before
        db.execute(MIGRATIONS[0][0].format(t=table))
        db.execute(f"CREATE TABLE {table}_schema (version INTEGER NOT NULL)")
        db.execute(f"INSERT INTO {table}_schema VALUES (1)")
        db.execute(f"INSERT INTO {table} VALUES ('old', 'done', 'h', 1)")
    store = PostgresDedupeStore(postgres_dsn, table=table)
    assert store.schema_version == len(MIGRATIONS) == 2
    assert store.state("old") == "done"  # the marks survive the migration
    with psycopg.connect(postgres_dsn) as db:
        index = db.execute("SELECT 1 FROM pg_indexes WHERE indexname = %s",
                           (f"{table}_state_at",)).fetchone()  # fmt: skip
        assert index is not None
    # many workers starting at once: the advisory lock serializes their migrations
    errors: list[BaseException] = []

    def start() -> None:
        try:
            PostgresDedupeStore(postgres_dsn, table=f"{table}_b").close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    store.close()


def test_once_sql_commits_the_effect_and_the_mark_together(postgres_dsn: str, table: str) -> None:
    store = PostgresDedupeStore(postgres_dsn, table=table)
    make_effects_table(postgres_dsn, table)

    def write(db: Any) -> None:
        db.execute(f"INSERT INTO {table}_fx (key, host) VALUES ('k', 'a')")

    def write_then_fail(db: Any) -> None:
        write(db)
        raise RuntimeError("crash after the write")

    with pytest.raises(RuntimeError):
        ctx(store).once_sql(write_then_fail)
    assert effects(postgres_dsn, table) == [] and store.state("g/t/0/7") is None  # neither
    assert ctx(store).once_sql(write) is True
    assert ctx(store).once_sql(write) is False
    assert effects(postgres_dsn, table) == [("k", "a")]
    store.close()


def test_once_claims_releases_on_error_and_reports_in_doubt(postgres_dsn: str, table: str) -> None:
    store = PostgresDedupeStore(postgres_dsn, table=table)
    runs: list[int] = []

    def boom() -> None:
        runs.append(1)
        raise ValueError("effect failed")

    with pytest.raises(ValueError):
        ctx(store).once(boom)
    assert store.state("g/t/0/7") is None  # released: a retry is clean
    assert ctx(store).once(lambda: runs.append(2)) is True
    assert ctx(store).once(lambda: runs.append(3)) is False
    assert runs == [1, 2]
    # a crash between claim and done: another host finds the key in doubt
    assert store.claim("g/t/0/8") is Claim.NEW
    other = PostgresDedupeStore(postgres_dsn, table=table)
    with pytest.raises(InDoubtError):
        ctx(other, 8).once(lambda: runs.append(4))
    assert ctx(other, 8).once(lambda: runs.append(5), in_doubt="skip") is False
    assert ctx(other, 8).once(lambda: runs.append(6), in_doubt="retry") is True
    assert store.state("g/t/0/8") == "done" and runs == [1, 2, 6]
    store.close()
    other.close()


def test_prune_forgets_only_old_done_keys(postgres_dsn: str, table: str) -> None:
    store = PostgresDedupeStore(postgres_dsn, table=table)
    ctx(store, 1).once(lambda: None)
    assert store.claim("claimed-key") is Claim.NEW
    assert store.prune(older_than_ms=0) == 0
    assert store.prune(older_than_ms=2**62) == 1
    assert store.state("g/t/0/1") is None and store.state("claimed-key") == "claimed"
    store.close()


def test_concurrent_hosts_run_each_effect_once(postgres_dsn: str, table: str) -> None:
    """Eight "hosts" race on the same 50 keys at once, with once_sql and with once."""
    make_effects_table(postgres_dsn, table)
    stores = [PostgresDedupeStore(postgres_dsn, table=table) for _ in range(8)]
    ran: list[str] = []
    errors: list[BaseException] = []

    def host(i: int) -> None:
        try:
            for n in range(50):
                c = ctx(stores[i], n)

                def write(db: Any, key: str = c.key) -> None:
                    sql = f"INSERT INTO {table}_fx (key, host) VALUES (%s, %s)"
                    db.execute(sql, (key, str(i)))

                c.once_sql(write)
                c2 = EffectGuard(f"once/{n}", "g", "t", 0, n, 1, stores[i])
                c2.once(functools.partial(ran.append, c2.key), in_doubt="skip")
        except BaseException as exc:  # a host that raised would leave its keys to the others
            errors.append(exc)

    threads = [threading.Thread(target=host, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    keys = [k for k, _ in effects(postgres_dsn, table)]
    assert sorted(keys) == sorted(f"g/t/0/{n}" for n in range(50))  # each once, none lost
    assert sorted(ran) == sorted(f"once/{n}" for n in range(50))
    for s in stores:
        s.close()


def test_once_sql_groups_lanes_and_a_raising_fn_reruns_only_its_neighbours(
    postgres_dsn: str, table: str
) -> None:
    """16 lanes on one writer share group transactions; one lane's fn raises, so its group
    rolls back and the others run again: every other effect exactly once, the raising one
    never, and each call returns after the commit that holds its effect."""
    make_effects_table(postgres_dsn, table)
    store = PostgresDedupeStore(postgres_dsn, table=table, writers=1)
    barrier = threading.Barrier(16)
    results: dict[int, object] = {}

    def lane(i: int) -> None:
        barrier.wait()
        c = ctx(store, i)

        def write(db: Any) -> None:
            db.execute(f"INSERT INTO {table}_fx (key, host) VALUES (%s, 'h')", (c.key,))
            if i == 5:
                raise RuntimeError("tool down")

        try:
            results[i] = c.once_sql(write)
        except RuntimeError as exc:
            results[i] = exc
            return
        with psycopg.connect(postgres_dsn) as db:  # committed: another connection sees it
            n = db.execute(f"SELECT count(*) FROM {table}_fx WHERE key = %s", (c.key,))
            assert n.fetchone() == (1,)

    threads = [threading.Thread(target=lane, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert isinstance(results.pop(5), RuntimeError)
    assert results == {i: True for i in range(16) if i != 5}
    keys = sorted(k for k, _ in effects(postgres_dsn, table))
    assert keys == sorted(f"g/t/0/{i}" for i in range(16) if i != 5)
    assert store.state("g/t/0/5") is None
    assert ctx(store, 3).once_sql(lambda db: None) is False  # done stays done
    store.close()


def test_a_failing_statement_in_a_pipelined_group_fails_only_its_own_call(
    postgres_dsn: str, table: str
) -> None:
    """The group's fns run pipelined, where a statement's error surfaces later than the
    statement; the failing call alone raises (the database's error), every other effect
    commits exactly once, and a group without errors needs no rerun."""
    make_effects_table(postgres_dsn, table)
    store = PostgresDedupeStore(postgres_dsn, table=table, writers=1)
    insert = f"INSERT INTO {table}_fx (key, host) VALUES (%s, 'h')"
    for i in range(100, 110):  # psycopg prepares a statement from its 5th run on
        assert ctx(store, i).once_sql(lambda db, i=i: db.execute(insert, (f"g/t/0/{i}",)))
    barrier = threading.Barrier(16)
    results: dict[int, object] = {}

    def lane(i: int) -> None:
        barrier.wait()
        c = ctx(store, i)
        # lane 5 writes to a table that does not exist: the server fails it, not Python
        fx = f"{table}_none" if i == 5 else f"{table}_fx"
        write = lambda db: db.execute(  # noqa: E731
            f"INSERT INTO {fx} (key, host) VALUES (%s, 'h')", (c.key,)
        )
        try:
            results[i] = c.once_sql(write)
        except psycopg.Error as exc:
            results[i] = exc

    threads = [threading.Thread(target=lane, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert isinstance(results.pop(5), psycopg.errors.UndefinedTable)
    assert results == {i: True for i in range(16) if i != 5}
    for i in range(200, 210):  # the prepared statements still work after the failed group
        assert ctx(store, i).once_sql(lambda db, i=i: db.execute(insert, (f"g/t/0/{i}",)))
    keys = sorted(k for k, _ in effects(postgres_dsn, table))
    ran = [*range(16), *range(100, 110), *range(200, 210)]
    assert keys == sorted(f"g/t/0/{i}" for i in ran if i != 5)
    assert store.state("g/t/0/5") is None
    store.close()


def test_a_group_mixing_done_in_doubt_new_and_repeated_keys_runs_each_effect_once(
    postgres_dsn: str, table: str
) -> None:
    """16 lanes on one writer at once: keys 0-5 done before, key 6 claimed by a ``once`` that
    never finished, keys 7-13 new, and two lanes with one key (a redelivery racing its first
    attempt). The group's one statement of marks skips the done keys: they do not run, the
    claim is taken over, the repeated key runs once, and every new key's effect is
    committed when its call returns."""
    make_effects_table(postgres_dsn, table)
    store = PostgresDedupeStore(postgres_dsn, table=table, writers=1)
    for i in range(6):
        assert ctx(store, i).once_sql(lambda db: None) is True
    assert store.claim("g/t/0/6") is Claim.NEW
    store._forget("g/t/0/6")  # as after a crash: the claim stays, nobody of this process holds it
    barrier = threading.Barrier(16)
    results: dict[int, bool] = {}

    def lane(i: int) -> None:
        c = ctx(store, i if i < 14 else 99)

        def write(db: Any) -> None:
            db.execute(f"INSERT INTO {table}_fx (key, host) VALUES (%s, 'h')", (c.key,))

        barrier.wait()
        results[i] = c.once_sql(write)
        with psycopg.connect(postgres_dsn) as db:  # committed: another connection sees it
            n = db.execute(f"SELECT count(*) FROM {table}_fx WHERE key = %s", (c.key,))
            assert n.fetchone() == ((0,) if i < 6 else (1,))

    threads = [threading.Thread(target=lane, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {i: results[i] for i in range(14)} == {i: i >= 6 for i in range(14)}
    assert sorted([results[14], results[15]]) == [False, True]
    keys = sorted(k for k, _ in effects(postgres_dsn, table))
    assert keys == sorted([*(f"g/t/0/{i}" for i in range(6, 14)), "g/t/0/99"])
    assert store.state("g/t/0/6") == "done"
    store.close()


def test_close_waits_for_the_running_group_to_commit(postgres_dsn: str, table: str) -> None:
    """A worker stopping closes its store while a lane's group may still be open: the group
    commits first (its call returns True, its effect is there), the close comes after."""
    make_effects_table(postgres_dsn, table)
    store = PostgresDedupeStore(postgres_dsn, table=table, writers=1)
    started = threading.Event()
    results: list[object] = []

    def slow_write(db: Any) -> None:
        db.execute(f"INSERT INTO {table}_fx (key, host) VALUES ('slow', 'h')")
        started.set()
        time.sleep(0.3)

    def lane() -> None:
        try:
            results.append(ctx(store).once_sql(slow_write))
        except BaseException as exc:
            results.append(exc)

    t = threading.Thread(target=lane)
    t.start()
    assert started.wait(10)
    store.close()
    t.join()
    assert results == [True]
    assert effects(postgres_dsn, table) == [("slow", "h")]


def test_a_partition_moving_to_another_host_repeats_its_effect_with_per_host_sqlite_but_not_with_postgres(  # noqa: E501
    postgres_dsn: str, table: str, tmp_path: Path
) -> None:
    """Host A processes offsets 0..9 (effects done), commits nothing, and dies; the partition
    moves to host B, which is redelivered 0..9. Per-host SQLite files (one per working folder,
    as on two machines) repeat all ten effects; one PostgreSQL store repeats none."""

    def run(store_a: Any, store_b: Any) -> list[str]:
        done: list[str] = []
        for store in (store_a, store_b):  # A, then B after the move
            for offset in range(10):
                c = ctx(store, offset)
                c.once(functools.partial(done.append, c.key))
        return done

    (tmp_path / "host-a").mkdir()
    (tmp_path / "host-b").mkdir()
    sqlite = run(SQLiteDedupeStore(tmp_path / "host-a" / "dedupe.sqlite"),
                 SQLiteDedupeStore(tmp_path / "host-b" / "dedupe.sqlite"))  # fmt: skip
    assert len(sqlite) == 20, "separate per-host stores are expected to repeat every effect"
    shared = run(PostgresDedupeStore(postgres_dsn, table=table),
                 PostgresDedupeStore(postgres_dsn, table=table))  # fmt: skip
    assert sorted(shared) == sorted(f"g/t/0/{n}" for n in range(10))


def test_an_unreachable_database_is_a_retriable_error_naming_the_fix() -> None:
    from actuators.workers.dedupe_pg import DedupeStoreError

    with pytest.raises(DedupeStoreError, match="LAGPILOT_DEDUPE_URL") as exc:
        PostgresDedupeStore("postgresql://nobody@127.0.0.1:1/none", connect_timeout_s=2)
    assert exc.value.retriable is True
