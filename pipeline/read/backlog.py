"""The commits reader's bound on what it holds, and how far behind it is (pure).

A replica fed more commits than it models must neither grow without bound nor go quiet.
Three queues can grow: the reader's prefetched ``__consumer_offsets`` records, the batches
its producer has not yet delivered to ``lagpilot.watermarks``, and the model's prefetched
batches. ``BufferBudget`` splits ``LAGPILOT_MAX_BUFFERED_BYTES`` between them as librdkafka
limits; the commits themselves are coalesced to the latest per group-partition
(``pipeline.read.commit_table``), so a backlog of one group-partition's commits costs one
entry. When the producer's queue passes its share the reader pauses its partitions
(``OutputGate``) and keeps polling, so its group membership and heartbeats go on while the
backlog waits on the broker, not in memory.

``behind_s`` is what the replica says about itself while it reads a backlog
(``lagpilot_input_behind_seconds``, ``lagpilot_input_backlog_records``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: the default bound on the bytes the pipeline's queues hold (``LAGPILOT_MAX_BUFFERED_BYTES``)
DEFAULT_MAX_BUFFERED_BYTES = 256 * 1024 * 1024
#: a replica this far behind (s) says so (``input_state`` events, ``lagpilot status``,
#: ``lagpilot doctor``): its lag figures are that old
BEHIND_S = 5.0
#: ...and says it caught up once below that for this long (ms): a reader at its limit
#: reads in bursts, and would otherwise say "behind" and "caught up" every few seconds
CAUGHT_UP_HOLD_MS = 10_000
#: its ``input_state`` goes out this often (ms), and at once when ``behind`` changes
INPUT_STATE_EVERY_MS = 5_000
#: below this many records left to read, the reader counts as caught up (one poll's worth)
CAUGHT_UP_RECORDS = 5000
#: one fetch response of the reader is at most this part of its prefetch share
FETCH_SHARE = 32
#: librdkafka's own floor for a consumer's prefetch queue (KiB)
MIN_QUEUE_KIB = 1024


@dataclass(frozen=True)
class BufferBudget:
    """``max_buffered_bytes`` split between the pipeline's queues: a quarter for the
    reader's prefetch, a quarter for the model's prefetch, half for the source's producer
    (the reader pauses at half of that, so the producer's own limit is never met: a full
    producer raises instead of waiting)."""

    max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES

    def _kib(self, share: float) -> int:
        return max(MIN_QUEUE_KIB, int(self.max_buffered_bytes * share) // 1024)

    def reader_consumer(self) -> dict[str, Any]:
        """librdkafka settings of the commits reader's consumer."""
        quarter = self.max_buffered_bytes // 4
        return {
            "queued.max.messages.kbytes": self._kib(0.25),
            # the queue's bound is checked before a fetch, and one response may pass it: a
            # response is compressed, and offset commits (similar keys, one layout)
            # decompress many times over, each record with librdkafka's own structures
            # beside it; small responses keep the overshoot a small part of the bound
            "fetch.max.bytes": max(1024 * 1024, quarter // FETCH_SHARE),
            "max.partition.fetch.bytes": max(64 * 1024, quarter // FETCH_SHARE // 8),
        }

    def model_consumer(self) -> dict[str, Any]:
        """librdkafka settings of the model's consumer (``lagpilot.watermarks``)."""
        return {"queued.max.messages.kbytes": self._kib(0.25)}

    def producer(self) -> dict[str, Any]:
        """librdkafka settings of the pipeline's producers."""
        return {"queue.buffering.max.kbytes": self._kib(0.5)}

    @property
    def pause_at_bytes(self) -> int:
        """The reader pauses once its producer holds this much undelivered."""
        return self.max_buffered_bytes // 4

    @property
    def resume_at_bytes(self) -> int:
        """...and resumes once it holds this little (hysteresis: no pause/resume flapping)."""
        return self.max_buffered_bytes // 8


@dataclass
class OutputGate:
    """Pause reading while the producer holds too much undelivered (pure).

    ``queued_bytes`` is an estimate: the producer counts messages, not bytes, so the
    gate multiplies its count by the mean size of the messages produced (``sent``)."""

    budget: BufferBudget = field(default_factory=BufferBudget)
    paused: bool = False
    mean_bytes: float = 0.0
    pauses: int = 0

    def sent(self, size_bytes: int) -> None:
        """A message of ``size_bytes`` was handed to the producer."""
        self.mean_bytes = (
            float(size_bytes) if not self.mean_bytes else 0.9 * self.mean_bytes + 0.1 * size_bytes
        )

    def queued_bytes(self, queued_messages: int) -> int:
        return int(queued_messages * self.mean_bytes)

    def update(self, queued_messages: int) -> bool:
        """Whether reading is paused, given the producer's undelivered message count."""
        held = self.queued_bytes(queued_messages)
        if not self.paused and held >= self.budget.pause_at_bytes:
            self.paused, self.pauses = True, self.pauses + 1
        elif self.paused and held <= self.budget.resume_at_bytes:
            self.paused = False
        return self.paused


def backlog_records(ends: dict[int, tuple[int, int]]) -> int:
    """Records left to read over the partitions in ``ends`` (partition -> (position, high
    watermark)); a partition with no known end (-1) counts none."""
    return sum(max(0, hi - at) for at, hi in ends.values() if hi >= 0 and at >= 0)


def behind_s(now_ms: int, last_record_ms: int, backlog: int) -> float:
    """How far behind the reader is: the age of the last record it read, while more than
    ``CAUGHT_UP_RECORDS`` wait; 0 when caught up or when nothing was read yet."""
    if backlog <= CAUGHT_UP_RECORDS or last_record_ms <= 0:
        return 0.0
    return max(0.0, (now_ms - last_record_ms) / 1000.0)


def still_behind(was: bool, behind: float, below_since_ms: int, now_ms: int) -> bool:
    """Whether the reader counts as behind: from ``BEHIND_S`` on, until it has been below
    that since ``below_since_ms`` for ``CAUGHT_UP_HOLD_MS``."""
    if behind >= BEHIND_S:
        return True
    return was and now_ms - below_since_ms < CAUGHT_UP_HOLD_MS


def input_state(
    replica: str,
    now_ms: int,
    behind: float,
    backlog: int,
    paused: bool,
    max_bytes: int,
    is_behind: bool | None = None,
) -> dict[str, Any]:
    """The ``input_state`` event (``schemas/input_state.v1.json``); ``is_behind`` as
    ``still_behind`` judged it (default: ``behind`` against ``BEHIND_S``)."""
    return {
        "event": "input_state",
        "v": 1,
        "replica": replica,
        "observed_at_ms": now_ms,
        "behind": behind >= BEHIND_S if is_behind is None else is_behind,
        "behind_s": round(behind, 3),
        "backlog_records": int(backlog),
        "paused": paused,
        "max_buffered_bytes": max_bytes,
    }
