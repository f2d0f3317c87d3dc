"""The kill switch's scopes on the real broker, through the operator's CLI: ``actions``
restores spreads within a second and processing goes on; ``workload`` pauses the group
within a second; a worker started after a halt obeys it within a second of starting."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka import Producer

from actuators.workers import MemoryDedupeStore, Worker
from pipeline.commands.control import main as control_main
from tests.integration.actuators.workers.workers_broker import (
    KEY,
    control_event,
    create_topics,
    publish,
    wait_until,
)


class Load:
    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topic, self.stop = topic, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            self.producer.produce(self.topic, key=f"k{i % 20}".encode(), value=b"x")
            self.producer.poll(0)
            i += 1
            time.sleep(0.005)
        self.producer.flush(10)


@pytest.fixture
def setup(kafka_bootstrap: str, unique_name: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    topic, control, group = unique_name, f"{unique_name}.control", f"{unique_name}-g"
    create_topics(kafka_bootstrap, (topic, 1), (control, 1))
    monkeypatch.setenv("LAGPILOT_SIGNING_KEY", KEY.decode())
    processed: list[float] = []
    load = Load(kafka_bootstrap, topic)
    workers: list[Worker] = []

    def worker(name: str) -> Worker:
        w = Worker(bootstrap=kafka_bootstrap, group=group, topics=[topic],
                   handler=lambda msg, ctx: processed.append(time.monotonic()),
                   instance_id=f"{unique_name}-{name}", dedupe=MemoryDedupeStore(),
                   control_topic=control, signing_key=KEY)  # fmt: skip
        workers.append(w)
        w.start()
        return w

    def cli(*argv: str) -> float:
        assert control_main(["--bootstrap", kafka_bootstrap, "--topic", control, *argv]) == 0
        return time.monotonic()

    yield topic, control, group, processed, load, worker, cli
    load.stop.set()
    for w in workers:
        w.stop()


def processing_after(processed: list[float], t: float) -> bool:
    return any(x > t for x in processed[-50:])


def test_actions_halt_restores_spreads_and_keeps_processing(setup: Any, kafka_bootstrap: str):
    topic, control, group, processed, load, worker, cli = setup
    w = worker("a")
    wait_until(lambda: w.assignment() == {(topic, 0)}, 20, "assignment")
    load.thread.start()
    spread = {"group": group, "topic": topic, "partition": 0, "lanes": 6, "pool": None}
    publish(kafka_bootstrap, control, control_event("spread_partition", spread))
    wait_until(lambda: w.lanes(topic, 0) == 6, 1.0, "spread")

    sent = cli("halt", "--reason", "test: actions")  # the default scope
    wait_until(lambda: w.lanes(topic, 0) == 1, 1.0, "spread restored within 1 s of the halt")
    assert time.monotonic() - sent < 1.0
    assert not w.paused()
    restored = time.monotonic()
    wait_until(lambda: processing_after(processed, restored), 1.0, "processing goes on")
    publish(kafka_bootstrap, control, control_event("spread_partition", spread))
    wait_until(lambda: w.stats().get("refused_spread_halted") == 1, 1.0, "a new spread refused")
    assert w.lanes(topic, 0) == 1

    cli("resume")
    wait_until(lambda: not w.actions_halts, 1.0, "resume within 1 s")
    publish(kafka_bootstrap, control, control_event("spread_partition", spread))
    wait_until(lambda: w.lanes(topic, 0) == 6, 1.0, "spreads obeyed again")
    assert w.error is None


def test_workload_halt_pauses_the_group_and_a_later_worker_obeys_it(setup: Any) -> None:
    topic, _, group, processed, load, worker, cli = setup
    load.thread.start()
    with pytest.raises(AssertionError):  # --scope workload needs its group (exit 78)
        cli("halt", "--scope", "workload")
    sent = cli("halt", "--scope", "workload", "--group", group, "--reason", "test: pause")
    # started after the halt: it reads the kept halt state and stays paused
    w = worker("late")
    wait_until(lambda: w.assignment() == {(topic, 0)}, 20, "assignment")
    assigned = time.monotonic()
    wait_until(lambda: w.paused() == {(topic, 0)}, 1.0, "paused within 1 s of its assignment")
    assert w.stats().get("obeyed_halt") == 1
    time.sleep(0.5)
    assert not processing_after(processed, assigned + 0.2), "processed while halted"
    assert sent < assigned

    resumed = cli("resume", "--scope", "workload", "--group", group)
    wait_until(lambda: not w.paused(), 1.0, "resume within 1 s")
    wait_until(lambda: processing_after(processed, resumed), 2.0, "processing after resume")

    # the halt, again, on a running worker: paused within 1 s
    sent = cli("halt", "--scope", "workload", "--group", group)
    wait_until(lambda: w.paused() == {(topic, 0)}, 1.0, "paused within 1 s")
    assert time.monotonic() - sent < 1.0
    assert w.error is None
