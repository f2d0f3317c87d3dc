"""The soak's load: real producers, real offset commits and SDK-format progress reports for
``groups`` consumer groups that each read every partition of ``topics`` topics.

Every partition gets ``rate`` messages a second (times its multiplier: a hotspot or a
flood raises it). Each group's consumers are simulated in arrays (the soak is about the
pipeline, not the consumers): they process up to ``capacity`` times the base rate on each
partition, and commit every partition's processed offset every ``commit_every_s`` through
a real ``Consumer.commit`` (groups x partitions commits a cycle, the estate's commit
load). The first ``progress_groups`` groups also report their processed positions as SDK
workers do (``actuators.workers.progress.progress_event`` on ``lagpilot.progress``, every
``DEFAULT_INTERVAL_MS``). A stalled group processes and commits nothing; its reports go on
(a hung handler: the reporter thread still runs) and show it stuck.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid
from typing import Any

import numpy as np
import orjson
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from actuators.workers.progress import DEFAULT_INTERVAL_MS, PartitionProgress, progress_event
from schemas import topics as topic_names

TICK_S = 0.05


class SoakLoad:
    def __init__(
        self,
        bootstrap: str,
        run: str,
        *,
        topics: int,
        partitions: int,
        groups: int,
        rate: float,
        capacity: float = 5.0,
        commit_every_s: float = 1.0,
        progress_groups: int = 2,
    ) -> None:
        self.bootstrap = bootstrap
        self.topics = [f"{run}-t{i:02d}" for i in range(topics)]
        self.groups = [f"{run}-g{i:02d}" for i in range(groups)]
        self.partitions = partitions
        self.tps = [(t, p) for t in self.topics for p in range(partitions)]
        self.index = {tp: i for i, tp in enumerate(self.tps)}
        n = len(self.tps)
        self.rate, self.capacity, self.commit_every_s = rate, capacity, commit_every_s
        self.mult = np.ones(n)
        self.due = np.zeros(n)  # messages owed to each partition (fractional)
        self.acked = np.zeros(n, dtype=np.int64)  # the broker's acknowledged end
        self.processed = np.zeros((groups, n))
        self.progress_ms = np.zeros((groups, n), dtype=np.int64)
        self.stalled: set[int] = set()
        self.progress_groups = min(progress_groups, groups)
        self.commits = 0
        self.commit_errors = 0
        self.produced = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._produce, name="soak-produce", daemon=True),
            threading.Thread(target=self._consume, name="soak-consume", daemon=True),
        ]
        if self.progress_groups:
            self._threads.append(
                threading.Thread(target=self._report, name="soak-progress", daemon=True)
            )

    # -- set-up ----------------------------------------------------------------------------

    def create_topics(self) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        made = admin.create_topics([NewTopic(t, self.partitions, 1) for t in self.topics])
        for f in made.values():
            f.result(timeout=60)

    def start(self) -> SoakLoad:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)

    def delete_topics(self) -> None:
        with contextlib.suppress(Exception):
            AdminClient({"bootstrap.servers": self.bootstrap}).delete_topics(self.topics)

    # -- incidents -------------------------------------------------------------------------

    def set_multiplier(self, tps: list[tuple[str, int]], factor: float) -> None:
        with self._lock:
            for tp in tps:
                self.mult[self.index[tp]] = factor

    def stall(self, group: str, on: bool) -> None:
        g = self.groups.index(group)
        with self._lock:
            (self.stalled.add if on else self.stalled.discard)(g)

    # -- threads ---------------------------------------------------------------------------

    def _produce(self) -> None:
        p = Producer(
            {"bootstrap.servers": self.bootstrap, "linger.ms": 20, "client.id": "soak-producer"}
        )
        acked = self.acked

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                i = self.index[(msg.topic(), msg.partition())]
                if msg.offset() + 1 > acked[i]:
                    acked[i] = msg.offset() + 1

        last = time.monotonic()
        payload = b"x" * 64
        while not self._stop.is_set():
            time.sleep(TICK_S)
            now = time.monotonic()
            with self._lock:
                self.due += self.rate * self.mult * (now - last)
            last = now
            whole = np.floor(self.due).astype(np.int64)
            self.due -= whole
            for i in np.nonzero(whole)[0]:
                t, part = self.tps[i]
                for _ in range(int(whole[i])):
                    try:
                        p.produce(t, payload, partition=part, on_delivery=delivered)
                    except BufferError:
                        p.poll(0.1)
                self.produced += int(whole[i])
            p.poll(0)
        p.flush(10)

    def _consume(self) -> None:
        committers = [
            Consumer(
                {"bootstrap.servers": self.bootstrap, "group.id": g, "enable.auto.commit": False}
            )
            for g in self.groups
        ]
        step = self.rate * self.capacity
        last = next_commit = time.monotonic()
        try:
            while not self._stop.is_set():
                time.sleep(TICK_S)
                now = time.monotonic()
                now_ms = int(time.time() * 1000)
                with self._lock:
                    end = self.acked.astype(np.float64)
                    for g in range(len(self.groups)):
                        if g in self.stalled:
                            continue
                        before = np.floor(self.processed[g])
                        self.processed[g] = np.minimum(end, self.processed[g] + step * (now - last))
                        moved = np.floor(self.processed[g]) > before
                        self.progress_ms[g][moved] = now_ms
                    stalled = set(self.stalled)
                    offsets = np.floor(self.processed).astype(np.int64)
                last = now
                if now < next_commit:
                    continue
                next_commit += self.commit_every_s
                for g, c in enumerate(committers):
                    if g in stalled:
                        continue
                    tps = [
                        TopicPartition(t, p, int(o))
                        for (t, p), o in zip(self.tps, offsets[g], strict=True)
                    ]
                    try:
                        c.commit(offsets=tps, asynchronous=True)
                        self.commits += len(tps)
                    except Exception:  # the broker is busy: the next cycle commits again
                        self.commit_errors += 1
                for c in committers:
                    c.poll(0)
        finally:
            for c in committers:
                c.close()

    def _report(self) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})
        host = socket.gethostname()
        members = [f"soak-{uuid.uuid4().hex[:6]}" for _ in range(self.progress_groups)]
        interval_s = DEFAULT_INTERVAL_MS / 1000
        next_at = time.monotonic()
        while not self._stop.is_set():
            next_at += interval_s
            self._stop.wait(max(0.0, next_at - time.monotonic()))
            now_ms = int(time.time() * 1000)
            with self._lock:
                processed = np.floor(self.processed[: self.progress_groups]).astype(np.int64)
                progress_ms = self.progress_ms[: self.progress_groups].copy()
                stalled = set(self.stalled)
                acked = self.acked.copy()
            for g in range(self.progress_groups):
                held = np.maximum(0, acked - processed[g])
                parts = [
                    PartitionProgress(
                        t,
                        part,
                        int(processed[g][i]),
                        int(progress_ms[g][i]),
                        in_flight=int(held[i]),
                        running=int(g in stalled and held[i] > 0),
                    )
                    for i, (t, part) in enumerate(self.tps)
                ]
                event = progress_event(
                    group=self.groups[g],
                    member=members[g],
                    host=host,
                    sent_at_ms=now_ms,
                    interval_ms=DEFAULT_INTERVAL_MS,
                    partitions=parts,
                )
                with contextlib.suppress(BufferError):
                    p.produce(
                        topic_names.PROGRESS, orjson.dumps(event), key=self.groups[g].encode()
                    )
            p.poll(0)
        p.flush(10)
