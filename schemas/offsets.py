"""What the ``__consumer_offsets`` decoder yields, and what the pipeline forwards."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    """A consumer group's committed position on one partition (record types 0/1)."""

    group: str
    topic: str
    partition: int
    offset: int
    commit_ts_ms: int
    leader_epoch: int = -1
    metadata: str = ""
    expire_ts_ms: int | None = None
    event: str = field(default="commit", init=False)
    v: int = field(default=1, init=False)


@dataclass(frozen=True, slots=True)
class OffsetDeleted:
    """Tombstone of an offset key: the offset was deleted, expired, or its group removed."""

    group: str
    topic: str
    partition: int
    event: str = field(default="offset_deleted", init=False)
    v: int = field(default=1, init=False)


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    topic: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class GroupMember:
    member_id: str
    client_id: str
    client_host: str
    group_instance_id: str | None = None
    rebalance_timeout_ms: int = -1
    session_timeout_ms: int = -1
    assignment: tuple[TopicAssignment, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    """A classic group's state after a rebalance (record type 2)."""

    group: str
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_ts_ms: int
    members: tuple[GroupMember, ...] = ()
    event: str = field(default="group_metadata", init=False)
    v: int = field(default=1, init=False)


@dataclass(frozen=True, slots=True)
class GroupRemoved:
    """Tombstone of a group key: the group was deleted or expired; forget its state."""

    group: str
    event: str = field(default="group_removed", init=False)
    v: int = field(default=1, init=False)


CoordinatorRecord = OffsetCommit | OffsetDeleted | GroupMetadata | GroupRemoved
