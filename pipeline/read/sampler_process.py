"""The watermark sampler in a process of its own, beside the commits reader.

In a thread of the commits reader's process, the sampler would share one interpreter lock
with the decoding of every commit, and at tens of thousands of commits/s fall behind its
sampling grid. Here it has its own process and keeps its beat; the commits reader only
takes each tick's encoded samples (``SampledTicks.take``), holds them until every commit
written before the sample time is forwarded (``PendingSamples``: samples stay aligned with
the commits they follow) and produces them with its own producer, so a topic's samples
and commits reach the model in order under one key.

Replicas split the sampling the way they split ``__consumer_offsets``: the reader tells
the sampler which offsets partitions it owns (``own``), and a topic is sampled where
``crc32(topic) % N`` is owned.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections import deque
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from pipeline.read.coalesce import owns_topic
from pipeline.read.watermarks import ENDS_FIELD, HighWatermarkSource, Tick

log = logging.getLogger(__name__)

#: Ticks waiting in the pipe between the sampler and the reader: a reader that stops
#: taking them (stuck in a rebalance) must not grow the sampler's memory; the newest wait.
MAX_QUEUED_TICKS = 16


class SampledTicks:
    """The parent's handle on the sampler process: start, ownership, ticks, stop."""

    def __init__(self, sampler: HighWatermarkSource, offsets_partitions: int) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self._ctl: Any = ctx.Queue()
        self._out: Any = ctx.Queue(MAX_QUEUED_TICKS)
        self._proc = ctx.Process(
            target=_serve,
            args=(sampler, offsets_partitions, self._ctl, self._out),
            name="watermark-sampler",
            daemon=True,  # ends with the commits reader's process
        )

    def start(self) -> SampledTicks:
        self._proc.start()
        return self

    def own(self, partitions: frozenset[int]) -> None:
        """The offsets partitions this replica reads now: the sampler re-reads metadata and
        samples the topics they own."""
        self._ctl.put(("own", sorted(partitions)))

    def take(self) -> list[Tick]:
        """The ticks sampled since the last call (never blocks)."""
        out = []
        with contextlib.suppress(queue.Empty):
            while True:
                out.append(self._out.get_nowait())
        return out

    def stop(self, timeout_s: float = 5.0) -> None:
        with contextlib.suppress(Exception):
            self._ctl.put(None)
        self._proc.join(timeout_s)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(1)


def _serve(sampler: HighWatermarkSource, offsets_partitions: int, ctl: Any, out: Any) -> None:
    """The child: sample on the grid; ownership updates and the stop arrive on ``ctl``."""
    owned = [frozenset[int]()]
    sampler.owns_topic = lambda t: owns_topic(t, offsets_partitions, owned[0])

    def control() -> None:
        while True:
            msg = ctl.get()
            if msg is None:
                sampler.stop()
                return
            owned[0] = frozenset(msg[1])
            sampler.request_refresh()

    def emit(tick: Tick) -> None:
        try:
            out.put_nowait(tick)
        except queue.Full:  # the reader is not taking ticks: this one is lost, not queued
            sampler._stats.count_error("align", "reader_busy")

    threading.Thread(target=control, name="sampler-control", daemon=True).start()
    sampler.run_alone(emit)


def read_up_to(
    tick: Tick,
    read_through_ms: int,
    positions: Mapping[int, int] | None = None,
    others_through_ms: int | None = None,
    *,
    ends: Sequence[int] | None = None,
    unknown_waits: Collection[int] = (),
) -> bool:
    """Has the reader read every commit written before ``tick``'s samples (pure)?

    Exactly, where the tick carries the end of each offsets partition (``ENDS_FIELD``,
    asked in the samples' own round; ``ends`` stands in for them when given) and
    ``positions`` holds the reader's position on each offsets partition it is assigned:
    every position has reached its end (and the reader's other topics are read through the
    tick's time: ``others_through_ms``, None when it reads no other). A partition whose end
    is unknown (it did not answer) holds the tick while it is in ``unknown_waits`` (its
    ends have been missing only briefly: a later round's will stand in). Otherwise, and for
    a tick without ends, by the time the reader last found itself at the end of what its
    fetches had seen: ``read_through_ms``. That one can be early: a reader whose fetches
    pause (its queue full, behind a backlog) reaches the end of an old fetch response while
    newer commits wait in the broker, and a sample released then shows healthy groups as
    stopped."""
    ends = tick[2].get(ENDS_FIELD) if ends is None else ends
    if ends is None or positions is None:
        return tick[0] <= read_through_ms
    if not positions and tick[1]:
        # assigned no offsets partition (a rebalance took them all): nothing is read, so
        # no sample is read up to (every position "reached its end" would release them all)
        return False
    by_time = False
    for partition, at in positions.items():
        end = ends[partition] if 0 <= partition < len(ends) else -1
        if end < 0:
            if partition in unknown_waits:
                return False
            by_time = True
        elif at < end:
            return False
    if by_time and tick[0] > read_through_ms:
        return False
    return others_through_ms is None or tick[0] <= others_through_ms


def later_ends(ticks: Sequence[Tick]) -> list[list[int] | None]:
    """Each tick's ends, with an end that did not answer (-1) taken from the next later
    tick that has it (pure). Ends only grow, so a later round's end is at or past the
    tick's own: a reader that reached it has read every commit before the tick. None for a
    tick without ends."""
    out: list[list[int] | None] = [None] * len(ticks)
    later: list[int] = []
    for i in range(len(ticks) - 1, -1, -1):
        ends = ticks[i][2].get(ENDS_FIELD)
        if ends is None:
            continue
        if len(later) < len(ends):
            later += [-1] * (len(ends) - len(later))
        filled = [e if e >= 0 else later[p] for p, e in enumerate(ends)]
        out[i] = filled
        later[: len(filled)] = filled  # (a -1 in it was already -1 in later)
    return out


class PendingSamples:
    """Ticks held until the commits before them are forwarded (pure: times passed in).

    ``add`` a tick as it arrives; ``due(read_through_ms, now_s)`` gives the ticks whose
    sample time the reader has read through (to produce) and counts those that waited
    longer than ``timeout_s`` (dropped: a sample modelled against stale commits would show
    healthy groups as stopped). The reader reports ``dropped`` in its own counters: they
    reach the metrics even when no sample goes out at all."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._held: deque[tuple[float, Tick]] = deque()
        self.dropped = 0
        self._missing_since: dict[int, float] = {}  # partition -> first tick without its end

    def add(self, tick: Tick, now_s: float) -> None:
        self._held.append((now_s, tick))
        ends = tick[2].get(ENDS_FIELD)
        for partition, end in enumerate(ends or ()):
            if end < 0:
                self._missing_since.setdefault(partition, now_s)
            else:
                self._missing_since.pop(partition, None)

    @property
    def exact(self) -> bool:
        """Does every held tick carry the end of every offsets partition? Then ``due``
        decides them all by the reader's positions, without its read-through time."""
        for _, tick in self._held:
            ends = tick[2].get(ENDS_FIELD)
            if ends is None or min(ends, default=-1) < 0:
                return False
        return True

    @property
    def wanted_ms(self) -> int:
        """The latest sample time waiting (0: none): what the reader must read through."""
        return self._held[-1][1][0] if self._held else 0

    def due(
        self,
        read_through_ms: int,
        now_s: float,
        positions: Mapping[int, int] | None = None,
        others_through_ms: int | None = None,
    ) -> list[Tick]:
        """The ticks read through, in order (``read_up_to``); those that waited longer
        than ``timeout_s`` are dropped and counted."""
        ready = []
        filled = later_ends([tick for _, tick in self._held])
        # an end missing for less than the timeout waits for a later round's; one missing
        # longer (a broker that does not answer read_committed) goes by the time read through
        waits = {p for p, since in self._missing_since.items() if now_s - since <= self.timeout_s}
        for ends in filled:
            arrived, tick = self._held[0]
            if read_up_to(
                tick, read_through_ms, positions, others_through_ms, ends=ends, unknown_waits=waits
            ):
                ready.append(tick)
            elif now_s - arrived > self.timeout_s:
                self.dropped += 1
            else:
                break
            self._held.popleft()
        return ready
