"""A real worker reports its processed prefix every tick, whatever its commit cadence."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from typing import Any

import orjson
from confluent_kafka import Consumer, Message, Producer

from actuators.workers import EffectGuard, MemoryDedupeStore, Worker
from schemas import validate
from tests.integration.actuators.workers.workers_broker import KEY, create_topics, wait_until


class ProgressTail:
    """Every report on a progress topic, read from its start in a thread."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.reports: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"progress-tail-{uuid.uuid4().hex[:6]}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        self._c.subscribe([topic])
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self._c.poll(0.1)
            if msg is not None and not msg.error():
                self.reports.append(orjson.loads(msg.value() or b""))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._c.close()


def test_reports_show_the_stuck_prefix_long_before_a_commit_and_release_on_stop(
    kafka_bootstrap: str, unique_name: str
) -> None:
    topic, control, progress = unique_name, f"{unique_name}.control", f"{unique_name}.progress"
    group = f"{unique_name}-g"
    create_topics(kafka_bootstrap, (topic, 1), (control, 1), (progress, 1))
    gate = threading.Event()

    def handle(msg: Message, ctx: EffectGuard) -> None:
        if msg.key() == b"pdf":
            gate.wait(20)  # a handler stuck on one message

    tail = ProgressTail(kafka_bootstrap, progress)
    worker = Worker(
        bootstrap=kafka_bootstrap,
        group=group,
        topics=[topic],
        handler=handle,
        instance_id=f"{unique_name}-w1",
        dedupe=MemoryDedupeStore(),
        control_topic=control,
        signing_key=KEY,
        commit_interval_s=5.0,  # Kafka's default auto-commit cadence
        progress_topic=progress,
    )
    worker.start()
    try:
        wait_until(lambda: worker.assignment() == {(topic, 0)}, 20, "the first assignment")
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        for i in range(5):
            producer.produce(topic, key=f"k{i}".encode(), value=b"small")
        producer.produce(topic, key=b"pdf", value=b"500 pages")  # offset 5
        for i in range(3):
            producer.produce(topic, key=f"j{i}".encode(), value=b"small")
        producer.flush(10)

        def stuck_reports() -> list[dict[str, Any]]:
            return [
                r
                for r in tail.reports
                if r["partitions"] and r["partitions"][0]["processed_offset"] == 5
            ]

        wait_until(lambda: len(stuck_reports()) >= 4, 10, "four reports of the stuck prefix")
        reports = stuck_reports()
        for r in reports:
            validate(r)
        assert {r["member"] for r in reports} == {f"{unique_name}-w1"}
        p = [r["partitions"][0] for r in reports]
        assert all(x["running"] == 1 and x["in_flight"] >= 1 for x in p)
        # the prefix stopped moving once: one progress time, while reports keep coming
        assert len({x["progress_ms"] for x in p}) == 1
        sent = [r["sent_at_ms"] for r in reports]
        gaps = [b - a for a, b in itertools.pairwise(sent)]
        assert all(60 <= g <= 200 for g in gaps), gaps  # every 125 ms (a busy host wakes late)
        gate.set()
        wait_until(
            lambda: any(
                r["partitions"] and r["partitions"][0]["processed_offset"] == 9
                for r in tail.reports
            ),
            10,
            "the prefix past the stuck message",
        )
    finally:
        gate.set()
        worker.stop()
    time.sleep(0.5)
    released = [r for r in tail.reports if r["released"]]
    tail.close()
    assert released and released[-1]["released"] == [[topic, 0]], released
    # from its first release on, a stopping worker claims nothing: no one consumes it
    after = tail.reports[tail.reports.index(released[0]) :]
    assert not any(r["partitions"] for r in after), after
