"""Process mode without a broker: its settings and refusals, and ``ProcessRunner`` with real
worker processes (spawned) running the handlers of tests/support/worker_processes.py on
messages a lane would hand it: where each key runs, batched sends, answers only when the
handler finished, failures, a process that dies, and closing."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actuators.workers import MemoryDedupeStore, SQLiteDedupeStore, Worker
from actuators.workers.handling import Tally
from actuators.workers.process_child import StoreSpec
from actuators.workers.process_lanes import ProcessLaneExecutor
from actuators.workers.processes import (
    EXECUTOR_ENV,
    PROCESSES_ENV,
    ProcessRunner,
    WorkerProcessError,
    pickled_handler,
    resolve_processes,
    store_spec,
    usable_cpus,
)
from schemas import ConfigError
from tests.support.worker_processes import (
    always_die,
    compute_and_record,
    die_once,
    effects,
    fail,
)
from tests.support.workers import Msg, wait_until

KEY = b"unit-test-signing-key-0123456789"


# -- settings ------------------------------------------------------------------------------------


def test_threads_unless_asked_and_the_usable_cpus_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(EXECUTOR_ENV, raising=False)
    monkeypatch.delenv(PROCESSES_ENV, raising=False)
    assert resolve_processes(None, None) is None
    assert resolve_processes("threads", None) is None
    assert resolve_processes("processes", None) == usable_cpus() >= 1
    assert resolve_processes("processes", 3) == 3
    monkeypatch.setenv(EXECUTOR_ENV, "processes")
    monkeypatch.setenv(PROCESSES_ENV, "5")
    assert resolve_processes(None, None) == 5
    assert resolve_processes(None, 2) == 2  # the argument wins
    assert resolve_processes("threads", None) is None  # PROCESSES_ENV is read in process mode


@pytest.mark.parametrize(
    ("executor", "processes", "env", "names"),
    [
        ("forks", None, {}, "executor='forks'"),
        (None, None, {EXECUTOR_ENV: "proc"}, f"{EXECUTOR_ENV}='proc'"),
        ("processes", 0, {}, "processes=0: must be an integer >= 1"),
        ("processes", None, {PROCESSES_ENV: "many"}, f"{PROCESSES_ENV}='many'"),
        ("threads", 4, {}, "pass executor='processes'"),
    ],
)
def test_bad_settings_are_refused_naming_the_key_and_the_fix(
    monkeypatch: pytest.MonkeyPatch,
    executor: str | None,
    processes: int | None,
    env: dict[str, str],
    names: str,
) -> None:
    for name in (EXECUTOR_ENV, PROCESSES_ENV):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=names.replace("(", r"\(")):
        resolve_processes(executor, processes)


def _nested_handler() -> Any:
    def handle(msg: Any, ctx: Any) -> None:
        return None

    return handle


async def _async_handler(msg: Any, ctx: Any) -> None:
    return None


@pytest.mark.parametrize(
    "handler", [lambda msg, ctx: None, _nested_handler(), _async_handler], ids=str
)
def test_a_handler_worker_processes_cannot_import_is_refused_at_construction(
    handler: Any, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match="handler=") as err:
        Worker(bootstrap="127.0.0.1:1", group="g", topics=["t"], handler=handler,
               dedupe=tmp_path / "d.sqlite", signing_key=KEY, executor="processes")  # fmt: skip
    assert "module level" in str(err.value) or "async def" in str(err.value)
    assert not (tmp_path / "d.sqlite").exists()  # refused before the store was opened
    # a module-level function, or a partial of one, is accepted
    pickled_handler(compute_and_record)
    pickled_handler(functools.partial(compute_and_record, work_s=0.001))


def test_a_memory_store_is_refused_in_process_mode_naming_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"dedupe=MemoryDedupeStore\(\).*dedupe.sqlite"):
        Worker(bootstrap="127.0.0.1:1", group="g", topics=["t"], handler=compute_and_record,
               dedupe=MemoryDedupeStore(), signing_key=KEY, executor="processes")  # fmt: skip


def test_a_sqlite_store_is_described_by_its_absolute_path_and_settings(tmp_path: Path) -> None:
    store = SQLiteDedupeStore(tmp_path / "d.sqlite", synchronous="NORMAL")
    try:
        spec = store_spec(store)
    finally:
        store.close()
    assert spec == StoreSpec(
        "sqlite", str(tmp_path / "d.sqlite"), (("synchronous", "NORMAL"),
                                               ("busy_timeout_ms", 30_000))
    )  # fmt: skip
    reopened = spec.open()
    assert isinstance(reopened, SQLiteDedupeStore) and reopened.path == tmp_path / "d.sqlite"
    reopened.close()


# -- ProcessRunner with real worker processes -----------------------------------------------------


def _runner(handler: Any, db: Path, processes: int = 2, **over: Any) -> tuple[ProcessRunner, Tally]:
    tally = Tally()
    store = SQLiteDedupeStore(db)  # makes the file; the processes open it again
    store.close()
    settings: dict[str, Any] = {"group": "g", "store": store_spec_of(db), "processes": processes,
                                "max_attempts": 2, "retry_backoff_s": 0.0, "on_failure": None,
                                "tally": tally, **over}  # fmt: skip
    return ProcessRunner(handler, **settings), tally


def store_spec_of(db: Path) -> StoreSpec:
    return StoreSpec("sqlite", str(db))


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "dedupe.sqlite"


def _run_all(runner: ProcessRunner, messages: list[Msg], lanes: int) -> None:
    """Call the runner as ``lanes`` lanes would: each lane's messages one after another."""
    chunks = [messages[i::lanes] for i in range(lanes)]
    threads = [threading.Thread(target=lambda c=c: [runner(m) for m in c]) for c in chunks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive(), "a lane never got its answer"


def test_each_key_runs_in_one_process_and_a_call_returns_once_it_finished_there(
    db: Path,
) -> None:
    runner, tally = _runner(functools.partial(compute_and_record, work_s=0.002), db)
    runner.start()
    try:
        assert len(set(runner.pids())) == 2
        one = Msg(0, _key=b"k0", _value=b"0")
        runner(one)
        assert [e[2] for e in effects(db)] == [0]  # done (and recorded) when the call returned
        # 8 lanes at once, each its own keys in offset order, as a lane hands them over
        messages = [Msg(i, _key=f"k{i % 8}".encode(), _value=str(i).encode())
                    for i in range(1, 161)]  # fmt: skip
        _run_all(runner, [m for m in messages], lanes=8)
    finally:
        runner.close()
    rows = effects(db)
    assert sorted(r[2] for r in rows) == list(range(161))  # every message once
    pids: dict[str, set[int]] = {}
    order: dict[str, list[int]] = {}
    for _t, _p, offset, key, _v, pid, _s, _e in rows:
        pids.setdefault(key, set()).add(pid)
        order.setdefault(key, []).append(offset)
    assert all(len(p) == 1 for p in pids.values()), pids  # a key always in one process
    assert {p for ps in pids.values() for p in ps} == set(runner.pids())  # both used
    assert all(o == sorted(o) for o in order.values())  # in offset order
    assert tally.snapshot()["processed"] == 161


def test_messages_queued_for_a_process_meanwhile_go_in_one_send(db: Path) -> None:
    runner, _tally = _runner(functools.partial(compute_and_record, work_s=0.02), db, 1)
    runner.start()
    try:
        messages = [Msg(i, _key=f"k{i}".encode()) for i in range(64)]
        _run_all(runner, messages, lanes=32)  # 32 lanes, one process: they queue behind it
        sends, sent = runner.batching()
    finally:
        runner.close()
    assert sent == 64
    assert sends < 64 / 2, f"{sends} sends for 64 messages: not batched"


def test_a_handler_that_keeps_failing_is_counted_and_reported_in_the_worker_process(
    db: Path,
) -> None:
    failures: list[tuple[Any, BaseException]] = []
    runner, tally = _runner(fail, db, 1, on_failure=lambda m, e: failures.append((m, e)))
    runner.start()
    try:
        msg = Msg(7, _key=b"k")
        runner(msg)
    finally:
        runner.close()
    assert tally.snapshot() == {"retried": 1, "failed": 1}  # max_attempts=2
    [(got, exc)] = failures
    assert got is msg  # the polled message itself, in the worker's process
    assert isinstance(exc, ValueError) and "offset 7" in str(exc)


def test_a_process_that_dies_is_restarted_and_its_unanswered_messages_run_again(
    db: Path, tmp_path: Path
) -> None:
    handler = functools.partial(die_once, flags=str(tmp_path))
    runner, tally = _runner(handler, db, 1)
    runner.start()
    first = runner.pids()[0]
    try:
        messages = [Msg(i, _key=f"k{i}".encode(), _value=b"die" if i == 5 else b"ok")
                    for i in range(40)]  # fmt: skip
        _run_all(runner, messages, lanes=8)
    finally:
        runner.close()
    counts = tally.snapshot()
    assert counts["process_died"] == 1 and counts["process_restarted"] == 1
    assert runner.pids()[0] != first
    offsets = [r[2] for r in effects(db)]
    assert sorted(offsets) == list(range(40))  # nothing lost, nothing recorded twice
    assert counts["processed"] == 40


def test_a_message_that_kills_its_process_every_time_is_given_up_on(db: Path) -> None:
    failures: list[BaseException] = []
    runner, tally = _runner(always_die, db, 1, on_failure=lambda m, e: failures.append(e))
    runner.start()
    try:
        runner(Msg(3, _key=b"k"))  # returns: the partition is not wedged
    finally:
        runner.close()
    counts = tally.snapshot()
    assert counts["failed"] == 1 and counts["process_died"] == 2  # max_attempts=2
    [exc] = failures
    assert isinstance(exc, WorkerProcessError) and "died" in str(exc)


def test_close_stops_the_processes_and_releases_a_waiting_lane(db: Path) -> None:
    runner, tally = _runner(functools.partial(compute_and_record, work_s=30), db, 1)
    runner.start()
    proc = runner._slots[0].proc
    assert proc is not None
    lane = threading.Thread(target=runner, args=(Msg(0, _key=b"k"),))
    lane.start()
    time.sleep(0.5)
    runner.close(timeout_s=1)
    lane.join(10)
    assert not lane.is_alive()
    assert not proc.is_alive()
    assert "processed" not in tally.snapshot()  # abandoned, never counted as done
    runner(Msg(1, _key=b"k"))  # after close: abandoned at once, never waits
    assert "processed" not in tally.snapshot()


def test_a_message_before_start_is_refused(db: Path) -> None:
    runner, _tally = _runner(compute_and_record, db, 1)
    with pytest.raises(WorkerProcessError, match="before start"):
        runner(Msg(0, _key=b"k"))


def test_a_process_that_cannot_open_the_store_fails_the_start(db: Path) -> None:
    unreachable = StoreSpec("sqlite", "/nonexistent/x/d.sqlite")
    runner, _tally = _runner(compute_and_record, db, 1, store=unreachable)
    with pytest.raises(WorkerProcessError, match="could not start: OperationalError"):
        runner.start()


# -- ProcessLaneExecutor: the lanes going on from the answers ------------------------------------


def test_process_lanes_commit_only_what_the_processes_finished_and_obey_a_halt(db: Path) -> None:
    runner, tally = _runner(functools.partial(compute_and_record, work_s=0.002), db)
    runner.start()
    lanes = ProcessLaneExecutor(runner, default_lanes=4, name="t")
    try:
        seq: dict[bytes, int] = {}

        def batch(start: int, n: int) -> list[Msg]:
            out = []
            for offset in range(start, start + n):
                for partition in (0, 1):
                    key = f"k{offset % 7}".encode()
                    seq[key] = seq.get(key, -1) + 1
                    out.append(Msg(offset, _partition=partition, _key=key,
                                   _value=str(seq[key]).encode()))  # fmt: skip
            return out

        assert lanes.submit_many(batch(0, 100)) == 0
        wait_until(lambda: lanes.positions() == {("t", 0): 100, ("t", 1): 100}, 30)
        assert len(effects(db)) == 200  # the position moved only over finished messages
        lanes.halt()
        lanes.submit_many(batch(100, 20))
        time.sleep(1.0)
        assert lanes.positions() == {("t", 0): 100, ("t", 1): 100}  # nothing started
        assert len(effects(db)) == 200
        lanes.resume()
        wait_until(lambda: lanes.positions() == {("t", 0): 120, ("t", 1): 120}, 30)
        assert lanes.close([("t", 0)], 10) == {("t", 0): 120}
    finally:
        runner.close()
    order: dict[tuple[int, str], list[int]] = {}
    for _t, partition, _o, key, value, *_rest in effects(db):
        order.setdefault((partition, key), []).append(int(value))
    assert all(s == sorted(s) for s in order.values())  # each key in offset order
    assert tally.snapshot()["processed"] == 240
