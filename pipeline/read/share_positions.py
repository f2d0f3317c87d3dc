"""Share groups (KIP-932) as positions the lag model takes like commits.

A share group has no committed offset. Its consumers acquire records one by one and
acknowledge them in any order; the broker keeps, per share-partition, a start offset below
which every record is done, and the records past it that are done too. Kafka's own lag for
a share-partition (KIP-1226, answered by DescribeShareGroupOffsets v1+) counts the records
not yet done: high watermark - start offset - those done past it.

The model measures lag as high watermark - position. So a share-partition's position here
is ``high watermark - the broker's lag``: where the group would stand had it done its
records in order. It lies between the start offset and the high watermark; with the
producer stopped the model's lag is the broker's, exactly. Where the broker does not answer
a lag (an older broker), the position is the start offset.

The broker's lag and the high watermark are not read at one instant. The high watermark is
read just before the lags: the broker's own (when it computed the lag) can only be higher,
so a record produced in between makes the position look a little back, never ahead (read
after, a stalled group's position crept forward by what was produced during each read). A
position never goes back unless the start offset does (an offset reset of the group), so
those small shortfalls are no rewinds for the model; the next read makes them up.

A share group with members is re-sent every read (its consumers are there: "committing"),
whether its position moved or not, so a stuck one is STALL. One without members sends no
position until it moves again, and each of its share-partitions with records waiting is
*released* (``unconsumed``: the model's STOP at once, as for a partition an SDK worker gave
up, ``pipeline.model.progress``): the broker says no one consumes it, which a consumer
group's commits never say so plainly. A
group or partition missing from ``GONE_AFTER_READS`` reads in a row is sent as a deletion
(one read that missed a group, its coordinator moving, deletes nothing); one that went to
another replica is forgotten without one.

:class:`SharePositions` is the pure part; :class:`SharePoller` runs the reads on a thread
of the commits source's process (``pipeline.read.commits``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from schemas import OffsetCommit, OffsetDeleted

log = logging.getLogger(__name__)

Cell = tuple[str, str, int]  # group, topic, partition

#: how often to ask again when the broker serves no share groups (an older Kafka,
#: Redpanda, or share groups switched off): they may be switched on later
NOT_SERVED_EVERY_S = 60.0
#: the member a share group's release names (the model shows it as the partition's owner)
NO_MEMBER = "(no members)"
#: a share-partition missing from this many reads in a row is gone
GONE_AFTER_READS = 3


class PartitionState(Protocol):
    """One share-partition's state as the share-group reader gives it."""

    @property
    def group(self) -> str: ...
    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def start_offset(self) -> int: ...  # -1: not initialized yet
    @property
    def lag(self) -> int | None: ...  # None: the broker does not answer it


class GroupState(Protocol):
    """One share group's state as the share-group reader gives it."""

    @property
    def group(self) -> str: ...
    @property
    def members(self) -> int: ...
    @property
    def partitions(self) -> tuple[PartitionState, ...]: ...


def group_partition(group: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition that coordinates ``group``: Kafka places a group
    (of any type) on partition ``abs(hash) % partitions``, where hash is Java's
    ``String.hashCode`` of its id (31 * h + each UTF-16 code unit, in 32-bit two's
    complement) and ``abs`` of the smallest int is 0. Replicas split share groups by it as
    they split consumer groups (each reads the offsets partitions it owns)."""
    h = 0
    units = group.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    if h & 0x80000000:
        h -= 1 << 32
    return (0 if h == -(1 << 31) else abs(h)) % max(1, partitions)


@dataclass
class SharePositions:
    """Each share-partition's position, from one read of every share group to the next."""

    #: cell -> (position sent, start offset then)
    known: dict[Cell, tuple[int, int]] = field(default_factory=dict)
    #: cell -> reads in a row it was missing from
    missing: dict[Cell, int] = field(default_factory=dict)

    def update(
        self,
        groups: Iterable[GroupState],
        high_watermarks: Mapping[tuple[str, int], int],
        now_ms: int,
        owns: Callable[[str], bool] = lambda group: True,
    ) -> list[OffsetCommit | OffsetDeleted]:
        """What the model takes from this read of the share groups ``owns`` admits: a
        position per share-partition that moved or whose group has members, a deletion per
        one gone. Partitions with no start offset yet (no record delivered) are left out."""
        out: list[OffsetCommit | OffsetDeleted] = []
        seen: set[Cell] = set()
        for g in groups:
            for sp in g.partitions:
                if sp.start_offset < 0:
                    continue
                cell = (g.group, sp.topic, sp.partition)
                seen.add(cell)
                position = self._position(cell, sp, high_watermarks.get((sp.topic, sp.partition)))
                before = self.known.get(cell)
                self.known[cell] = (position, sp.start_offset)
                if before is None or before[0] != position or g.members > 0:
                    out.append(OffsetCommit(g.group, sp.topic, sp.partition, position, now_ms))
        for cell in seen:
            self.missing.pop(cell, None)
        for cell in [c for c in self.known if c not in seen]:
            if not owns(cell[0]):  # another replica's now: it sends what it finds
                del self.known[cell]
                self.missing.pop(cell, None)
                continue
            self.missing[cell] = self.missing.get(cell, 0) + 1
            if self.missing[cell] >= GONE_AFTER_READS:
                del self.known[cell], self.missing[cell]
                out.append(OffsetDeleted(*cell))
        return out

    def _position(self, cell: Cell, sp: PartitionState, hw: int | None) -> int:
        start = sp.start_offset
        if sp.lag is None or hw is None or hw < start:
            position = start
        else:
            position = min(max(hw - sp.lag, start), hw)
        before = self.known.get(cell)
        if before is not None and position < before[0] and start >= before[1]:
            return before[0]  # a lag read against a fresher high watermark: not a rewind
        return position


def unconsumed(groups: Iterable[GroupState]) -> dict[str, list[tuple[str, int]]]:
    """Per share group without members, its share-partitions with records waiting (the
    broker's lag above 0, or not answered): nobody consumes them."""
    out: dict[str, list[tuple[str, int]]] = {}
    for g in groups:
        if g.members > 0:
            continue
        waiting = [
            (sp.topic, sp.partition)
            for sp in g.partitions
            if sp.start_offset >= 0 and (sp.lag is None or sp.lag > 0)
        ]
        if waiting:
            out[g.group] = waiting
    return out


def release_report(
    group: str, cells: list[tuple[str, int]], now_ms: int, interval_ms: int
) -> dict[str, Any]:
    """A ``progress`` report (schemas/progress.v1.json) releasing ``cells`` of ``group``:
    how the commits source tells the model no member holds them."""
    return {
        "event": "progress",
        "v": 1,
        "group": group,
        # the released cells' last holder, where the model names one: no member, the broker
        "member": NO_MEMBER,
        "host": "broker",
        "sent_at_ms": now_ms,
        "interval_ms": interval_ms,
        "partitions": [],
        "released": [[t, p] for t, p in cells],
    }


@dataclass(frozen=True)
class ShareRead:
    """What one or more reads found since the last ``take``: the positions, the share
    groups, the partitions of empty groups with records waiting (the latest read's), and
    the failed reads."""

    records: list[OffsetCommit | OffsetDeleted]
    share_groups: frozenset[str]
    errors: int
    unconsumed: dict[str, list[tuple[str, int]]] = field(default_factory=dict)


class SharePoller:
    """Reads every share group this replica owns, every ``interval_s``, on a thread.

    ``owns(group)`` says whether this replica models a group (its offsets partition is
    assigned here). The reads' results wait in the poller until ``take``; a failed read is
    logged (once a minute) and counted, and the next one tries again."""

    def __init__(
        self,
        broker_config: Mapping[str, Any],
        interval_s: float,
        owns: Callable[[str], bool],
        *,
        reader: Any = None,
        high_watermarks: Callable[[list[tuple[str, int]]], dict[tuple[str, int], int]]
        | None = None,
    ) -> None:
        self.broker_config = dict(broker_config)
        self.interval_s = interval_s
        self.owns = owns
        self._reader = reader
        self._hwms = high_watermarks
        self.positions = SharePositions()
        self._lock = threading.Lock()
        self._records: list[OffsetCommit | OffsetDeleted] = []
        self._groups: set[str] = set()
        self._unconsumed: dict[str, list[tuple[str, int]]] = {}
        self._errors = 0
        self._cells: list[tuple[str, int]] = []  # the share-partitions the last read found
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._logged_s = -60.0

    def start(self) -> SharePoller:
        self._thread = threading.Thread(target=self._run, name="share-groups", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._reader is not None:
            self._reader.close()

    def take(self) -> ShareRead | None:
        """The records and share groups found since the last call (None: nothing new)."""
        with self._lock:
            if not self._records and not self._errors and not self._unconsumed:
                return None
            got = ShareRead(self._records, frozenset(self._groups), self._errors, self._unconsumed)
            self._records, self._errors, self._unconsumed = [], 0, {}
            return got

    def read_once(self) -> bool:
        """One read of every owned share group; False when the broker serves none."""
        reader = self._reader
        if reader is None:
            from pipeline.read.share_groups import ShareGroupsReader

            reader = self._reader = ShareGroupsReader(self.broker_config)
        hwms_of = self._hwms or self._admin_hwms
        # the high watermarks first (of the cells the last read found): see the docstring
        hwms = hwms_of(self._cells) if self._cells else {}
        groups = [g for g in reader.read() if self.owns(g.group)]
        cells = sorted({(sp.topic, sp.partition) for g in groups for sp in g.partitions})
        new = [c for c in cells if c not in hwms]
        if new:  # first seen: read after, once
            hwms.update(hwms_of(new))
        self._cells = cells
        records = self.positions.update(groups, hwms, int(time.time() * 1000), self.owns)
        with self._lock:
            self._records.extend(records)
            self._groups.update(g.group for g in groups)
            self._unconsumed = unconsumed(groups)
        return bool(getattr(reader, "served", True))

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            every = self.interval_s
            try:
                if not self.read_once():
                    every = max(every, NOT_SERVED_EVERY_S)
            except Exception as exc:  # the broker went, a coordinator moved: read again
                with self._lock:
                    self._errors += 1
                if time.monotonic() >= self._logged_s + 60:
                    self._logged_s = time.monotonic()
                    log.warning("reading the share groups failed (tried again): %s", exc)
            self._stop.wait(max(0.0, every - (time.monotonic() - started)))

    _admin: Any = None

    def _admin_hwms(self, cells: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The high watermark of each share-partition (read just before the lags)."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import AdminClient, OffsetSpec

        from runtime.cli import CLIENT_LOG

        if self._admin is None:
            self._admin = AdminClient({**self.broker_config, "logger": CLIENT_LOG})
        asked = {TopicPartition(t, p): OffsetSpec.latest() for t, p in cells}
        out = {}
        for tp, fut in self._admin.list_offsets(asked, request_timeout=5).items():
            try:
                out[tp.topic, tp.partition] = int(fut.result().offset)
            except Exception as exc:  # a partition without a leader now: no position
                log.debug("high watermark of %s[%d]: %s", tp.topic, tp.partition, exc)
        return out
