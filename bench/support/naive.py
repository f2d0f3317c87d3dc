"""The baseline users run today: plain confluent-kafka consumers that process in their poll loop.

This is how agent workers are usually written: ``consume()`` a batch, run the handler on each
message in turn, commit the batch, poll again. While a batch of heavy payloads is processed
nobody polls, so a batch that takes longer than ``max.poll.interval.ms`` makes the member
leave the group: its partitions move, the batch's commit is refused, and the new owner
processes the batch again (duplicate side effects), which can take as long again (the storm).

``NaiveGroup`` runs ``members`` such consumers on threads in one group and offers what the
swarm asks of its worker (``run``, ``stop``, ``stats``, ``lanes``, ``rebalances``). The side
effect is a plain insert per processed message, so a re-processed message is a duplicate row.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException

#: librdkafka requires max.poll.interval.ms >= session.timeout.ms, and Kafka's default
#: group.min.session.timeout.ms is 6 s: the smallest poll interval a stock broker allows.
MAX_POLL_INTERVAL_MS = 6000


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
        members: int = 4,
        batch: int = 500,
        max_poll_interval_ms: int = MAX_POLL_INTERVAL_MS,
    ) -> None:
        self.bootstrap, self.group, self.topic = bootstrap, group, topic
        self._ledger_path = ledger_path
        self._work = work_ms  # payload -> (id, work ms, produced_ms, heavy)
        self.members = members
        self.batch = batch
        self.max_poll_interval_ms = max_poll_interval_ms
        self._stop = threading.Event()
        self._stats: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.rebalances = 0
        self._owned: dict[int, set[tuple[str, int]]] = {}  # member -> its partitions

    def assignment(self) -> set[tuple[str, int]]:
        """The partitions the members own now (what the swarm waits for before producing)."""
        with self._lock:
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

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "client.id": f"naive-{index}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": self.max_poll_interval_ms,
                "max.poll.interval.ms": self.max_poll_interval_ms,
            }
        )
        consumer.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke,
                           on_lost=on_revoke)  # fmt: skip
        db = sqlite3.connect(self._ledger_path, timeout=30, isolation_level=None)
        try:
            while not self._stop.is_set():
                msgs = consumer.consume(num_messages=self.batch, timeout=0.1)
                for msg in msgs:
                    if msg.error() is not None or self._stop.is_set():
                        continue
                    mid, work_ms, produced_ms, heavy = self._work(msg.value())
                    time.sleep(work_ms / 1000)  # the handler, in the poll loop
                    db.execute(
                        "INSERT INTO effects VALUES (?, ?, ?, ?, ?)",
                        (mid, msg.partition(), int(heavy), produced_ms, int(time.time() * 1000)),
                    )
                    self._count("processed")
                if msgs:
                    try:
                        consumer.commit(asynchronous=False)
                        self._count("commits")
                    except KafkaException:  # left the group mid-batch: someone redoes it
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
