"""Reading the truth where the HWM history cannot answer: the record at the committed offset.

A time lag is "now minus the produce time of the oldest message the group has not
consumed", and that message is the record at (or, past a transaction marker or a deleted
record, the first record after) the committed offset. The HWM history answers it within its
bound for 24 h back (``pipeline.model.history``); beyond the history (a freshly started pipeline,
a restored state, a lag older than the horizon) the model can only extrapolate. There, this
module reads the record's timestamp from the broker and the model uses it
(``TopicModel.record_read``): exact while the group stays at that offset.

Two parts, as everywhere here:
- ``ReadPlanner`` (pure, ``now_ms`` passed in): which group-partitions to read, within
  bounds: only those whose time lag was extrapolated, each at most once per
  ``per_partition_s``, at most ``per_s`` reads a second in all (a token bucket);
- ``RecordTimeReader`` (the effect): a thread with its own consumer (assign, never
  subscribe, never commit) that reads what the planner asked and hands the timestamps back
  to the lag operator, which feeds them to the model as plain data before its next tick.

The timestamp is the record's own: CreateTime (the producer's clock) or LogAppendTime (the
broker's), as the topic is configured.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.model.events import TopicObservation
from pipeline.model.history import EXTRAPOLATED
from runtime.cli import CLIENT_LOG

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReadRequest:
    topic: str
    group: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class ReadLimits:
    per_partition_s: float = 30.0  # a group-partition is read at most this often
    per_s: float = 20.0  # reads a second, all topics together (0: never read)
    burst: int = 50  # the token bucket's depth: what a fresh pipeline may read at once


class ReadPlanner:
    """Which group-partitions to read after a tick, within ``ReadLimits`` (pure)."""

    def __init__(self, limits: ReadLimits) -> None:
        self.limits = limits
        self._last_ms: dict[tuple[str, str, int], int] = {}
        self._tokens = float(limits.burst)
        self._tokens_ms = 0
        self.dropped = 0  # wanted, but over the rate: asked again after a later tick

    def plan(self, obs: TopicObservation, now_ms: int) -> list[ReadRequest]:
        lim = self.limits
        if lim.per_s <= 0 or not obs.mask.size:
            return []
        if self._tokens_ms:
            grown = (now_ms - self._tokens_ms) / 1000.0 * lim.per_s
            self._tokens = min(float(lim.burst), self._tokens + max(0.0, grown))
        self._tokens_ms = now_ms
        gi, pi = np.nonzero(obs.mask & (obs.time_lag_source == EXTRAPOLATED))
        if not len(gi):
            return []
        # the longest time lags first: they are the ones extrapolation gets most wrong
        order = np.argsort(-obs.time_lag_s[gi, pi], kind="stable")
        every_ms = lim.per_partition_s * 1000.0
        out: list[ReadRequest] = []
        for g, p in zip(gi[order].tolist(), pi[order].tolist(), strict=True):
            key = (obs.topic, obs.groups[g], p)
            last = self._last_ms.get(key)
            if last is not None and now_ms - last < every_ms:
                continue
            if self._tokens < 1.0:
                self.dropped += 1
                continue
            self._tokens -= 1.0
            self._last_ms[key] = now_ms
            out.append(ReadRequest(obs.topic, obs.groups[g], p, int(obs.committed[g, p])))
        if len(self._last_ms) > 100_000:  # bounded: forget what may be read again anyway
            self._last_ms = {k: t for k, t in self._last_ms.items() if now_ms - t < every_ms}
        return out


class RecordTimeReader:
    """Reads the timestamps the planner asks for, in a thread; the lag operator calls
    ``want`` after each tick and ``take`` before the next one of the same topic.

    The thread and its consumer start on the first request (constructing one does no I/O),
    and end with ``close`` or with the process (a daemon thread).
    """

    def __init__(
        self,
        broker_config: dict[str, Any],
        limits: ReadLimits | None = None,
        *,
        group_id: str = "lagpilot-record-times",
        timeout_s: float = 2.0,
        max_queued: int = 1_000,
        on_result: Callable[[str, int], None] | None = None,
    ) -> None:
        self.broker_config = dict(broker_config)
        self.planner = ReadPlanner(limits or ReadLimits())
        self.group_id = group_id  # never joined, never committed: librdkafka wants one
        self.timeout_s = timeout_s
        self._requests: queue.Queue[ReadRequest] = queue.Queue(maxsize=max_queued)
        self._results: dict[str, list[list[Any]]] = defaultdict(list)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._running = True
        self.reads = 0
        self.misses = 0  # asked, but no record came back within the timeout
        self.on_result = on_result  # (read | miss | dropped, count): for the metrics

    def _count(self, result: str, n: int) -> None:
        if n and self.on_result is not None:
            self.on_result(result, n)

    def want(self, obs: TopicObservation) -> None:
        dropped = self.planner.dropped
        for req in self.planner.plan(obs, obs.now_ms):
            try:
                self._requests.put_nowait(req)
            except queue.Full:
                self.planner.dropped += 1
                break
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="record-time-reader", daemon=True
                )
                self._thread.start()
        self._count("dropped", self.planner.dropped - dropped)

    def take(self, topic: str) -> list[list[Any]]:
        """``[group, partition, offset, record_ms]`` rows read for ``topic`` since the last
        call, for ``TopicModel.record_read``."""
        with self._lock:
            return self._results.pop(topic, [])

    def close(self) -> None:
        self._running = False
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + 1)

    def _run(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer(
            {
                **self.broker_config,
                "logger": CLIENT_LOG,
                "group.id": self.group_id,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",  # the record is gone: the first one after
                "max.partition.fetch.bytes": 65_536,
                "fetch.wait.max.ms": 50,
            }
        )
        try:
            while self._running:
                try:
                    batch = [self._requests.get(timeout=0.5)]
                except queue.Empty:
                    continue
                while len(batch) < 100:
                    try:
                        batch.append(self._requests.get_nowait())
                    except queue.Empty:
                        break
                try:
                    self._read(consumer, batch)
                except Exception as exc:  # a broker hiccup: the planner asks again later
                    log.warning("reading %d record timestamps failed: %s", len(batch), exc)
        finally:
            consumer.close()

    def _read(self, consumer: Any, batch: list[ReadRequest]) -> None:
        """One assignment per round of distinct partitions (groups at different offsets of
        one partition go in later rounds); the first record at or after each offset."""
        from confluent_kafka import TopicPartition

        rounds: list[dict[tuple[str, int], list[ReadRequest]]] = []
        for req in batch:
            for r in rounds:
                got = r.get((req.topic, req.partition))
                if got is None:
                    r[(req.topic, req.partition)] = [req]
                    break
                if got[0].offset == req.offset:  # the same record: one read serves both
                    got.append(req)
                    break
            else:
                rounds.append({(req.topic, req.partition): [req]})
        for r in rounds:
            consumer.assign([TopicPartition(t, p, reqs[0].offset) for (t, p), reqs in r.items()])
            waiting = dict(r)
            deadline = time.monotonic() + self.timeout_s
            while waiting and self._running and time.monotonic() < deadline:
                for msg in consumer.consume(num_messages=len(waiting), timeout=0.2):
                    if msg.error():
                        continue
                    key = (msg.topic(), msg.partition())
                    reqs = waiting.get(key)
                    _, ts_ms = msg.timestamp()
                    if reqs is None or ts_ms <= 0 or msg.offset() < reqs[0].offset:
                        continue
                    del waiting[key]
                    with self._lock:
                        for q in reqs:
                            self._results[q.topic].append([q.group, q.partition, q.offset, ts_ms])
                    self.reads += 1
                    self._count("read", 1)
            self.misses += len(waiting)
            self._count("miss", len(waiting))
            consumer.unassign()
