"""Dedupe stores: done keys never run again, in-doubt keys are named, SQL effects are atomic."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from actuators.workers import (
    Claim,
    EffectGuard,
    InDoubtError,
    MemoryDedupeStore,
    SQLiteDedupeStore,
    idempotency_key,
)


def ctx(store, key: str = "g/t/0/1") -> EffectGuard:
    return EffectGuard(key, "g", "t", 0, 1, 1, store)


def test_idempotency_key_prefers_the_producer_header() -> None:
    assert idempotency_key("g", "t", 2, 9, None) == "g/t/2/9"
    assert idempotency_key("g", "t", 2, 9, [("idempotency-key", b"order-7")]) == "order-7"
    assert (
        idempotency_key("g", "t", 2, 9, [("other", b"x"), ("idempotency-key", None)]) == "g/t/2/9"
    )


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path):
    s = MemoryDedupeStore() if request.param == "memory" else SQLiteDedupeStore(tmp_path / "d.db")
    yield s
    s.close()


def test_once_runs_once(store) -> None:
    calls: list[int] = []
    assert ctx(store).once(lambda: calls.append(1)) is True
    assert ctx(store).once(lambda: calls.append(2)) is False
    assert calls == [1]


def test_a_failed_effect_releases_its_claim(store) -> None:
    def fail() -> None:
        raise OSError("tool down")

    with pytest.raises(OSError):
        ctx(store).once(fail)
    assert store.state("g/t/0/1") is None
    assert ctx(store).once(lambda: None) is True


def test_in_doubt_is_raised_unless_told_otherwise(tmp_path: Path) -> None:
    # Only a durable store can be in doubt: a crash takes a memory store's claims with it.
    crashed = SQLiteDedupeStore(tmp_path / "d.db")
    assert crashed.claim("k") is Claim.NEW  # claimed, then the process died
    store = SQLiteDedupeStore(tmp_path / "d.db")
    with pytest.raises(InDoubtError, match="in_doubt='retry'"):
        ctx(store, "k").once(lambda: None)
    assert ctx(store, "k").once(lambda: None, in_doubt="skip") is False
    ran: list[int] = []
    assert ctx(store, "k").once(lambda: ran.append(1), in_doubt="retry") is True
    assert ran == [1] and store.state("k") == "done"
    store.close()
    crashed.close()


def test_sqlite_marks_survive_reopening(tmp_path: Path) -> None:
    path = tmp_path / "d.db"
    s = SQLiteDedupeStore(path)
    ctx(s).once(lambda: None)
    s.close()
    again = SQLiteDedupeStore(path)
    assert ctx(again).once(lambda: pytest.fail("ran twice")) is False
    again.close()


def test_once_sql_commits_effect_and_mark_together(tmp_path: Path) -> None:
    s = SQLiteDedupeStore(tmp_path / "d.db")
    s.connection().execute("CREATE TABLE ledger (k TEXT)")

    def effect_then_crash(db: sqlite3.Connection) -> None:
        db.execute("INSERT INTO ledger VALUES ('x')")
        raise RuntimeError("crash mid-transaction")

    with pytest.raises(RuntimeError):
        ctx(s).once_sql(effect_then_crash)
    assert s.connection().execute("SELECT count(*) FROM ledger").fetchone() == (0,)
    assert s.state("g/t/0/1") is None  # neither the effect nor the mark

    def effect(db: sqlite3.Connection) -> None:
        db.execute("INSERT INTO ledger VALUES ('x')")

    assert ctx(s).once_sql(effect) is True
    assert ctx(s).once_sql(effect) is False
    assert s.connection().execute("SELECT count(*) FROM ledger").fetchone() == (1,)
    s.close()


def test_once_sql_concurrent_attempts_apply_once(tmp_path: Path) -> None:
    s = SQLiteDedupeStore(tmp_path / "d.db")
    s.connection().execute("CREATE TABLE ledger (k TEXT)")
    barrier = threading.Barrier(8)

    def attempt() -> None:
        barrier.wait()
        ctx(s).once_sql(lambda db: db.execute("INSERT INTO ledger VALUES ('x')"))

    threads = [threading.Thread(target=attempt) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert s.connection().execute("SELECT count(*) FROM ledger").fetchone() == (1,)
    s.close()


def test_once_sql_leaves_no_transaction_open_for_other_processes(tmp_path: Path) -> None:
    """Group commit: a call that raises, or finds its key done, still ends its batch, so
    another process (here a second store on the file) can write at once."""
    s = SQLiteDedupeStore(tmp_path / "d.db")
    other = SQLiteDedupeStore(tmp_path / "d.db", busy_timeout_ms=200)
    s.connection().execute("CREATE TABLE ledger (k TEXT)")
    assert ctx(s).once_sql(lambda db: db.execute("INSERT INTO ledger VALUES ('x')")) is True
    assert ctx(s).once_sql(lambda db: db.execute("INSERT INTO ledger VALUES ('x')")) is False
    assert ctx(other, "g/t/0/2").once_sql(lambda db: None) is True  # not "database is locked"
    with pytest.raises(RuntimeError):
        ctx(s, "g/t/0/3").once_sql(lambda db: (_ for _ in ()).throw(RuntimeError("boom")))
    assert ctx(other, "g/t/0/4").once_sql(lambda db: None) is True
    assert s.state("g/t/0/3") is None and other.state("g/t/0/2") == "done"
    s.close()
    other.close()


def test_once_sql_groups_concurrent_keys_and_each_returns_after_its_commit(
    tmp_path: Path,
) -> None:
    s = SQLiteDedupeStore(tmp_path / "d.db")
    s.connection().execute("CREATE TABLE ledger (k TEXT)")
    barrier = threading.Barrier(16)
    seen: list[int] = []

    def attempt(i: int) -> None:
        barrier.wait()
        c = ctx(s, f"g/t/0/{i}")
        assert c.once_sql(lambda db: db.execute("INSERT INTO ledger VALUES (?)", (str(i),)))
        reader = sqlite3.connect(tmp_path / "d.db")  # another connection sees it committed
        seen.append(
            reader.execute("SELECT count(*) FROM ledger WHERE k = ?", (str(i),)).fetchone()[0]
        )
        reader.close()

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [1] * 16
    assert s.connection().execute("SELECT count(*) FROM ledger").fetchone() == (16,)
    s.close()


def test_once_sql_needs_the_sqlite_store() -> None:
    with pytest.raises(TypeError, match="SQLiteDedupeStore"):
        ctx(MemoryDedupeStore()).once_sql(lambda db: None)


def test_prune_forgets_old_done_keys(tmp_path: Path) -> None:
    s = SQLiteDedupeStore(tmp_path / "d.db")
    ctx(s).once(lambda: None)
    assert s.prune(older_than_ms=0) == 0
    assert s.prune(older_than_ms=2**62) == 1
    assert s.state("g/t/0/1") is None
    s.close()
