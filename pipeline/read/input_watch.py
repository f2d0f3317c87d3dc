"""The commits reader's bound and its own state, around its consumer and producer.

``pipeline.read.backlog`` holds the rules (pure); this applies them to the reader's
consumer (pause, resume, positions against the fetches' ends) and producer (what it holds
undelivered), for ``pipeline.read.commits.CommitsLoop``: pause at the bound and keep
polling, and say how far behind it is (gauges, ``input_state`` events).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from pipeline.read.backlog import (
    BEHIND_S,
    INPUT_STATE_EVERY_MS,
    BufferBudget,
    OutputGate,
    backlog_records,
    behind_s,
    input_state,
    still_behind,
)
from pipeline.read.counters import GAUGE_PREFIX
from pipeline.read.positions import ReadPositions

if TYPE_CHECKING:
    from pipeline.read.commits import CommitsConfig

log = logging.getLogger(__name__)

#: the key of a replica's ``input_state`` (a topic name never holds "|": no topic's key)
INPUT_KEY_PREFIX = "input_state|"


class InputWatch:
    def __init__(
        self, cfg: CommitsConfig, consumer: Any, source: Any, positions: ReadPositions
    ) -> None:
        self.cfg, self.consumer, self.source, self.positions = cfg, consumer, source, positions
        self.gate = OutputGate(BufferBudget(cfg.max_buffered_bytes))
        self.last_record_ms = 0  # the broker's time of the last record read
        self.was_behind = False
        self.below_since_ms = 0  # since when behind_s is under BEHIND_S
        self.state_at_ms = 0  # the next input_state is due then (or when behind changes)

    def hold_back(self) -> None:
        """Pauses reading while the producer holds more undelivered than its share of
        ``max_buffered_bytes``, and resumes once it drained (``OutputGate``). The loop goes
        on polling while paused: the group keeps the reader, and the backlog waits on the
        broker instead of in memory."""
        was = self.gate.paused
        paused = self.gate.update(self.source.undelivered())
        if paused or was:
            parts = self.consumer.assignment()
            if parts:
                (self.consumer.pause if paused else self.consumer.resume)(parts)
        if paused:
            self.source.serve_deliveries(0.01)  # deliveries drain the queue
        if paused and not was:
            log.warning(
                "the commits reader pauses: %d bytes wait for delivery (bound %d, "
                "LAGPILOT_MAX_BUFFERED_BYTES); it resumes once they are delivered",
                self.gate.queued_bytes(self.source.undelivered()),
                self.cfg.max_buffered_bytes,
            )

    def backlog(self) -> int:
        """Records of the assigned offsets partitions not read yet (the fetches' cached ends)."""
        from confluent_kafka import TopicPartition

        ends = {}
        for partition, at in (self.positions.positions(self.consumer) or {}).items():
            tp = TopicPartition(self.cfg.offsets_topic, partition)
            ends[partition] = (at, self.consumer.get_watermark_offsets(tp, cached=True)[1])
        return backlog_records(ends)

    def state(self, now_ms: int, replica: str) -> tuple[dict[str, float], dict[str, Any] | None]:
        """The reader's gauges and counters, and its ``input_state`` event when one is due:
        every ``INPUT_STATE_EVERY_MS`` and at once when it falls behind or catches up;
        none before its first assignment (it reads nothing yet)."""
        try:
            backlog = self.backlog()
        except Exception as exc:  # the consumer is closing, or not assigned yet
            log.debug("input backlog: %s", exc)
            backlog = 0
        behind = behind_s(now_ms, self.last_record_ms, backlog)
        gauges = {
            GAUGE_PREFIX + "input_backlog_records": float(backlog),
            GAUGE_PREFIX + "input_behind_seconds": behind,
            GAUGE_PREFIX + "input_paused": float(self.gate.paused),
            "input_pauses": float(self.gate.pauses),
        }
        if self.positions.assigned is None:
            return gauges, None
        if behind >= BEHIND_S or not self.below_since_ms:
            self.below_since_ms = now_ms if behind < BEHIND_S else 0
        is_behind = still_behind(self.was_behind, behind, self.below_since_ms, now_ms)
        ev = input_state(replica, now_ms, behind, backlog, self.gate.paused,
                         self.cfg.max_buffered_bytes, is_behind)  # fmt: skip
        if ev["behind"] == self.was_behind and now_ms < self.state_at_ms:
            return gauges, None
        if ev["behind"] != self.was_behind:
            log.warning(
                "the commits reader is %s (%.1f s, %d records unread)",
                "behind" if ev["behind"] else "caught up again",
                behind,
                backlog,
            )
        self.was_behind = bool(ev["behind"])
        self.state_at_ms = now_ms + INPUT_STATE_EVERY_MS
        return gauges, ev
