"""A hand-off cannot orphan a partition: the owner takes it back when the pool never
confirms (no pool runs) or when the pool's lease runs out (the pool process is SIGKILLed
mid-hand-off), without loss or repeated side effects. The pool runs as a separate process in
its own working folder; the dedupe marks and the ledger are in a real PostgreSQL. The owner
runs on each group protocol: under KIP-848 the take-back's seek and commit go through a
consumer whose assignment the broker owns."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psycopg
import pytest
from confluent_kafka import Producer

from tests.integration.actuators.workers.agent_worker_proc import (
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

PROC = Path(__file__).with_name("agent_worker_proc.py")
LEASE_S = 2.0


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_the_owner_takes_back_from_a_missing_or_dead_pool(
    kafka_bootstrap: str, unique_name: str, tmp_path: Path, postgres_dsn: str, protocol: str
) -> None:
    topic, control, group = unique_name, f"{unique_name}.control", f"{unique_name}-g"
    create_topics(kafka_bootstrap, (topic, 1), (control, 1))
    db = unique_name.replace("-", "_")
    with psycopg.connect(postgres_dsn, autocommit=True) as pg:
        pg.execute(f"CREATE DATABASE {db}")
    dsn = postgres_dsn.rsplit("/", 1)[0] + f"/{db}"
    init_pg_ledger(dsn)
    args = SimpleNamespace(bootstrap=kafka_bootstrap, topic=topic, group=group, control=control,
                           key=KEY.hex(), dsn=dsn, group_protocol=protocol)  # fmt: skip
    producer = Producer({"bootstrap.servers": kafka_bootstrap})

    def produce(n: int, work_s: float = 0.002) -> None:
        for i in range(n):
            producer.produce(topic, key=f"k{i % 7}".encode(), value=b'{"work_s": %.3f}' % work_s)
        producer.flush(10)

    def effects() -> int:
        return int(read_ledger(args, "SELECT count(*) FROM ledger")[0][0])

    def hand_off(pool: str) -> None:
        params = {"group": group, "topic": topic, "partition": 0, "lanes": 1, "pool": pool}
        publish(kafka_bootstrap, control, control_event("spread_partition", params))

    owner = make_worker(args, "owner", handoff_confirm_s=5.0)
    owner.start()
    pool_proc: subprocess.Popen[bytes] | None = None
    try:
        wait_until(lambda: owner.assignment() == {(topic, 0)}, 20, "assignment")
        produce(40)
        wait_until(lambda: effects() == 40, 15, "the owner to process the first 40")

        # 1. a pool that does not exist never confirms: back after the 5 s deadline
        handed = time.monotonic()
        hand_off("ghost")
        wait_until(lambda: owner.stats().get("handed_off") == 1, 5, "the hand-off marker")
        produce(20)
        wait_until(lambda: owner.stats().get("taken_back_unconfirmed") == 1, 10, "unconfirmed")
        assert time.monotonic() - handed >= 4.5  # not before the deadline
        wait_until(lambda: effects() == 60, 15, "the owner to process what came meanwhile")

        # 2. a pool that takes it, then dies (SIGKILL) mid-work: back when its lease runs out
        home = tmp_path / "pool-host"
        home.mkdir()
        cmd = [sys.executable, str(PROC),
               *(f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()),
               "--name=pool-proc", "--pool=big", f"--lease-s={LEASE_S}"]  # fmt: skip
        pool_proc = subprocess.Popen(cmd, cwd=home, stdout=subprocess.DEVNULL,
                                     stderr=(tmp_path / "pool.log").open("ab"))  # fmt: skip
        log = tmp_path / "pool.log"
        wait_until(lambda: b"connected" in log.read_bytes(), 30, "the pool process to connect")
        hand_off("big")
        produce(200, work_s=0.01)  # ~2 s of work for the pool
        pool_work = "SELECT count(*) FROM ledger WHERE worker = 'pool-proc'"
        wait_until(lambda: read_ledger(args, pool_work)[0][0] >= 20, 20, "the pool at work")
        pool_proc.send_signal(signal.SIGKILL)
        pool_proc.wait(10)
        killed = time.monotonic()
        wait_until(lambda: owner.stats().get("taken_back_lease_expired") == 1, 15, "lease end")
        assert time.monotonic() - killed <= LEASE_S + 3.0
        produce(30)
        end = end_offsets(kafka_bootstrap, topic, 1)
        wait_until(lambda: committed(kafka_bootstrap, group, topic, 1) == end, 30, "owner commit")
        total, distinct = read_ledger(args, "SELECT count(*), count(DISTINCT off) FROM ledger")[0]
        attempts, tried = read_ledger(args, "SELECT count(*), count(DISTINCT off) FROM attempts")[0]
        assert (total, distinct) == (290, 290), "a side effect was lost or repeated"
        assert tried == 290
        print(f"\nattempts={attempts} (redelivered {attempts - tried}), effects={total}")
        assert owner.stats()["taken_back"] == 2 and not owner.paused()
        assert owner.error is None and owner.group_protocol == protocol
    finally:
        if pool_proc is not None and pool_proc.poll() is None:
            pool_proc.kill()
        owner.stop()
