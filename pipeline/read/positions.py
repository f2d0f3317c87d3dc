"""Which ``__consumer_offsets`` (and ``lagpilot.progress``) partitions the commits reader is
assigned, and how far it has read them: its consumer's positions against the fetches'
cached ends (``pipeline.read.commits`` asks before a sample may go out)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline.read.commits import CommitsConfig

log = logging.getLogger(__name__)


class ReadPositions:
    """Which partitions the reader is assigned, and how far it has read them."""

    def __init__(self, cfg: CommitsConfig) -> None:
        self.offsets_topic = cfg.offsets_topic
        self.progress_topic = cfg.progress_topic
        self.auto_offset_reset = cfg.auto_offset_reset
        self.assigned: set[int] | None = None  # offsets partitions; None until assigned
        self.assigned_progress: set[int] = set()  # lagpilot.progress partitions
        # committed offsets at assignment per (topic, partition), looked up lazily
        self.starts: dict[tuple[str, int], int] = {}

    @property
    def owned(self) -> frozenset[int]:
        """The offsets partitions assigned (none before the first assignment)."""
        return frozenset(self.assigned or ())

    def offsets_parts(self, partitions: Any) -> set[int]:
        return {tp.partition for tp in partitions if tp.topic == self.offsets_topic}

    def progress_parts(self, partitions: Any) -> set[int]:
        return {tp.partition for tp in partitions if tp.topic == self.progress_topic}

    def assign(self, partitions: Any) -> None:
        self.assigned = (self.assigned or set()) | self.offsets_parts(partitions)
        self.assigned_progress |= self.progress_parts(partitions)
        for tp in partitions:
            self.starts.pop((tp.topic, tp.partition), None)

    def revoke(self, partitions: Any) -> None:
        self.assigned = (self.assigned or set()) - self.offsets_parts(partitions)
        self.assigned_progress -= self.progress_parts(partitions)

    def caught_up(self, consumer: Any) -> bool:
        """Has this reader reached the end of every offsets partition it is assigned, as
        of the last fetch responses (the high watermark, or the last stable offset of
        a read_committed consumer)? Not before the first assignment: then nothing is read.

        A partition read from its committed offset that has nothing new has no position
        (nothing consumed): there the committed offset, looked up once, stands in."""
        if self.assigned is None:
            return False
        from confluent_kafka import TopicPartition

        tps = [TopicPartition(self.offsets_topic, p) for p in sorted(self.assigned)]
        if self.progress_topic:
            tps += [TopicPartition(self.progress_topic, p) for p in self.assigned_progress]
        for tp in consumer.position(tps) if tps else []:
            lo, hi = consumer.get_watermark_offsets(tp, cached=True)
            if hi < 0:
                return False  # no fetch response yet
            at = tp.offset if tp.offset >= 0 else self.start_offset(consumer, tp, lo, hi)
            if at < hi:
                return False
        return True

    def positions(self, consumer: Any) -> dict[int, int] | None:
        """This reader's position on each offsets partition it is assigned (where reading
        began, for one it has consumed nothing from yet); None before the first
        assignment."""
        if self.assigned is None:
            return None
        from confluent_kafka import TopicPartition

        tps = [TopicPartition(self.offsets_topic, p) for p in sorted(self.assigned)]
        out = {}
        for tp in consumer.position(tps) if tps else []:
            if tp.offset >= 0:
                out[tp.partition] = tp.offset
            else:
                low, high = consumer.get_watermark_offsets(tp, cached=True)
                out[tp.partition] = self.start_offset(consumer, tp, low, high)
        return out

    def start_offset(self, consumer: Any, at: Any, low: int, high: int) -> int:
        """Where reading a partition began, for one nothing has been consumed from (its
        position is unknown then): its committed offset; else (a new group) the log start
        when it reads from the earliest, and when it reads from the latest the end its
        fetches have seen (``high``, the cached high watermark: what was there when it
        reset is skipped, not to be read; -1001 before the first fetch response). A
        reader started at the end of partitions nobody commits to would otherwise wait
        for their old records forever, and drop every sample."""
        key = (at.topic, at.partition)
        if key not in self.starts:
            from confluent_kafka import TopicPartition

            try:
                [tp] = consumer.committed([TopicPartition(*key)], timeout=5)
                self.starts[key] = tp.offset
            except Exception as exc:  # ask again on the next loop
                log.debug("committed offset of %s: %s", key, exc)
                return -1
        start = self.starts[key]
        if start >= 0:
            return start
        return high if self.auto_offset_reset == "latest" else max(low, 0)
