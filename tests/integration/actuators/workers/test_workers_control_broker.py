"""A worker obeys signed control events for its group within one second, and only those."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Message, Producer

from actuators.workers import EffectGuard, MemoryDedupeStore, Worker
from schemas import encode
from tests.integration.actuators.workers.workers_broker import (
    KEY,
    control_event,
    create_topics,
    publish,
    wait_until,
)


def test_halt_resume_spread_restore_within_one_second(
    kafka_bootstrap: str, unique_name: str
) -> None:
    topic, control, group = unique_name, f"{unique_name}.control", f"{unique_name}-g"
    create_topics(kafka_bootstrap, (topic, 1), (control, 1))
    processed: list[float] = []
    lock = threading.Lock()

    def handle(msg: Message, ctx: EffectGuard) -> None:
        with lock:
            processed.append(time.monotonic())

    worker = Worker(
        bootstrap=kafka_bootstrap,
        group=group,
        topics=[topic],
        handler=handle,
        instance_id=f"{unique_name}-w",
        dedupe=MemoryDedupeStore(),
        control_topic=control,
        signing_key=KEY,
    )
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5})
    stop_load = threading.Event()

    def load() -> None:
        i = 0
        while not stop_load.is_set():
            producer.produce(topic, key=f"k{i % 20}".encode(), value=b"x")
            producer.poll(0)
            i += 1
            time.sleep(0.005)
        producer.flush(10)

    worker.start()
    loader = threading.Thread(target=load, daemon=True)
    try:
        wait_until(lambda: worker.assignment() == {(topic, 0)}, 20, "assignment")
        loader.start()
        wait_until(lambda: len(processed) > 20, 10, "processing under load")

        # a forged halt and a halt for another group change nothing
        pause = {"scope": "workload", "group": group}
        forged = {**control_event("halt", pause), "signature": "0" * 64}
        other = control_event("halt", {"scope": "workload", "group": "other"})
        publish(kafka_bootstrap, control, forged, other)
        wait_until(lambda: worker.stats().get("control_bad_signature") == 1, 1.0, "forgery seen")
        # the two may arrive in two polls
        wait_until(lambda: worker.stats().get("control_other_group") == 1, 1.0, "other group")
        assert not worker.paused() and "obeyed_halt" not in worker.stats()

        sent = time.monotonic()
        publish(kafka_bootstrap, control, control_event("halt", pause))
        wait_until(lambda: worker.paused() == {(topic, 0)}, 1.0, "halt within 1 s")
        halted_at = time.monotonic()
        # a message its lane took before the halt still runs ("running messages finish"):
        # on a busy host its handler may start a moment after the halt is seen; once that
        # ran, nothing new starts
        time.sleep(0.5)
        with lock:
            settled = len(processed)
            late = [t for t in processed if t > halted_at]
        time.sleep(0.5)
        with lock:
            assert len(processed) == settled, "processed messages while halted"
        assert len(late) <= worker.lanes(topic, 0), f"{len(late)} started after the halt"
        assert halted_at - sent < 1.5

        publish(kafka_bootstrap, control, control_event("resume", pause))
        wait_until(lambda: not worker.paused(), 1.0, "resume within 1 s")
        resumed = time.monotonic()
        wait_until(lambda: processed[-1] > resumed, 2.0, "processing after resume")

        spread = {"group": group, "topic": topic, "partition": 0, "lanes": 6, "pool": None}
        publish(kafka_bootstrap, control, control_event("spread_partition", spread))
        wait_until(lambda: worker.lanes(topic, 0) == 6, 1.0, "spread within 1 s")
        restore = {"group": group, "topic": topic, "partition": 0}
        event = control_event("restore_partition", restore)
        publish(kafka_bootstrap, control, event, event)  # a duplicate acts once
        wait_until(lambda: worker.lanes(topic, 0) == 1, 1.0, "restore within 1 s")
        wait_until(lambda: worker.stats().get("control_duplicate") == 1, 1.0, "duplicate seen")
        publish(kafka_bootstrap, control, encode({"event": "action"}))  # schema-invalid
        wait_until(lambda: worker.stats().get("control_schema") == 1, 1.0, "invalid event seen")
        assert worker.error is None
    finally:
        stop_load.set()
        if loader.is_alive():
            loader.join(5)
        worker.stop()


def test_a_starting_worker_obeys_the_unexpired_commands_published_before_it(
    kafka_bootstrap: str, unique_name: str
) -> None:
    """A member restarted after a command (its predecessor died before obeying it) obeys it;
    an expired command is counted and skipped, and a worker told not to replay sees none."""
    topic, control, group = unique_name, f"{unique_name}.control", f"{unique_name}-g"
    create_topics(kafka_bootstrap, (topic, 2), (control, 1))
    now = int(time.time() * 1000)
    spread = {"group": group, "topic": topic, "partition": 1, "lanes": 4}
    publish(
        kafka_bootstrap,
        control,
        control_event("spread_partition", spread, expires_at=now - 1),  # expired
        control_event("spread_partition", spread),
    )

    def worker(replay_s: float) -> Worker:  # dynamic membership: each leaves on stop
        return Worker(bootstrap=kafka_bootstrap, group=group, topics=[topic],
                      handler=lambda msg, ctx: None, instance_id="",
                      dedupe=MemoryDedupeStore(), control_topic=control, signing_key=KEY,
                      outcomes_topic=None, control_replay_s=replay_s)  # fmt: skip

    fresh = worker(0)
    fresh.start()
    try:
        wait_until(lambda: fresh.assignment() == {(topic, 0), (topic, 1)}, 20, "assignment")
        time.sleep(0.5)
        assert fresh.lanes(topic, 1) == 1 and "obeyed_spread_partition" not in fresh.stats()
    finally:
        fresh.stop()
    w = worker(60.0)
    w.start()
    try:
        wait_until(lambda: w.lanes(topic, 1) == 4, 20, "the replayed spread obeyed")
        assert w.stats().get("control_expired") == 1
        assert w.stats().get("obeyed_spread_partition") == 1
    finally:
        w.stop()
