"""The baseline users run today: plain confluent-kafka consumers, written as its docs show them.

The consumer of confluent-kafka's documentation ("Basic poll loop", "Synchronous commits"):
``poll(1.0)`` one message, process it in the poll loop, commit synchronously after
processing (at-least-once: a crash redoes at most the message in hand), the library's
defaults for everything else; in particular ``session.timeout.ms`` and
``max.poll.interval.ms`` are not set (librdkafka's defaults: 45 s and 300 s). A heavy
message holds its thread's partitions: nothing else of theirs is processed meanwhile.

``NaiveGroup`` runs ``members`` such consumers on threads in one group, as many as the SDK
arm has worker threads (threads beyond the partition count get no partition and idle:
that is what a user who scales threads gets), and offers what the swarm asks of its
worker (``run``, ``stop``, ``stats``, ``assignment``, ``lanes``, ``rebalances``). The side
effect is a plain insert per processed message, so a re-processed message is a duplicate.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, libversion

POLL_TIMEOUT_S = 1.0  # the docs' poll(timeout=1.0)


class NaiveGroup:
    """``members`` plain consumers of ``topic`` in ``group``, each processing in its poll loop."""

    def __init__(
        self,
        *,
        bootstrap: str,
        group: str,
        topic: str,
        ledger_path: Path,
        work_ms: Callable[[bytes], tuple[str, float, int, bool]],
        members: int,
    ) -> None:
        self.bootstrap, self.group, self.topic = bootstrap, group, topic
        self._ledger_path = ledger_path
        self._work = work_ms  # payload -> (id, work ms, produced_ms, heavy)
        self.members = members
        self._stop = threading.Event()
        self._stats: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.rebalances = 0
        self._owned: dict[int, set[tuple[str, int]]] = {}  # member -> its partitions

    def config(self, index: int) -> dict[str, Any]:
        """One member's consumer settings: the connection, its group, a new group's start at
        the earliest offset, manual commits (after processing); nothing else."""
        return {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group,
            "client.id": f"naive-{index}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,  # committed after processing, by hand
        }

    def shape(self) -> dict[str, Any]:
        """The settings the arm ran with; what is not set is librdkafka's default."""
        settings = {k: v for k, v in self.config(0).items()
                    if k not in ("bootstrap.servers", "group.id", "client.id")}  # fmt: skip
        return {
            "members": self.members,
            "settings": settings,
            "poll_timeout_s": POLL_TIMEOUT_S,
            "commit": "synchronous, after each processed message",
            # librdkafka's CONFIGURATION.md defaults, in force because they are not set
            "defaults": {"session.timeout.ms": 45000, "max.poll.interval.ms": 300000},
            "librdkafka": libversion()[0],
        }

    def assignment(self) -> set[tuple[str, int]]:
        """The partitions the members own now, once every member has had its first
        assignment (what the swarm waits for before producing: a member joining later
        would move partitions while the run is measured)."""
        with self._lock:
            if len(self._owned) < self.members:
                return set()
            return set().union(*self._owned.values())

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._stats[name] += n

    def _member(self, index: int) -> None:
        def on_assign(_c: Any, parts: list[Any]) -> None:
            with self._lock:
                self.rebalances += 1
                self._owned[index] = {(p.topic, p.partition) for p in parts}

        def on_revoke(_c: Any, parts: list[Any]) -> None:
            with self._lock:
                self.rebalances += 1
                self._owned[index] = set()

        consumer = Consumer(self.config(index))
        consumer.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke,
                           on_lost=on_revoke)  # fmt: skip
        db = sqlite3.connect(self._ledger_path, timeout=30, isolation_level=None)
        try:
            while not self._stop.is_set():
                msg = consumer.poll(POLL_TIMEOUT_S)
                if msg is None or msg.error() is not None:
                    continue
                mid, work_ms, produced_ms, heavy = self._work(msg.value())
                time.sleep(work_ms / 1000)  # the handler, in the poll loop
                db.execute(
                    "INSERT INTO effects VALUES (?, ?, ?, ?, ?)",
                    (mid, msg.partition(), int(heavy), produced_ms, int(time.time() * 1000)),
                )
                self._count("processed")
                try:
                    consumer.commit(message=msg, asynchronous=False)
                    self._count("commits")
                except KafkaException:  # lost the partition meanwhile: its new owner redoes it
                    self._count("commit_refused")
        finally:
            consumer.close()
            db.close()

    def run(self) -> None:
        threads = [
            threading.Thread(target=self._member, args=(i,), name=f"naive-{i}", daemon=True)
            for i in range(self.members)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def stop(self, timeout_s: float | None = None) -> None:
        self._stop.set()

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {**self._stats, "rebalances": self.rebalances}

    def lanes(self, topic: str, partition: int) -> int:
        return 1
