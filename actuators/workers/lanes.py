"""Lanes: per-partition parallelism that keeps per-key order, run off the poll loop.

A partition's messages are routed to ``lanes`` serial queues (a key's messages to one lane
while any of them is pending; a new key to its ``lane_for(key)`` lane, or the least busy one
when that is taken); each lane runs one message at a time on a shared thread pool, so
messages with the same key are processed in offset order while different keys of one hot
partition run side by side. The poll loop never runs a handler: it only routes messages
here, so heartbeats and polls go on while a 500-page PDF is being read.

Changing a partition's lane count (``spread_partition``/``restore_partition``) re-routes
keys, so it waits at a barrier: new work of that partition is held until its running
messages finish, then every queued message is re-routed in offset order. No key ever has two
messages running at once, before, during or after the change.

A lane takes its queued messages in batches (``LANE_BATCH``) under the lanes' one lock and
marks each finished one in its partition's ``done`` log without it; the next holder of the
lock records them. The lock, shared by the poll loop and every lane, is then taken once per
batch rather than once per message, and what it guards (the commit position, the buffered
counts, the key routing) is as current for its readers as before.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from actuators.workers.threads import LaneThreads, LoopLanes
from actuators.workers.tracker import OffsetTracker

log = logging.getLogger(__name__)

TopicPart = tuple[str, int]


def lane_for(key: bytes | None, offset: int, lanes: int) -> int:
    """The lane of a message: stable across processes (BLAKE2b, not Python's salted ``hash``).

    Not ``crc32(key)``: librdkafka's default partitioner is ``crc32(key) % partitions``, so
    with 8 partitions and 16 lanes the keys of one partition would all share crc32's low 3
    bits and land on 2 of the 16 lanes. Keyless messages promise no order between them, so
    they spread by offset.
    """
    if lanes <= 1:
        return 0
    return _spread(key, offset) % lanes


#: keys whose spread is known: a topic's keys repeat, and hashing one costs more than the
#: rest of its intake; cleared when full, so many distinct keys cannot grow it without bound
_SPREADS: dict[bytes, int] = {}
_SPREADS_MAX = 65_536


def _spread(key: bytes | None, offset: int) -> int:
    """What ``lane_for`` takes modulo the lane count (computed before the lanes' lock)."""
    if key is None:
        return offset
    spread = _SPREADS.get(key)
    if spread is None:
        if len(_SPREADS) >= _SPREADS_MAX:
            _SPREADS.clear()
        digest = hashlib.blake2b(key, digest_size=4).digest()
        spread = _SPREADS[key] = int.from_bytes(digest, "big")
    return spread


#: how long a thread runs one lane's messages while other lanes wait for a thread: then the
#: lane queues behind them. Long enough that a hand-off (the main per-message cost) comes
#: once per many short messages, short enough that no partition waits long for its turn
TURN_S = 0.05

#: messages a lane takes from its queue per hold of the lanes' lock. It runs them one after
#: another and appends each finished one to its partition's ``done`` log without the lock;
#: whoever takes the lock next records them. So the lock that the poll loop and every lane
#: share is taken once per batch, not once per message: each contended take of it is a
#: thread switch and a wait for the interpreter lock.
LANE_BATCH = 32

#: messages queued per hold of the lanes' lock: the lanes finishing messages meanwhile wait
#: for it, so a whole 500-message batch under one hold stalled them all at once
INTAKE_CHUNK = 64


@dataclass
class _Part:
    lanes: int
    tracker: OffsetTracker = field(default_factory=OffsetTracker)
    queues: list[deque[Any]] = field(default_factory=list)
    running: dict[int, int] = field(default_factory=dict)  # lane -> first offset it holds
    taken: int = 0  # messages the lanes took from the queues, not yet recorded finished
    # messages that ran, appended by their lane without the lock (a deque's append and
    # popleft are atomic); recorded in the tracker by ``LaneExecutor._record``
    done: deque[Any] = field(default_factory=deque)
    target_lanes: int | None = None  # a lane change waiting for the running work to finish
    closing: bool = False  # being revoked or handed off: accept nothing, start nothing
    # epoch ms when the processed prefix last advanced, or work arrived while none was held
    advanced_ms: int = 0
    # key -> [lane, messages of that key queued or running]: a key's pending messages stay
    # on one lane (its order); a key with none pending may take any lane
    keys: dict[bytes, list[int]] = field(default_factory=dict)

    def queued(self) -> int:
        return sum(len(q) for q in self.queues)

    def load(self, lane: int) -> int:
        return len(self.queues[lane]) + (lane in self.running)

    def route(self, message: Any, spread: int | None = None) -> int:
        """The lane of a message: its key's lane while that key has work pending, else its
        ``lane_for`` lane if that is idle, else the least busy lane. Two distinct keys then
        never wait behind each other while a lane is free (with hashing alone, two keys can
        share a lane and the second waits out the first)."""
        if self.lanes == 1:
            return 0  # nothing to choose (and no key to track: a relane re-routes the queue)
        key = message.key()
        held = self.keys.get(key) if key is not None else None
        if held is not None:
            held[1] += 1
            return held[0]
        if spread is None:
            spread = _spread(key, message.offset())
        lane = spread % self.lanes
        if self.load(lane):
            lane = min(range(self.lanes), key=lambda n: (self.load(n), n != lane))
        if key is not None:
            self.keys[key] = [lane, 1]
        return lane

    def finished(self, message: Any) -> None:
        """A routed message ran (or was dropped): its key may move lanes once none is left."""
        key = message.key()
        held = self.keys.get(key) if key is not None else None
        if held is not None:
            held[1] -= 1
            if held[1] <= 0:
                del self.keys[key]


class LaneExecutor:
    """Routes polled messages to lanes and runs them on a thread pool.

    ``process(message)`` must not raise (the worker wraps the handler with retries and
    failure accounting); if it does, the message still counts as finished so a partition
    cannot wedge, and the error is logged. ``asynchronous``: ``process`` is a coroutine
    function, and the lanes are tasks on one event loop thread (``LoopLanes``), not threads.
    """

    def __init__(
        self,
        process: Callable[[Any], Any],
        *,
        max_workers: int,
        default_lanes: int,
        name: str = "lagpilot-lane",
        asynchronous: bool = False,
    ) -> None:
        self._process = process
        self._default_lanes = default_lanes
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._parts: dict[TopicPart, _Part] = {}
        self._lane_overrides: dict[TopicPart, int] = {}
        self._halted = False
        self._pool: LaneThreads | LoopLanes = (
            LoopLanes(max_workers, name) if asynchronous else LaneThreads(max_workers, name)
        )
        self._lane: Callable[..., Any] = self._run_async if asynchronous else self._run

    # -- intake (poll thread) -------------------------------------------------------------

    def submit(self, message: Any) -> bool:
        """Queue a polled message on its lane; False if its partition is closing (dropped)."""
        return self.submit_many((message,)) == 0

    def submit_many(self, messages: Iterable[Any]) -> int:
        """Queue a polled batch, in order; returns how many were dropped (closing partitions,
        old fetches, repeats). The poll loop hands over every message of a worker: what needs
        no lock (the accessors, the key's hash) is done before taking it, and the lock is
        taken once per ``INTAKE_CHUNK`` messages, not once per message nor per batch."""
        items = [
            ((m.topic(), m.partition()), m.offset(), _spread(m.key(), m.offset()), m)
            for m in messages
        ]
        dropped = 0
        now_ms = int(time.time() * 1000)
        for start in range(0, len(items), INTAKE_CHUNK):
            with self._lock:
                for tp, offset, spread, message in items[start : start + INTAKE_CHUNK]:
                    part = self._parts.get(tp)
                    if part is None:
                        part = self._new_part(tp)
                    if part.closing:
                        dropped += 1
                        continue
                    self._record(part)
                    tracker = part.tracker
                    pos = tracker.position
                    if pos is not None and offset < pos:
                        dropped += 1  # an old fetch after a seek: done, or redelivered later
                        continue
                    idle = tracker.in_flight == 0
                    try:
                        tracker.delivered(offset)
                    except ValueError:
                        dropped += 1  # a repeat of an offset already queued: never run twice
                        continue
                    if idle:
                        # work arrived at an idle partition: "no progress" counts from now, not
                        # from the last message hours ago (the progress reports' clock)
                        part.advanced_ms = now_ms
                    lane = part.route(message, spread)
                    part.queues[lane].append(message)
                    if lane not in part.running:
                        self._kick(tp, part, lane)
        return dropped

    def _new_part(self, tp: TopicPart) -> _Part:
        """A partition's first message (hold the lock)."""
        lanes = self._lane_overrides.get(tp, self._default_lanes)
        part = _Part(lanes=lanes)
        part.queues = [deque() for _ in range(lanes)]
        self._parts[tp] = part
        return part

    # -- lane changes, halt ----------------------------------------------------------------

    def set_lanes(self, tp: TopicPart, lanes: int) -> None:
        """Use ``lanes`` lanes for ``tp`` from now on (at the barrier described above)."""
        lanes = max(1, lanes)
        with self._lock:
            self._lane_overrides[tp] = lanes
            part = self._parts.get(tp)
            if part is None or part.lanes == lanes:
                if part is not None:
                    part.target_lanes = None
                return
            part.target_lanes = lanes
            if not part.running:
                self._relane(tp, part)

    def lanes(self, tp: TopicPart) -> int:
        with self._lock:
            part = self._parts.get(tp)
            if part is not None:
                return part.target_lanes or part.lanes
            return self._lane_overrides.get(tp, self._default_lanes)

    def halt(self) -> None:
        """Start nothing new; running messages finish. Polling (and heartbeats) go on."""
        with self._lock:
            self._halted = True

    def resume(self) -> None:
        with self._lock:
            self._halted = False
            for tp, part in self._parts.items():
                for lane in range(part.lanes):
                    self._kick(tp, part, lane)

    @property
    def halted(self) -> bool:
        return self._halted

    # -- state for the poll loop -------------------------------------------------------------

    def buffered(self) -> dict[TopicPart, int]:
        """Queued plus running messages per partition (what backpressure pauses on)."""
        with self._lock:
            for part in self._parts.values():
                self._record(part)
            return {tp: p.queued() + p.taken for tp, p in self._parts.items()}

    def positions(self) -> dict[TopicPart, int]:
        """Commit positions (contiguous processed prefix) of the partitions not closing."""
        with self._lock:
            for part in self._parts.values():
                self._record(part)
            return {
                tp: part.tracker.position
                for tp, part in self._parts.items()
                if not part.closing and part.tracker.position is not None
            }

    def progress(self) -> dict[TopicPart, tuple[int, int, int, int]]:
        """Per partition not closing: (processed prefix, when it last advanced in epoch
        ms, messages in flight, messages running), for the worker's progress reports."""
        with self._lock:
            for part in self._parts.values():
                self._record(part)
            return {
                tp: (pos, part.advanced_ms, part.queued() + part.taken, len(part.running))
                for tp, part in self._parts.items()
                if not part.closing and (pos := part.tracker.position) is not None
            }

    def position(self, tp: TopicPart) -> int | None:
        with self._lock:
            part = self._parts.get(tp)
            if part is None:
                return None
            self._record(part)
            return part.tracker.position

    # -- closing partitions (revoke, hand-off, shutdown) ---------------------------------------

    def begin_close(self, tp: TopicPart) -> None:
        """Abandon ``tp``'s queued messages (they will be redelivered) and accept no more.

        Running messages go on; ``finish_close`` tells when they are done. Every offset from
        the first abandoned one up is forgotten, so the commit position stays below all of
        them even if a later offset on another lane finishes first.
        """
        with self._lock:
            part = self._parts.get(tp)
            if part is None:
                return
            self._record(part)
            part.closing = True
            part.target_lanes = None
            queued = [m.offset() for q in part.queues for m in q]
            for q in part.queues:
                for m in q:
                    part.finished(m)
                q.clear()
            if queued:
                part.tracker.forget_after(min(queued))

    def running(self, tp: TopicPart) -> int:
        with self._lock:
            part = self._parts.get(tp)
            return 0 if part is None else len(part.running)

    def finish_close(self, tp: TopicPart) -> int | None:
        """Forget ``tp``; return the position safe to commit (None if nothing was delivered).

        Work still running is abandoned: its offsets stay above the returned position, so it
        is redelivered (and the dedupe store keeps its side effect from repeating).
        """
        with self._lock:
            part = self._parts.pop(tp, None)
            self._lane_overrides.pop(tp, None)
            self._changed.notify_all()
            if part is None:
                return None
            self._record(part)
            if part.running:
                part.tracker.forget_after(min(part.running.values()))
            return part.tracker.position

    def close(self, tps: Iterable[TopicPart], timeout_s: float) -> dict[TopicPart, int | None]:
        """Close partitions, waiting up to ``timeout_s`` for their running messages."""
        tps = list(tps)
        for tp in tps:
            self.begin_close(tp)
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while any(self._parts[tp].running for tp in tps if tp in self._parts):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
        return {tp: self.finish_close(tp) for tp in tps}

    def shutdown(self) -> None:
        self._pool.shutdown()

    # -- internals (hold the lock) ------------------------------------------------------------

    def _kick(self, tp: TopicPart, part: _Part, lane: int) -> None:
        if lane in part.running:
            return
        batch = self._take(part, lane)
        if batch:
            self._pool.submit(self._lane, tp, part, lane, batch)

    def _take(self, part: _Part, lane: int) -> list[Any]:
        """The lane's next messages (up to ``LANE_BATCH``) if it may run them now, else []:
        the lane is then free for ``_kick``. Running a lane's queue on one thread saves a
        thread-pool hand-off per message; while other lanes wait for a thread,
        ``_finished`` queues it behind them instead."""
        if self._halted or part.closing or part.target_lanes is not None:
            return []
        queue = part.queues[lane]
        if not queue:
            return []
        batch = [queue.popleft() for _ in range(min(len(queue), LANE_BATCH))]
        part.running[lane] = batch[0].offset()
        part.taken += len(batch)
        return batch

    def _record(self, part: _Part) -> None:
        """Record the messages the lanes finished since the last call: their keys may move
        lanes, the processed prefix advances. Every reader of the tracker or of ``taken``
        calls this first, so what it reads is as current as if each lane took the lock."""
        done = part.done
        if not done:
            return
        tracker = part.tracker
        before = tracker.position
        while done:
            message = done.popleft()
            part.finished(message)
            tracker.done(message.offset())
            part.taken -= 1
        if tracker.position != before:
            part.advanced_ms = int(time.time() * 1000)

    def _relane(self, tp: TopicPart, part: _Part) -> None:
        lanes = part.target_lanes or part.lanes
        waiting = sorted((m for q in part.queues for m in q), key=lambda m: m.offset())
        part.lanes, part.target_lanes = lanes, None
        part.queues = [deque() for _ in range(lanes)]
        part.keys = {}  # nothing runs at a relane: the waiting messages are all there is
        for m in waiting:
            part.queues[part.route(m)].append(m)
        for lane in range(lanes):
            self._kick(tp, part, lane)

    def _yields(self, part: _Part, since: float) -> bool:
        """A lane stops between two messages of its batch on a halt, a lane change or a
        close (read without the lock: a message that started before any of them finishes),
        and when its turn (``TURN_S``) is over while other lanes wait for a thread."""
        return (
            self._halted
            or part.closing
            or part.target_lanes is not None
            or (time.monotonic() - since >= TURN_S and self._pool.pending() > 0)
        )

    def _run(self, tp: TopicPart, part: _Part, lane: int, batch: list[Any]) -> None:
        process, since, done = self._process, time.monotonic(), part.done
        while batch:
            ran = 0
            for message in batch:
                if ran and self._yields(part, since):
                    break
                try:
                    process(message)
                except BaseException:
                    log.exception(
                        "message processing raised at %s[%d]@%d", tp[0], tp[1], message.offset()
                    )
                done.append(message)
                ran += 1
            batch = self._finished(tp, part, lane, batch, ran, time.monotonic() - since)

    async def _run_async(self, tp: TopicPart, part: _Part, lane: int, batch: list[Any]) -> None:
        """``_run`` for a coroutine ``process``, as a task of the lanes' event loop."""
        process, since, done = self._process, time.monotonic(), part.done
        while batch:
            ran = 0
            for message in batch:
                if ran and self._yields(part, since):
                    break
                try:
                    await process(message)
                except Exception:
                    log.exception(
                        "message processing raised at %s[%d]@%d", tp[0], tp[1], message.offset()
                    )
                done.append(message)
                ran += 1
            batch = self._finished(tp, part, lane, batch, ran, time.monotonic() - since)

    def _finished(
        self, tp: TopicPart, part: _Part, lane: int, batch: list[Any], ran: int, turn_s: float
    ) -> list[Any]:
        """The first ``ran`` messages of ``batch`` ran on ``lane`` (and are in ``done``):
        record them; the rest go back to the front of the lane's queue (a halt, a lane
        change, or the turn is over), or are forgotten when the partition closes
        (redelivered to its next owner). Returns the lane's next batch if this thread (or
        task) runs it now, else []. ``turn_s``: how long this thread has run the lane; past
        ``TURN_S``, while other lanes wait for a thread, the lane queues behind them instead
        (round robin)."""
        with self._lock:
            if self._parts.get(tp) is not part:
                return []  # the partition was revoked or handed off meanwhile
            part.running.pop(lane, None)
            self._record(part)
            rest = batch[ran:]
            part.taken -= len(rest)
            if rest and part.closing:
                for message in rest:
                    part.finished(message)
                # never run: redelivered to the next owner, not skipped
                part.tracker.forget_after(rest[0].offset())
            elif rest:
                part.queues[lane].extendleft(reversed(rest))  # in order, ahead of newer ones
            nxt: list[Any] = []
            if part.target_lanes is not None and not part.running:
                self._relane(tp, part)
            else:
                nxt = self._take(part, lane)
                if nxt and turn_s >= TURN_S and self._pool.pending():
                    # fewer threads than busy lanes: a partition that always has work must
                    # not keep a thread while the others' work waits
                    self._pool.submit(self._lane, tp, part, lane, nxt)
                    nxt = []
            if part.closing:  # close() waits for the running messages of closing ones
                self._changed.notify_all()
            return nxt
