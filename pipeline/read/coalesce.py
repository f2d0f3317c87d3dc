"""Commits coalesced per topic (pure): the latest commit of every group-partition since the
last drain, and the latest progress report of each, as ``commits`` events (v2: columns).

The commits themselves are held by ``pipeline.read.commit_table.CommitTable`` (plain
commits taken as bytes, decoded at a drain); this adds the SDK workers' progress rows and
writes one ``commits`` event per topic: the group names once, then one column per field
(``group`` indexes ``groups``), which costs a fraction of a row per commit on both sides
of the topic. ``pipeline.read.commits`` (the source) drains it.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.read.commit_table import DELETED, CommitTable, GroupPartition, Record, commit_key
from schemas import OffsetCommit, OffsetDeleted
from schemas.topics import OWN_GROUP_PREFIX

__all__ = ["Coalescer", "commit_key", "commit_rows", "owns_topic"]


@dataclass
class Coalescer:
    """Latest commit per group-partition per topic since the last drain (pure)."""

    own_prefix: str = OWN_GROUP_PREFIX
    first_ms: int = 0  # when the oldest pending record was added
    pending: int = 0  # records read since the last drain (commits, deletions, progress rows)
    # the latest SDK worker progress row per (group, partition) per topic since the last drain
    progress: dict[str, dict[tuple[str, int], list[Any]]] = field(default_factory=dict)
    table: CommitTable = field(init=False)

    def __post_init__(self) -> None:
        self.table = CommitTable(self.own_prefix)

    @property
    def tracked(self) -> Any:
        """Names of the groups whose commits ``take_tracked`` hands on (group health's)."""
        return self.table.tracked

    @tracked.setter
    def tracked(self, groups: Any) -> None:
        self.table.tracked = groups

    @property
    def known(self) -> dict[GroupPartition, tuple[int, int]]:
        """The last commit of every live group-partition, as of the last drain."""
        return self.table.known()

    def _added(self, n: int, now_ms: int) -> None:
        if n:
            if not self.pending:
                self.first_ms = now_ms
            self.pending += n

    def take_many(self, msgs: Sequence[Any], start: int, now_ms: int) -> int:
        """``CommitTable.take_many``: the plain commits of ``msgs`` from ``start`` on; the
        index of the first message to decode the careful way."""
        before = self.table.taken
        i = self.table.take_many(msgs, start, now_ms)
        self._added(self.table.taken - before, now_ms)
        return i

    def take(self, key: Any, value: Any, now_ms: int) -> bool:
        """``take_many`` of one record given as its key and value."""
        return self.take_many([Record(key, value)], 0, now_ms) == 1

    def take_counts(self) -> tuple[int, int]:
        """(commits taken fast, own groups' commits dropped) since the last call."""
        return self.table.take_counts()

    def take_tracked(self) -> list[tuple[GroupPartition, int, int]]:
        """The fast path's commits of tracked groups since the last call, in read order."""
        return self.table.take_tracked()

    def resend_known(self, now_ms: int, share: float = 1.0) -> None:
        """Queue known commits again (all, or the next ``share``: ``CommitTable``). The
        model ignores what it already has, and learns what it missed: a new pipeline
        whose model joined after the first batches, or a state store restored from an
        old changelog."""
        self._added(self.table.resend_known(share), now_ms)

    def add(self, record: OffsetCommit | OffsetDeleted, now_ms: int) -> None:
        """A commit or a deletion decoded the careful way."""
        if isinstance(record, OffsetCommit):
            offset, ts = record.offset, record.commit_ts_ms
        else:
            offset, ts = DELETED, 0
        self.table.add(record.topic, record.group, record.partition, offset, ts)
        self._added(1, now_ms)

    def add_progress(self, report: Any, now_ms: int) -> int:
        """Queue the rows of one ``progress`` report (schemas/progress.v1.json); returns
        how many. A released partition is a row with processed offset -1, one handed to a
        pool a row with -2 (``pipeline.model.progress``). A malformed
        report raises ``AttributeError``, ``KeyError``, ``TypeError`` or ``ValueError``
        (the caller counts it; never fatal) and queues nothing."""
        if report.get("event") != "progress":
            raise ValueError("not a progress event")
        group, member, host = str(report["group"]), str(report["member"]), str(report["host"])
        sent, interval = int(report["sent_at_ms"]), int(report["interval_ms"])
        rows: list[tuple[str, list[Any]]] = [
            (
                str(p["topic"]),
                [group, int(p["partition"]), int(p["processed_offset"]), int(p["progress_ms"])],
            )
            for p in report["partitions"]
        ]
        held = [int(p.get("in_flight", 0)) for p in report["partitions"]]
        rows += [(str(t), [group, int(part), -1, 0]) for t, part in report.get("released", ())]
        rows += [(str(t), [group, int(part), -2, 0]) for t, part in report.get("handed_off", ())]
        held += [0] * (len(rows) - len(held))
        for (topic, row), in_flight in zip(rows, held, strict=True):
            row += [sent, interval, member, host, in_flight]
            per = self.progress.setdefault(topic, {})
            prev = per.get((group, row[1]))
            if prev is None or sent >= prev[4]:
                per[(group, row[1])] = row
        if rows:
            if not self.pending:
                self.first_ms = now_ms
            self.pending += len(rows)
        return len(rows)

    def drain(self) -> list[dict[str, Any]]:
        """One ``commits`` event (v2) per topic with anything pending; empties the buffer."""
        commits = self.table.drain()
        out = []
        for topic in commits.keys() | self.progress.keys():
            c = commits.get(topic)
            event: dict[str, Any] = {
                "event": "commits",
                "v": 2,
                "topic": topic,
                "groups": c.groups if c else [],
                "group": c.group if c else [],
                "partition": c.partition if c else [],
                "offset": c.offset if c else [],
                "commit_ts_ms": c.commit_ts_ms if c else [],
                "deleted": c.deleted if c else [],
            }
            progress = self.progress.get(topic)
            if progress:
                event["progress"] = list(progress.values())
            out.append(event)
        self.progress, self.pending = {}, 0
        return out


def commit_rows(event: dict[str, Any]) -> list[list[Any]]:
    """The commits of a ``commits`` event as ``[group, partition, offset, ts_ms]`` rows,
    either version (v1 carried rows; v2 columns)."""
    if event.get("v") == 1:
        return [list(r) for r in event.get("commits") or ()]
    groups = event["groups"]
    return [
        [groups[g], p, o, ts]
        for g, p, o, ts in zip(
            event["group"], event["partition"], event["offset"], event["commit_ts_ms"], strict=True
        )
    ]


def owns_topic(topic: str, partitions: int, owned: frozenset[int]) -> bool:
    """Whether the replica owning offsets partitions ``owned`` samples ``topic``."""
    return partitions > 0 and zlib.crc32(topic.encode()) % partitions in owned
