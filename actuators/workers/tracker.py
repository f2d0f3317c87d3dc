"""Which offset of a partition is safe to commit: the contiguous prefix of processed offsets.

Lanes finish messages out of order (offset 12 on lane B before offset 10 on lane A). Kafka
stores one position per partition, so committing 13 after 12 finished would skip 10 if the
worker died now. The tracker only ever offers the offset after the longest run of finished
messages, so a crash redelivers unfinished work and never skips it.

Offsets are tracked as delivered, not assumed to be consecutive: compaction and transaction
markers leave gaps, and a gap is not a missing message.
"""

from __future__ import annotations

from collections import OrderedDict


class OffsetTracker:
    """Delivered-but-unfinished offsets of one partition, and the commit position they allow.

    Pure and single-threaded: callers hold their own lock.
    """

    __slots__ = ("_pending", "_position", "_unfinished")

    def __init__(self) -> None:
        # offset -> finished?, in delivery (= offset) order
        self._pending: OrderedDict[int, bool] = OrderedDict()
        self._position: int | None = None  # next offset to commit: first unfinished or last+1
        # how many of _pending are unfinished: kept as a count, because the lanes ask on every
        # delivery and counting thousands of pending offsets each time starved the poll loop
        self._unfinished = 0

    def delivered(self, offset: int) -> None:
        """Record that ``offset`` was handed to a lane. Offsets must arrive in ascending order."""
        if self._pending:
            last = next(reversed(self._pending))
            if offset <= last:
                raise ValueError(f"offset {offset} delivered after {last}: offsets must ascend")
        elif self._position is not None and offset < self._position:
            raise ValueError(f"offset {offset} delivered below the done position {self._position}")
        self._pending[offset] = False
        self._unfinished += 1
        if self._position is None:
            self._position = offset

    def done(self, offset: int) -> None:
        """Record that ``offset`` was processed; advance the position over the finished prefix."""
        if self._pending.get(offset, True):
            return  # finished after a reset (a revoke or a hand-off), or twice: nothing to do
        self._pending[offset] = True
        self._unfinished -= 1
        while self._pending:
            first, finished = next(iter(self._pending.items()))
            if not finished:
                self._position = first
                return
            self._pending.popitem(last=False)
            self._position = first + 1

    def forget_after(self, offset: int) -> None:
        """Drop delivered offsets >= ``offset`` (queued work abandoned; it will be redelivered)."""
        for o in [o for o in self._pending if o >= offset]:
            if not self._pending.pop(o):
                self._unfinished -= 1

    @property
    def position(self) -> int | None:
        """The offset a commit would store (next to process), or None before any delivery."""
        return self._position

    @property
    def in_flight(self) -> int:
        """Delivered offsets not yet finished (queued or running)."""
        return self._unfinished
