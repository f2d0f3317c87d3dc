"""Decode the KIP-848 consumer-group records of ``__consumer_offsets`` (types 3..8 and 16).

Groups whose clients use ``group.protocol=consumer`` (Kafka 4's default group protocol on
the broker side) write their membership as these records instead of one type-2
``GroupMetadata``; their offset commits stay type 1. The layouts, as Apache Kafka's group
coordinator writes them (checked against the upstream schemas by
``tests/conformance/test_consumer_group_records.py``):

====  =============================  ==================  ==========================================
type  record                         key after the type  value v0 (flexible: compact strings and
                                                         arrays, tagged fields after each struct)
====  =============================  ==================  ==========================================
3     group metadata                 group               epoch int32
4     partition metadata             group               topics [topic_id uuid, name, partitions
                                                         int32, [partition int32, racks
                                                         [string]]] (deprecated in Kafka 4.1:
                                                         only its tombstone is still written)
5     member metadata                group, member_id    instance_id?, rack_id?, client_id,
                                                         client_host, subscribed_topics [string],
                                                         subscribed_regex?, rebalance_timeout_ms
                                                         int32, server_assignor?
6     target assignment metadata     group               assignment_epoch int32
7     target assignment member       group, member_id    [topic_id uuid, partitions [int32]]
8     current member assignment      group, member_id    member_epoch int32, previous_member_epoch
                                                         int32, state int8, assigned [topic_id
                                                         uuid, partitions [int32]],
                                                         pending_revocation (same)
16    regular expression             group, regex        topics [string], version int64,
                                                         timestamp_ms int64
====  =============================  ==================  ==========================================

Keys are not flexible (int16-length strings). ``?`` marks a nullable string. Only value
version 0 exists; a newer version is counted and skipped. Fields newer brokers add as
tagged fields (the group's metadata hash in 4.1, assignment epochs per partition) are
skipped. A null value is a tombstone: the coordinator writes one for a member that left
(types 5, 7, 8) and for every record of a deleted group (types 3..8, 16).

Assignments name topics by id (Kafka's URL-safe base64 form of the UUID, as Kafka's
own tools print it), not by name: the group-health model resolves them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pipeline.coordinator.wire import Reader

__all__ = [
    "CONSUMER_GROUP_RECORD_TYPES",
    "ConsumerGroupEpoch",
    "ConsumerGroupRecord",
    "ConsumerGroupRegex",
    "ConsumerGroupTombstone",
    "ConsumerMemberAssignment",
    "ConsumerMemberMetadata",
    "ConsumerPartitionMetadata",
    "ConsumerTargetAssignment",
    "ConsumerTargetEpoch",
    "TopicIdPartitions",
    "decode_consumer_group_record",
]

RecordKind = Literal[
    "group_epoch",
    "partition_metadata",
    "member_metadata",
    "target_epoch",
    "target_member",
    "member_assignment",
    "regex",
]

#: record type -> (kind, whether the key carries a second string after the group)
KINDS: dict[int, tuple[RecordKind, str | None]] = {
    3: ("group_epoch", None),
    4: ("partition_metadata", None),
    5: ("member_metadata", "member_id"),
    6: ("target_epoch", None),
    7: ("target_member", "member_id"),
    8: ("member_assignment", "member_id"),
    16: ("regex", "regex"),
}
CONSUMER_GROUP_RECORD_TYPES = frozenset(KINDS)

#: The wire layouts the readers below follow, stated once: record type -> (key fields after
#: the group, value fields in order, each ``name:type``; ``?`` nullable, ``[]`` an array,
#: ``{...}`` a struct's fields). Tagged fields are not listed: they are skipped.
#: ``tests/conformance/test_consumer_group_records.py`` checks these against Apache Kafka's
#: schemas.
LAYOUTS: dict[int, tuple[tuple[str, ...], tuple[str, ...]]] = {
    3: ((), ("epoch:int32",)),
    4: (
        (),
        (
            "topics:[]{topic_id:uuid,topic_name:string,num_partitions:int32,"
            "partition_metadata:[]{partition:int32,racks:[]string}}",
        ),
    ),
    5: (
        ("member_id:string",),
        (
            "instance_id:string?",
            "rack_id:string?",
            "client_id:string",
            "client_host:string",
            "subscribed_topic_names:[]string",
            "subscribed_topic_regex:string?",
            "rebalance_timeout_ms:int32",
            "server_assignor:string?",
        ),
    ),
    6: ((), ("assignment_epoch:int32",)),
    7: (("member_id:string",), ("topic_partitions:[]{topic_id:uuid,partitions:[]int32}",)),
    8: (
        ("member_id:string",),
        (
            "member_epoch:int32",
            "previous_member_epoch:int32",
            "state:int8",
            "assigned_partitions:[]{topic_id:uuid,partitions:[]int32}",
            "partitions_pending_revocation:[]{topic_id:uuid,partitions:[]int32}",
        ),
    ),
    16: (("regular_expression:string",), ("topics:[]string", "version:int64", "timestamp:int64")),
}
VALUE_VERSIONS = range(1)  # v0 only, flexible


@dataclass(frozen=True, slots=True)
class TopicIdPartitions:
    topic_id: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupEpoch:
    """Type 3: the group epoch, bumped whenever membership or subscriptions change."""

    group: str
    epoch: int


@dataclass(frozen=True, slots=True)
class ConsumerPartitionMetadata:
    """Type 4: the subscribed topics' ids, names and partition counts (pre-4.1 brokers)."""

    group: str
    topics: tuple[tuple[str, str, int], ...]  # (topic_id, name, partitions)


@dataclass(frozen=True, slots=True)
class ConsumerMemberMetadata:
    """Type 5: who a member is."""

    group: str
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topics: tuple[str, ...]
    subscribed_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None


@dataclass(frozen=True, slots=True)
class ConsumerTargetEpoch:
    """Type 6: the epoch of the group's target assignment."""

    group: str
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ConsumerTargetAssignment:
    """Type 7: the partitions the assignor wants a member to own."""

    group: str
    member_id: str
    partitions: tuple[TopicIdPartitions, ...]


@dataclass(frozen=True, slots=True)
class ConsumerMemberAssignment:
    """Type 8: what a member owns now, and what it must still give up."""

    group: str
    member_id: str
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: tuple[TopicIdPartitions, ...]
    pending_revocation: tuple[TopicIdPartitions, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegex:
    """Type 16: a subscription regex and the topics it resolved to."""

    group: str
    regex: str
    topics: tuple[str, ...]
    version: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupTombstone:
    """A null value of types 3..8 or 16: that record is gone. ``member_id`` is set for the
    per-member kinds (a member left), ``regex`` for type 16; a type-3 tombstone is the
    group's deletion."""

    group: str
    kind: RecordKind
    member_id: str | None = None
    regex: str | None = None


ConsumerGroupRecord = (
    ConsumerGroupEpoch
    | ConsumerPartitionMetadata
    | ConsumerMemberMetadata
    | ConsumerTargetEpoch
    | ConsumerTargetAssignment
    | ConsumerMemberAssignment
    | ConsumerGroupRegex
    | ConsumerGroupTombstone
)


def decode_consumer_group_record(
    record_type: int, key: Reader, value: bytes | None, version: int | None
) -> ConsumerGroupRecord:
    """One record of type 3..8 or 16, the key read past its int16 type, the value whole
    (with its int16 version) or None. Raises :class:`KeyError` for another type,
    ``Malformed`` naming the field (``key.*`` or ``value.*``) for bytes that do not fit, and
    ``ValueError`` for a value version other than 0; :func:`pipeline.read.offsets.decode_record`
    turns each into its ``Skipped``."""
    kind, second = KINDS[record_type]
    group = key.string("key.group", compact=False)
    extra = key.string(f"key.{second}", compact=False) if second else None
    key.end(f"key.{second or 'group'}")
    if value is None:
        member = extra if second == "member_id" else None
        return ConsumerGroupTombstone(group, kind, member, extra if second == "regex" else None)
    if version not in VALUE_VERSIONS:
        raise ValueError(version)
    r = Reader(value, 2)
    out = _VALUE_READERS[kind](group, extra or "", r)
    r.skip_tagged_fields("value.tagged_fields")
    r.end("value.tagged_fields")
    return out


def _topic_partitions(r: Reader, field: str) -> tuple[TopicIdPartitions, ...]:
    out = []
    for i in range(r.array_len(field, compact=True)):
        f = f"{field}[{i}]"
        topic_id = r.uuid(f"{f}.topic_id")
        partitions = r.int32_array(f"{f}.partitions", compact=True)
        r.skip_tagged_fields(f"{f}.tagged_fields")
        out.append(TopicIdPartitions(topic_id, partitions))
    return tuple(out)


def _group_epoch(group: str, _: str, r: Reader) -> ConsumerGroupRecord:
    return ConsumerGroupEpoch(group, r.int32("value.epoch"))


def _partition_metadata(group: str, _: str, r: Reader) -> ConsumerGroupRecord:
    topics = []
    for i in range(r.array_len("value.topics", compact=True)):
        f = f"value.topics[{i}]"
        topic_id = r.uuid(f"{f}.topic_id")
        name = r.string(f"{f}.topic_name", compact=True)
        partitions = r.int32(f"{f}.num_partitions")
        for j in range(r.array_len(f"{f}.partition_metadata", compact=True)):
            r.int32(f"{f}.partition_metadata[{j}].partition")
            r.string_array(f"{f}.partition_metadata[{j}].racks", compact=True)
            r.skip_tagged_fields(f"{f}.partition_metadata[{j}].tagged_fields")
        r.skip_tagged_fields(f"{f}.tagged_fields")
        topics.append((topic_id, name, partitions))
    return ConsumerPartitionMetadata(group, tuple(topics))


def _member_metadata(group: str, member_id: str, r: Reader) -> ConsumerGroupRecord:
    return ConsumerMemberMetadata(
        group=group,
        member_id=member_id,
        instance_id=r.nullable_string("value.instance_id", compact=True),
        rack_id=r.nullable_string("value.rack_id", compact=True),
        client_id=r.string("value.client_id", compact=True),
        client_host=r.string("value.client_host", compact=True),
        subscribed_topics=r.string_array("value.subscribed_topic_names", compact=True),
        subscribed_regex=r.nullable_string("value.subscribed_topic_regex", compact=True),
        rebalance_timeout_ms=r.int32("value.rebalance_timeout_ms"),
        server_assignor=r.nullable_string("value.server_assignor", compact=True),
    )


def _target_epoch(group: str, _: str, r: Reader) -> ConsumerGroupRecord:
    return ConsumerTargetEpoch(group, r.int32("value.assignment_epoch"))


def _target_member(group: str, member_id: str, r: Reader) -> ConsumerGroupRecord:
    return ConsumerTargetAssignment(
        group, member_id, _topic_partitions(r, "value.topic_partitions")
    )


def _member_assignment(group: str, member_id: str, r: Reader) -> ConsumerGroupRecord:
    return ConsumerMemberAssignment(
        group=group,
        member_id=member_id,
        member_epoch=r.int32("value.member_epoch"),
        previous_member_epoch=r.int32("value.previous_member_epoch"),
        state=r.int8("value.state"),
        assigned=_topic_partitions(r, "value.assigned_partitions"),
        pending_revocation=_topic_partitions(r, "value.partitions_pending_revocation"),
    )


def _regex(group: str, regex: str, r: Reader) -> ConsumerGroupRecord:
    return ConsumerGroupRegex(
        group=group,
        regex=regex,
        topics=r.string_array("value.topics", compact=True),
        version=r.int64("value.version"),
        timestamp_ms=r.int64("value.timestamp"),
    )


_VALUE_READERS = {
    "group_epoch": _group_epoch,
    "partition_metadata": _partition_metadata,
    "member_metadata": _member_metadata,
    "target_epoch": _target_epoch,
    "target_member": _target_member,
    "member_assignment": _member_assignment,
    "regex": _regex,
}
