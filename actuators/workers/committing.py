"""Backpressure and commits on the poll thread (the ``Engine``'s side, shared by ``Worker``
and ``PoolWorker``): a partition whose lanes are full, held (handed off) or halted is paused
and resumed once drained; only processed prefixes are committed, asynchronously at the
commit interval and synchronously where a position must hold (revoke, hand-off, shutdown),
each with the subclass's metadata (hand-off markers); what the broker acknowledged is kept,
so an unchanged position is not committed again.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from actuators.workers.engine_settings import BUFFERED_PER_LANE
from actuators.workers.lanes import LaneExecutor, TopicPart

log = logging.getLogger("actuators.workers.engine")


class Committing:
    """The flow and commits half of the engine; the engine holds the state it reads."""

    _consumer: Consumer | None
    _dispatcher: LaneExecutor
    _assigned: set[TopicPart]
    _paused: set[TopicPart]
    _acked: dict[TopicPart, int]
    _buffered: int | None

    @abc.abstractmethod
    def _held(self, tp: TopicPart) -> bool:
        """The engine's hook."""

    @abc.abstractmethod
    def _metadata(self, tp: TopicPart) -> str:
        """The engine's hook."""

    @abc.abstractmethod
    def _count(self, name: str, n: int = 1) -> None:
        """The engine's tally."""

    def _flow(self) -> None:
        """Pause partitions whose lanes are full (or held, or halted); resume when drained."""
        assert self._consumer is not None
        buffered = self._dispatcher.buffered()
        halted = self._dispatcher.halted
        pause, resume = [], []
        for tp in self._assigned:
            n = buffered.get(tp, 0)
            hold = halted or self._held(tp)
            high = self._buffered or max(64, BUFFERED_PER_LANE * self._dispatcher.lanes(tp))
            if tp in self._paused:
                if not hold and n <= high // 2:
                    resume.append(tp)
            elif hold or n >= high:
                pause.append(tp)
        if pause:
            self._consumer.pause([TopicPartition(t, p) for t, p in pause])
            self._paused.update(pause)
            self._count("paused", len(pause))
        if resume:
            self._consumer.resume([TopicPartition(t, p) for t, p in resume])
            self._paused.difference_update(resume)

    def _commit(
        self, positions: dict[TopicPart, int], *, asynchronous: bool, metadata: str | None = None
    ) -> bool:
        offsets = [
            TopicPartition(t, p, off, metadata if metadata is not None else self._metadata((t, p)))
            for (t, p), off in positions.items()
            if off is not None and off >= 0
        ]
        if not offsets or self._consumer is None:
            return True
        try:
            result = self._consumer.commit(offsets=offsets, asynchronous=asynchronous)
        except KafkaException as exc:
            self._count("commit_failed")
            log.warning("commit of %s failed: %s", offsets, exc)
            return False
        self._count("commits")
        if not asynchronous:
            for tp in result or []:
                if tp.error is None and tp.offset >= 0:
                    self._acked[(tp.topic, tp.partition)] = tp.offset
        return True

    def _close_partitions(self, tps: Iterable[TopicPart], timeout_s: float) -> None:
        """Revoke/shutdown: finish running messages, commit the processed prefix, forget."""
        tps = [tp for tp in tps if not self._held(tp)]
        positions = self._dispatcher.close(tps, timeout_s)
        self._commit({tp: p for tp, p in positions.items() if p is not None}, asynchronous=False)

    def _on_commit(self, err: Any, partitions: list[TopicPartition]) -> None:
        """Runs inside consume() on the poll thread (librdkafka serves callbacks there)."""
        if err is not None:
            self._count("commit_failed")
            log.info("async commit failed, retried at the next interval: %s", err)
            return
        for tp in partitions:
            if tp.error is None and tp.offset >= 0:
                self._acked[(tp.topic, tp.partition)] = tp.offset

    def _current_position(self, tp: TopicPart) -> int | None:
        """Where this consumer stands on ``tp`` when nothing was delivered to the lanes."""
        assert self._consumer is not None
        part = TopicPartition(*tp)
        for pos in (self._consumer.position([part]), self._consumer.committed([part], timeout=5)):
            if pos[0].offset >= 0:
                return int(pos[0].offset)
        low, _high = self._consumer.get_watermark_offsets(part, timeout=5)
        return int(low)
