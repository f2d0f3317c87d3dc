"""agent-consumer-group-rebalance-smoke: the worker SDK under continuous load and chaos.

Workers run as threads (inspectable) and as processes (SIGKILLed mid-flight). While a
producer keeps writing (a hot partition with heavy payloads among normal ones) the test adds
workers, SIGKILLs workers, forces rebalances, restarts a killed worker with its static id,
spreads the hot partition over more lanes and hands another partition to an overflow pool
and back, all through signed events on the control topic. Then:

* every produced message was processed at least once (``attempts``),
* every side effect was applied exactly once (``ledger``: one row per message),
* per-key order held (each key's ledger rows are in offset order),
* the group's committed offsets reached the end of every partition,
* no partition is left paused and the pool holds nothing.

It runs on one host (``sqlite``: every worker shares one SQLite file, the dedupe store and
the ledger), and as on separate hosts (``postgres``: each process has its own working
folder and every worker its own ``PostgresDedupeStore`` connections to one real PostgreSQL
server, which also holds the ledger), so a shared file is not what makes the guarantees
hold; and with the workers on each group protocol (``--group-protocol``, the worker's
``group_protocol``): ``classic`` on both stores, ``consumer`` (KIP-848) on SQLite, where the
same guarantees must hold with the broker assigning. Under KIP-848 a SIGKILLed static
member holds its partitions for the broker's session timeout
(``group.consumer.session.timeout.ms``, 45 s by default, also its minimum), where the
classic run sets 6 s, so the final wait for the commits is longer there.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import psycopg
import pytest
from confluent_kafka import Producer

from tests.integration.actuators.workers.agent_worker_proc import (
    init_ledger,
    init_pg_ledger,
    make_worker,
    read_ledger,
)
from tests.integration.actuators.workers.workers_broker import (
    KEY,
    committed,
    control_event,
    create_topics,
    end_offsets,
    publish,
    wait_until,
)

PARTITIONS = 6
HOT, HANDED = 0, 1  # the partition spread over lanes, the one handed to the pool
PROC = Path(__file__).with_name("agent_worker_proc.py")


class Load:
    """Keyed messages at a steady rate; the hot partition gets 3x the traffic, heavier."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True}
        )
        self.delivered: list[tuple[int, int]] = []
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is None:
            self.delivered.append((msg.partition(), msg.offset()))
        else:
            self.failed += 1

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            for _ in range(4):
                key = f"key-{i % 48}"
                partition = zlib.crc32(key.encode()) % PARTITIONS
                if i % 3 == 0:
                    partition = HOT  # extra traffic on the hot partition
                heavy = partition == HOT
                value = orjson.dumps({"i": i, "work_s": 0.008 if heavy else 0.001})
                self.producer.produce(
                    self.topic,
                    key=f"{key}@{partition}".encode(),  # key -> one partition
                    value=value,
                    partition=partition,
                    on_delivery=self._on_delivery,
                )
                i += 1
            self.producer.poll(0)
            time.sleep(0.02)  # ~200 messages/s
        self.producer.flush(15)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(20)


#: (dedupe store, group protocol) runs: every store on the default protocol, and KIP-848 on
#: one store (the protocol changes who assigns, not how the store dedupes)
RUNS = [("sqlite", "classic"), ("postgres", "classic"), ("sqlite", "consumer")]
#: how long the group may take to commit to the end once the load stops: the members the
#: test SIGKILLs last hold their partitions for the session timeout (6 s classic, the
#: broker's 45 s under KIP-848) before the surviving threads get them
COMMIT_WAIT_S = {"classic": 45, "consumer": 120}


@pytest.fixture
def ledger(request: pytest.FixtureRequest, tmp_path: Path, unique_name: str) -> dict[str, Any]:
    """Where the dedupe marks and the ledger live: ``{"db": path}`` or ``{"dsn": url}``."""
    if request.param == "sqlite":
        db = tmp_path / "effects.sqlite"
        init_ledger(db)
        return {"db": db}
    server = request.getfixturevalue("postgres_dsn")
    name = unique_name.replace("-", "_")
    with psycopg.connect(server, autocommit=True) as pg:
        pg.execute(f"CREATE DATABASE {name}")
    dsn = server.rsplit("/", 1)[0] + f"/{name}"
    init_pg_ledger(dsn)
    return {"dsn": dsn}


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("ledger", "protocol"), RUNS, indirect=["ledger"])
def test_agent_consumer_group_rebalance_smoke(
    kafka_bootstrap: str, unique_name: str, tmp_path: Path, ledger: dict[str, Any], protocol: str
) -> None:
    topic, control, group = unique_name, f"{unique_name}.control", f"{unique_name}-agents"
    create_topics(kafka_bootstrap, (topic, PARTITIONS), (control, 1))
    args = SimpleNamespace(
        bootstrap=kafka_bootstrap, topic=topic, group=group, control=control, key=KEY.hex(),
        group_protocol=protocol, **ledger,
    )  # fmt: skip
    procs: dict[str, subprocess.Popen[bytes]] = {}
    threads: list[Any] = []

    def spawn(name: str) -> None:
        home = tmp_path / f"host-{name}"  # its own working folder, as on its own machine
        home.mkdir(exist_ok=True)
        procs[name] = subprocess.Popen(
            [
                sys.executable,
                str(PROC),
                *(f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()),
                f"--name={name}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / f"{name}.log").open("ab"),
            cwd=home,
        )

    def kill(name: str) -> None:
        procs[name].send_signal(signal.SIGKILL)
        procs[name].wait(10)

    def thread_worker(name: str, pool: str | None = None) -> Any:
        w = make_worker(args, name, pool=pool)
        w.start()
        threads.append(w)
        return w

    load = Load(kafka_bootstrap, topic)
    try:
        pool = thread_worker("pool-big", pool="big")
        w1 = thread_worker("t1")
        spawn("p1")
        spawn("p2")
        load.start()
        time.sleep(3)
        w2 = thread_worker("t2")  # a worker joins: cooperative rebalance
        time.sleep(2)
        kill("p1")  # dies mid-flight: its uncommitted work is redelivered
        spawn("p3")  # another join while p1 is still a (dead) static member
        time.sleep(2)
        spread = {"group": group, "topic": topic, "partition": HOT, "lanes": 4, "pool": None}
        handoff = {"group": group, "topic": topic, "partition": HANDED, "lanes": 1, "pool": "big"}
        publish(kafka_bootstrap, control, control_event("spread_partition", spread))
        publish(kafka_bootstrap, control, control_event("spread_partition", handoff))
        wait_until(lambda: pool.held() == {(topic, HANDED)}, 15, "the pool to take the partition")
        time.sleep(1)
        kill("p2")
        spawn("p1")  # p1 comes back under its static id
        time.sleep(3)
        restore = {"group": group, "topic": topic, "partition": HANDED}
        publish(kafka_bootstrap, control, control_event("restore_partition", restore))
        publish(
            kafka_bootstrap,
            control,
            control_event("restore_partition", {**restore, "partition": HOT}),
        )
        wait_until(lambda: not pool.held(), 15, "the pool to hand the partition back")
        time.sleep(1)
        load.stop()
        for name in list(procs):  # the last processes die too; the threads take over
            if procs[name].poll() is None:
                kill(name)

        assert load.failed == 0 and len(load.delivered) > 1000
        end = end_offsets(kafka_bootstrap, topic, PARTITIONS)
        seen: list[dict[int, int]] = []

        def at_end() -> bool:
            seen[:] = [committed(kafka_bootstrap, group, topic, PARTITIONS)]
            return seen[0] == end

        try:
            wait_until(at_end, COMMIT_WAIT_S[protocol], "the group to commit", step_s=0.5)
        except pytest.fail.Exception:
            pytest.fail(f"the group committed {seen} of the end {end}; owners {w1.assignment()}"
                        f" {w2.assignment()}, pool {pool.held()}, stats {w1.stats()}")  # fmt: skip
        effects = dict(
            ((p, o), n)
            for p, o, n in read_ledger(args, "SELECT part, off, count(*) FROM ledger GROUP BY 1, 2")
        )
        attempts = dict(
            ((p, o), n)
            for p, o, n in read_ledger(
                args, "SELECT part, off, count(*) FROM attempts GROUP BY 1, 2"
            )
        )
        produced = set(load.delivered)
        assert produced == set(attempts), "some message was never processed"
        assert set(effects) == produced, "a side effect is missing or belongs to no message"
        repeated = {k: n for k, n in effects.items() if n != 1}
        assert not repeated, f"side effects applied more than once: {list(repeated.items())[:5]}"
        rows = read_ledger(args, "SELECT key, off FROM ledger ORDER BY id")
        last: dict[str, int] = {}
        for key, off in rows:
            assert off > last.get(key, -1), f"key {key} processed out of order at {off}"
            last[key] = off
        by_worker = dict(read_ledger(args, "SELECT worker, count(*) FROM ledger GROUP BY 1"))
        assert by_worker.get("pool-big", 0) > 0, "the pool processed nothing while it held"
        assert {"t1", "t2"} <= set(by_worker)
        assert {"p1", "p2", "p3"} & set(by_worker), "the worker processes processed nothing"
        for w in (w1, w2, pool):
            assert not w.paused(), f"{w} left partitions paused: {w.paused()}"
            assert w.error is None
            assert w.group_protocol == protocol
        assert w1.stats().get("obeyed_spread_partition", 0) >= 1
        print(
            f"\n{protocol}: produced={len(produced)} attempts={sum(attempts.values())} "
            f"redelivered={sum(attempts.values()) - len(produced)} effects={len(effects)} "
            f"by_worker={by_worker}"
        )
    finally:
        load.stop()
        for name, proc in procs.items():
            if proc.poll() is None:
                kill(name)
        for w in threads:
            w.stop()
