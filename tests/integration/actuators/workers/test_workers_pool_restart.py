"""A pool that restarts while holding a partition resumes it from its own committed position,
and hands it back exactly: every message's side effect once, owner commits to the end."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from types import SimpleNamespace

from confluent_kafka import Producer

from tests.integration.actuators.workers.agent_worker_proc import init_ledger, make_worker
from tests.integration.actuators.workers.workers_broker import (
    KEY,
    committed,
    control_event,
    create_topics,
    end_offsets,
    publish,
    wait_until,
)


def test_pool_restart_resumes_what_it_held(
    kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    topic, control, group = unique_name, f"{unique_name}.control", f"{unique_name}-g"
    create_topics(kafka_bootstrap, (topic, 1), (control, 1))
    db = tmp_path / "effects.sqlite"
    init_ledger(db)
    args = SimpleNamespace(
        bootstrap=kafka_bootstrap, topic=topic, group=group, control=control, db=db, key=KEY.hex()
    )
    producer = Producer({"bootstrap.servers": kafka_bootstrap})

    def produce(n: int) -> None:
        for i in range(n):
            producer.produce(topic, key=f"k{i % 7}".encode(), value=b'{"work_s": 0.002}')
        producer.flush(10)

    def processed() -> int:
        return sqlite3.connect(db).execute("SELECT count(*) FROM ledger").fetchone()[0]

    owner = make_worker(args, "owner")
    pool = make_worker(args, "pool-1", pool="big")
    owner.start()
    pool.start()
    started = [owner, pool]
    try:
        wait_until(lambda: owner.assignment() == {(topic, 0)}, 20, "assignment")
        produce(50)
        wait_until(lambda: processed() == 50, 15, "the owner to process the first 50")
        handoff = {"group": group, "topic": topic, "partition": 0, "lanes": 1, "pool": "big"}
        publish(kafka_bootstrap, control, control_event("spread_partition", handoff))
        wait_until(lambda: pool.held() == {(topic, 0)}, 10, "the pool to take the partition")
        produce(50)
        wait_until(lambda: processed() >= 70, 15, "the pool to make progress")
        # the owner group's commits follow the pool (its lag drains), under the marker
        wait_until(lambda: committed(kafka_bootstrap, group, topic, 1)[0] >= 70, 5, "mirror")
        assert owner.stats()["handoff_mirrored"] >= 1 and owner.paused() == {(topic, 0)}
        pool.stop()  # graceful: commits its progress under its taken marker
        produce(30)
        pool = make_worker(args, "pool-2", pool="big")
        pool.start()
        started.append(pool)
        assert pool.held() == {(topic, 0)}  # recovered from the pool group's offsets
        wait_until(lambda: processed() == 130, 15, "the restarted pool to catch up")
        restore = {"group": group, "topic": topic, "partition": 0}
        publish(kafka_bootstrap, control, control_event("restore_partition", restore))
        wait_until(lambda: not pool.held(), 10, "the pool to hand back")
        produce(20)
        end = end_offsets(kafka_bootstrap, topic, 1)
        wait_until(lambda: committed(kafka_bootstrap, group, topic, 1) == end, 15, "owner commit")
        ledger = sqlite3.connect(db)
        counts = ledger.execute("SELECT count(*), count(DISTINCT off) FROM ledger").fetchone()
        assert counts == (150, 150)
        by_worker = dict(ledger.execute("SELECT worker, count(*) FROM ledger GROUP BY 1"))
        assert by_worker["pool-1"] > 0 and by_worker["pool-2"] > 0 and by_worker["owner"] >= 70
        assert not owner.paused() and not pool.paused()
        assert owner.stats()["handed_off"] == 1 and owner.stats()["taken_back"] == 1
        # ... and the owner said so, once each (worker_outcome on the outcomes topic)
        assert owner.stats()["reported_handoff_started"] == 1
        assert owner.stats()["reported_handoff_returned"] == 1
    finally:
        for w in started:
            w.stop()
