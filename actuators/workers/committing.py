"""Backpressure and commits on the poll thread (a part of the ``Engine``, shared by
``Worker`` and ``PoolWorker``): a partition whose lanes are full, held (handed off) or
halted is paused and resumed once drained; only processed prefixes are committed,
asynchronously at the commit interval and synchronously where a position must hold (revoke,
hand-off, shutdown), each with the engine's metadata (hand-off markers); what the broker
acknowledged is kept, so an unchanged position is not committed again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from actuators.workers.engine_settings import BUFFERED_PER_LANE
from actuators.workers.handling import Tally
from actuators.workers.lanes import LaneExecutor, TopicPart

log = logging.getLogger("actuators.workers.engine")


class Committing:
    """The flow and commits part of the engine. It owns the paused partitions (``paused``),
    the positions the broker acknowledged (``acked``) and when it last committed; the rest
    it is given. The consumer is asked for at each use: the engine builds it when it
    connects, after this part is built. ``held`` and ``metadata`` are the engine's hooks."""

    def __init__(
        self,
        *,
        dispatcher: LaneExecutor,
        assigned: set[TopicPart],
        buffered: int | None,
        interval_s: float,
        tally: Tally,
        consumer: Callable[[], Consumer | None],
        held: Callable[[TopicPart], bool],
        metadata: Callable[[TopicPart], str],
    ) -> None:
        self._dispatcher = dispatcher
        self._assigned = assigned  # the engine's set, read as it changes
        self._buffered = buffered  # None: BUFFERED_PER_LANE x its lanes
        self._interval_s = interval_s
        self._tally = tally
        self._consumer = consumer
        self._held = held
        self._metadata = metadata
        self.paused: set[TopicPart] = set()
        self.room = 0  # messages the partitions not paused can take before they pause
        self.acked: dict[TopicPart, int] = {}  # last commit the broker acknowledged
        self._last_commit = 0.0

    def flow(self) -> None:
        """Pause partitions whose lanes are full (or held, or halted); resume when drained."""
        consumer = self._consumer()
        assert consumer is not None
        buffered = self._dispatcher.buffered()
        halted = self._dispatcher.halted
        pause, resume = [], []
        room = 0
        for tp in self._assigned:
            n = buffered.get(tp, 0)
            hold = halted or self._held(tp)
            high = self._buffered or max(64, BUFFERED_PER_LANE * self._dispatcher.lanes(tp))
            if tp in self.paused:
                if not hold and n <= high // 2:
                    resume.append(tp)
                    room += high - n
            elif hold or n >= high:
                pause.append(tp)
            else:
                room += high - n
        self.room = room
        if pause:
            consumer.pause([TopicPartition(t, p) for t, p in pause])
            self.paused.update(pause)
            self._tally.count("paused", len(pause))
        if resume:
            consumer.resume([TopicPartition(t, p) for t, p in resume])
            self.paused.difference_update(resume)

    def commit_due(self) -> None:
        """At the commit interval: the positions the broker has not acknowledged yet,
        asynchronously (so a failed commit is retried at the next interval)."""
        if time.monotonic() - self._last_commit >= self._interval_s:
            positions = self._dispatcher.positions()
            moved = {tp: p for tp, p in positions.items() if self.acked.get(tp) != p}
            self.commit(moved, asynchronous=True)
            self._last_commit = time.monotonic()

    def commit(
        self, positions: dict[TopicPart, int], *, asynchronous: bool, metadata: str | None = None
    ) -> bool:
        offsets = [
            TopicPartition(t, p, off, metadata if metadata is not None else self._metadata((t, p)))
            for (t, p), off in positions.items()
            if off is not None and off >= 0
        ]
        consumer = self._consumer()
        if not offsets or consumer is None:
            return True
        try:
            result = consumer.commit(offsets=offsets, asynchronous=asynchronous)
        except KafkaException as exc:
            self._tally.count("commit_failed")
            log.warning("commit of %s failed: %s", offsets, exc)
            return False
        self._tally.count("commits")
        if not asynchronous:
            for tp in result or []:
                if tp.error is None and tp.offset >= 0:
                    self.acked[(tp.topic, tp.partition)] = tp.offset
        return True

    def close_partitions(self, tps: Iterable[TopicPart], timeout_s: float) -> None:
        """Revoke/shutdown: finish running messages, commit the processed prefix, forget."""
        tps = [tp for tp in tps if not self._held(tp)]
        positions = self._dispatcher.close(tps, timeout_s)
        self.commit({tp: p for tp, p in positions.items() if p is not None}, asynchronous=False)

    def on_commit(self, err: Any, partitions: list[TopicPartition]) -> None:
        """Runs inside consume() on the poll thread (librdkafka serves callbacks there)."""
        if err is not None:
            self._tally.count("commit_failed")
            log.info("async commit failed, retried at the next interval: %s", err)
            return
        for tp in partitions:
            if tp.error is None and tp.offset >= 0:
                self.acked[(tp.topic, tp.partition)] = tp.offset

    def current_position(self, tp: TopicPart) -> int | None:
        """Where this consumer stands on ``tp`` when nothing was delivered to the lanes."""
        consumer = self._consumer()
        assert consumer is not None
        part = TopicPartition(*tp)
        for pos in (consumer.position([part]), consumer.committed([part], timeout=5)):
            if pos[0].offset >= 0:
                return int(pos[0].offset)
        low, _high = consumer.get_watermark_offsets(part, timeout=5)
        return int(low)
