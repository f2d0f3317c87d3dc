"""Which of a group's coordinator records are stale (pure): live records against a replay.

At start a replica scans ``__consumer_offsets`` for membership
(:mod:`pipeline.read.membership_scan`) while the live stream already runs, so the same
record can arrive twice and an older one after a newer one. All records of a group share
one offsets partition, so offsets order them: a lower offset of the same record key is
older, and one below the group's deletion belongs to a group that is gone.
:class:`RecordOrder` remembers those offsets until the scan is over.
"""

from __future__ import annotations

from typing import Any

from pipeline.coordinator.records import (
    ConsumerGroupEpoch,
    ConsumerGroupTombstone,
    ConsumerMemberAssignment,
    ConsumerMemberMetadata,
    ConsumerPartitionMetadata,
    ConsumerTargetEpoch,
)
from schemas.offsets import GroupMetadata, GroupRemoved, OffsetCommit, OffsetDeleted

__all__ = ["RecordOrder"]


class RecordOrder:
    """The offset of the last applied record per record key, and of each group's deletion."""

    def __init__(self) -> None:
        self._applied: dict[tuple[str, ...], int] = {}
        self._gone: dict[str, int] = {}

    def stale(self, record: object, offset: int) -> bool:
        """Has a newer record of the same key (or the group's deletion) been applied?
        Remembers ``offset`` when it has not."""
        group = getattr(record, "group", None)
        if group is None or isinstance(record, OffsetCommit | OffsetDeleted):
            return False
        if offset < self._gone.get(group, -1):
            return True
        if isinstance(record, GroupRemoved) or (
            isinstance(record, ConsumerGroupTombstone) and record.kind == "group_epoch"
        ):
            self._gone[group] = offset
            for key in [k for k in self._applied if k[0] == group]:
                del self._applied[key]
            return False
        key = _record_key(record)
        if offset < self._applied.get(key, -1):
            return True
        self._applied[key] = offset
        return False

    def forget(self) -> None:
        """A start-up scan is over: no older record can come any more."""
        self._applied.clear()
        self._gone.clear()


_KINDS = {
    GroupMetadata: "group_metadata",
    ConsumerGroupEpoch: "group_epoch",
    ConsumerPartitionMetadata: "partition_metadata",
    ConsumerMemberMetadata: "member_metadata",
    ConsumerTargetEpoch: "target_epoch",
    ConsumerMemberAssignment: "member_assignment",
}


def _record_key(record: Any) -> tuple[str, ...]:
    """The record's key on ``__consumer_offsets`` as (group, kind[, member or regex])."""
    if isinstance(record, ConsumerGroupTombstone):
        return (record.group, record.kind, record.member_id or record.regex or "")
    kind = _KINDS.get(type(record), type(record).__name__)
    return (record.group, kind, getattr(record, "member_id", "") or getattr(record, "regex", ""))
