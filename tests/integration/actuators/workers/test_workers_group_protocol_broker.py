"""What librdkafka does under ``group.protocol=consumer`` (KIP-848) on the real broker, as
actuators/workers/group_protocol.py states it and the ``Worker`` relies on it: incremental
rebalance callbacks, static membership (a restart under the same id gets its partitions
back; a second live process with the id is refused, not the first one fenced; so is a
restart after a crash, until the dead member's session expired).

Members are plain consumers built with the SDK's own group settings, so each callback is
seen as librdkafka calls it. Each hand-over waits for a heartbeat at the broker's interval
(5 s by default), so the whole story runs once, in one test.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from actuators.workers import MemoryDedupeStore, Worker
from actuators.workers.engine import is_fatal
from actuators.workers.group_protocol import group_settings
from tests.integration.actuators.workers.workers_broker import KEY, create_topics, wait_until

PARTITIONS = 4
#: the broker's heartbeat interval (group.consumer.heartbeat.interval.ms, 5 s by default)
#: bounds each step; a step gets a few of them
STEP_S = 25


#: a static member in its own process, SIGKILLed once it owns partitions (a crash: no leave)
CRASHER = """
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
              "group.instance.id": "c", "group.protocol": "consumer"})
c.subscribe([sys.argv[3]])
while not c.assignment():
    c.poll(0.1)
print("owned", flush=True)
while True:
    c.poll(0.1)
"""


class Member:
    """One group member polling on a thread, recording its callbacks in order."""

    def __init__(self, bootstrap: str, group: str, topic: str, instance_id: str) -> None:
        self.calls: list[tuple[str, list[int]]] = []
        self.owned: set[int] = set()
        self.fatal: str | None = None
        self._stop = threading.Event()
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": instance_id,
            "enable.auto.commit": False, **group_settings("consumer"),
        })  # fmt: skip
        self.consumer.subscribe([topic], on_assign=self._assign, on_revoke=self._revoke,
                                on_lost=self._lost)  # fmt: skip
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _assign(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        self.calls.append(("assign", sorted(p.partition for p in parts)))
        consumer.incremental_assign(parts)
        self.owned |= {p.partition for p in parts}

    def _revoke(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        self.calls.append(("revoke", sorted(p.partition for p in parts)))
        consumer.incremental_unassign(parts)
        self.owned -= {p.partition for p in parts}

    def _lost(self, _consumer: Consumer, parts: list[TopicPartition]) -> None:
        self.calls.append(("lost", sorted(p.partition for p in parts)))
        self.owned -= {p.partition for p in parts}

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                msg = self.consumer.poll(0.1)
            except KafkaException as exc:
                self.fatal = str(exc)
                return
            if msg is not None and msg.error() is not None and is_fatal(msg.error()):
                self.fatal = msg.error().str()
                return

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()


def test_consumer_protocol_callbacks_and_static_membership(
    kafka_bootstrap: str, unique_name: str
) -> None:
    topic, group = unique_name, f"{unique_name}-g"
    create_topics(kafka_bootstrap, (topic, PARTITIONS))
    members: list[Member] = []

    def join(instance_id: str) -> Member:
        m = Member(kafka_bootstrap, group, topic, instance_id)
        members.append(m)
        return m

    try:
        a = join("a")
        wait_until(lambda: a.owned == set(range(PARTITIONS)), STEP_S, "a to own every partition")
        assert a.calls == [("assign", list(range(PARTITIONS)))]

        # a second member: the first revokes just what moves, then gets an empty assign
        # (incremental, as cooperative-sticky); the newcomer gets the rest
        b = join("b")
        wait_until(lambda: len(b.owned) == PARTITIONS // 2, STEP_S, "b to get its share")
        moved = sorted(b.owned)
        assert a.calls[1:] == [("revoke", moved), ("assign", [])]
        assert a.owned | b.owned == set(range(PARTITIONS)) and not a.owned & b.owned
        assert b.calls == [("assign", moved)]

        # b closes: a static member's partitions wait for it (nobody gets them) ...
        b.close()
        before = list(a.calls)
        b2 = join("b")  # ... and its restart under the same id gets them back
        wait_until(lambda: sorted(b2.owned) == moved, STEP_S, "b's restart to get its share")
        assert a.calls == before, "a restart under the same static id moved a's partitions"

        # a second live process with b's id is refused; the one holding the id keeps it
        dup = join("b")
        wait_until(lambda: dup.fatal is not None, STEP_S, "the duplicate id to be refused")
        assert "instance ID is still used by another member" in str(dup.fatal)
        assert not dup.owned and sorted(b2.owned) == moved and b2.fatal is None

        # a static member that crashed: its restart is refused while its session lasts
        crash_group = f"{unique_name}-crash"
        crasher = subprocess.Popen([sys.executable, "-c", CRASHER, kafka_bootstrap, crash_group,
                                    topic], stdout=subprocess.PIPE)  # fmt: skip
        try:
            assert crasher.stdout is not None and crasher.stdout.readline() == b"owned\n"
        finally:
            crasher.send_signal(signal.SIGKILL)
            crasher.wait(10)
        restarted = Member(kafka_bootstrap, crash_group, topic, "c")
        members.append(restarted)
        wait_until(lambda: restarted.fatal is not None, STEP_S, "the restart to be refused")
        assert "instance ID is still used by another member" in str(restarted.fatal)
    finally:
        for m in members:
            with contextlib.suppress(RuntimeError):  # closed already (b)
                m.close()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_worker_whose_static_id_is_taken_stops_with_the_error(
    kafka_bootstrap: str, unique_name: str, protocol: str
) -> None:
    """Two live workers with one static id: the classic protocol fences the older, KIP-848
    refuses the newcomer; either way the one whose consumer is unusable stops its loop with
    the error (``worker.error``) instead of polling on without partitions."""
    topic, control = unique_name, f"{unique_name}.control"
    create_topics(kafka_bootstrap, (topic, 2), (control, 1))

    def worker() -> Worker:
        return Worker(bootstrap=kafka_bootstrap, group=f"{unique_name}-g", topics=[topic],
                      handler=lambda msg, ctx: None, dedupe=MemoryDedupeStore(),
                      control_topic=control, outcomes_topic=None, signing_key=KEY,
                      instance_id="same", group_protocol=protocol,
                      progress_interval_ms=0)  # fmt: skip

    first = worker()
    first.start()
    second = None
    try:
        wait_until(lambda: len(first.assignment()) == 2, STEP_S, "the first worker's partitions")
        second = worker()
        second.start()
        stopped = second if protocol == "consumer" else first
        wait_until(lambda: not stopped.running, STEP_S, f"the {protocol} loser to stop")
        assert isinstance(stopped.error, KafkaException)
        assert "instance" in str(stopped.error).lower()
        survivor = first if stopped is second else second
        assert survivor.running and survivor.error is None
    finally:
        for w in (first, second):
            if w is not None:
                w.stop()
