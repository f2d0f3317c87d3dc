"""Process mode on a real broker: every message once, in key order, only finished offsets
committed, a worker process SIGKILLed mid-run (nothing lost, no effect twice with the SQLite
store), and control commands (halt, resume, spread) obeyed as with threads."""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path

from confluent_kafka import Producer

from actuators.workers import Worker
from tests.integration.actuators.workers.workers_broker import (
    KEY,
    committed,
    control_event,
    create_topics,
    end_offsets,
    publish,
    wait_until,
)
from tests.support.worker_processes import compute_and_record, effects

PARTITIONS = 4
KEYS = 30
MESSAGES = 600


def _produce(bootstrap: str, topic: str, n: int, keys: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "enable.idempotence": True})  # fmt: skip
    seq = [0] * keys
    for i in range(n):
        producer.produce(topic, key=f"k{i % keys}".encode(), value=str(seq[i % keys]).encode())
        seq[i % keys] += 1
    assert producer.flush(30) == 0


def _worker(
    bootstrap: str, name: str, topic: str, control: str, db: Path, **over: object
) -> Worker:
    settings: dict = {"bootstrap": bootstrap, "group": f"{name}-g", "topics": [topic],
                      "handler": functools.partial(compute_and_record, work_s=0.01),
                      "instance_id": f"{name}-w", "dedupe": db, "control_topic": control,
                      "signing_key": KEY, "outcomes_topic": None, "executor": "processes",
                      "processes": 2, "lanes": 4, "commit_interval_s": 0.2, **over}  # fmt: skip
    return Worker(**settings)


def _children() -> list[multiprocessing.Process]:
    return [p for p in multiprocessing.active_children() if p.name.startswith("lagpilot-")]


def test_every_message_once_in_key_order_through_a_killed_worker_process(
    kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    topic, control = unique_name, f"{unique_name}.control"
    create_topics(kafka_bootstrap, (topic, PARTITIONS), (control, 1))
    _produce(kafka_bootstrap, topic, MESSAGES, KEYS)
    db = tmp_path / "dedupe.sqlite"
    worker = _worker(kafka_bootstrap, unique_name, topic, control, db)
    group = f"{unique_name}-g"
    # while it runs: every committed position must have every offset below it finished
    # (its effect written) at the moment it was read
    ahead: list[str] = []
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            positions = committed(kafka_bootstrap, group, topic, PARTITIONS)
            done = {(r[1], r[2]) for r in effects(db)}
            for p, pos in positions.items():
                missing = [o for o in range(max(pos, 0)) if (p, o) not in done]
                if missing:
                    ahead.append(f"partition {p} committed at {pos}, {missing[:5]} unfinished")
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    worker.start()
    try:
        before = {p.pid for p in _children()}
        assert len(before) == 2
        sampler.start()
        wait_until(lambda: len(effects(db)) >= MESSAGES // 4, 60, "a quarter processed")
        victim = sorted(before)[0]
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: worker.stats().get("process_restarted", 0) >= 1, 60, "a restart")
        wait_until(lambda: len({(r[1], r[2]) for r in effects(db)}) >= MESSAGES, 120, "all")
        ends = end_offsets(kafka_bootstrap, topic, PARTITIONS)
        wait_until(lambda: committed(kafka_bootstrap, group, topic, PARTITIONS) == ends, 30,
                   "every offset committed")  # fmt: skip
        assert worker.error is None
    finally:
        sampling.set()
        worker.stop()
    sampler.join(10)
    assert ahead == [], ahead[:5]
    rows = effects(db)
    # once: one effect per message, none lost, none twice (the killed process's last
    # message ran again in its successor, and once_sql kept its effect single)
    assert sorted((r[1], r[2]) for r in rows) == sorted(
        (p, o) for p, end in ends.items() for o in range(end)
    )
    order: dict[str, list[int]] = {}
    pids: dict[str, set[int]] = {}
    for _t, _p, _o, key, value, pid, _s, _e in rows:  # in the order they were written
        order.setdefault(key, []).append(int(value))
        pids.setdefault(key, set()).add(pid)
    assert all(seqs == sorted(seqs) for seqs in order.values()), "a key out of order"
    assert victim in {pid for ps in pids.values() for pid in ps}
    assert len({pid for ps in pids.values() for pid in ps} - before) == 1  # its successor ran
    stats = worker.stats()
    assert stats["process_died"] == 1 and stats["process_restarted"] == 1
    assert stats.get("failed", 0) == 0
    assert _children() == []  # stop() ended the worker processes


def test_halt_resume_and_spread_obeyed_in_process_mode(
    kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    topic, control = unique_name, f"{unique_name}.control"
    create_topics(kafka_bootstrap, (topic, 1), (control, 1))
    db = tmp_path / "dedupe.sqlite"
    worker = _worker(kafka_bootstrap, unique_name, topic, control, db, lanes=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5})
    stop_load = threading.Event()

    def load() -> None:
        i = 0
        while not stop_load.is_set():
            producer.produce(topic, key=f"k{i % 20}".encode(), value=str(i // 20).encode())
            producer.poll(0)
            i += 1
            time.sleep(0.01)
        producer.flush(10)

    loader = threading.Thread(target=load, daemon=True)
    worker.start()
    try:
        wait_until(lambda: worker.assignment() == {(topic, 0)}, 30, "assignment")
        loader.start()
        wait_until(lambda: len(effects(db)) > 20, 30, "processing under load")

        pause = {"scope": "workload", "group": f"{unique_name}-g"}
        publish(kafka_bootstrap, control, control_event("halt", pause))
        wait_until(lambda: worker.paused() == {(topic, 0)}, 2.0, "halt")
        halted_ns = time.monotonic_ns()
        # the message the lane had sent before the halt finishes in its process; after
        # it, nothing new starts there
        time.sleep(1.0)
        settled = len(effects(db))
        time.sleep(1.0)
        rows = effects(db)
        assert len(rows) == settled, "messages processed while halted"
        late = [r for r in rows if r[6] > halted_ns]  # started after the halt was seen
        assert len(late) <= worker.lanes(topic, 0), f"{len(late)} started after the halt"

        publish(kafka_bootstrap, control, control_event("resume", pause))
        wait_until(lambda: not worker.paused(), 2.0, "resume")
        wait_until(lambda: len(effects(db)) > settled + 10, 10, "processing after resume")

        spread = {"group": f"{unique_name}-g", "topic": topic, "partition": 0, "lanes": 4,
                  "pool": None}  # fmt: skip
        publish(kafka_bootstrap, control, control_event("spread_partition", spread))
        wait_until(lambda: worker.lanes(topic, 0) == 4, 2.0, "spread")
        spread_at = len(effects(db))
        wait_until(lambda: len(effects(db)) > spread_at + 40, 15, "processing spread")
        assert worker.error is None
    finally:
        stop_load.set()
        if loader.is_alive():
            loader.join(5)
        worker.stop()
    order: dict[str, list[int]] = {}
    for _t, _p, _o, key, value, *_rest in effects(db):
        order.setdefault(key, []).append(int(value))
    assert all(seqs == sorted(seqs) for seqs in order.values()), "a key out of order"
    assert worker.stats()["obeyed_halt"] == 1
