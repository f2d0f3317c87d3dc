"""The share-group reader's requests and answers, as pure functions over bytes.

Protocol facts (Kafka's message definitions, in our words; every body here is flexible, so
strings and arrays are compact and every structure ends with a tagged-field section):

- Metadata (3) v12: request = topics (nullable array; empty asks for no topic, null would
  ask for all), allow_auto_topic_creation, include_topic_authorized_operations. The answer
  opens with throttle_time_ms and the brokers (node_id, host, port, nullable rack): all the
  reader needs, so it stops there.
- ListGroups (16) v5: request = states_filter, types_filter (both string arrays; empty:
  no filter). Answer = throttle_time_ms, error_code, groups of (group_id, protocol_type,
  group_state, group_type). Each broker lists only the groups it coordinates, and only those
  the principal may describe.
- FindCoordinator (10) v4+: request = key_type (int8; 0 is a group, which share groups are)
  and coordinator_keys (string array): one request for many groups. Answer =
  throttle_time_ms, then per key: key, node_id, host, port, error_code, error_message.
- ShareGroupDescribe (77) v1 (v0 was 4.0's early access, gone in 4.1): request = group_ids,
  include_authorized_operations. Answer = throttle_time_ms, then per group: error_code,
  error_message, group_id, group_state, group_epoch, assignment_epoch, assignor_name, members
  (member_id, rack_id, member_epoch, client_id, client_host, subscribed_topic_names,
  assignment = a struct holding topic_partitions of (topic_id, topic_name, partitions)),
  authorized_operations.
- DescribeShareGroupOffsets (90) v0-v1: request = groups of (group_id, topics: a nullable
  array of (topic_name, partitions); null means every topic-partition the group has state
  for). Answer = throttle_time_ms, then per group: group_id, topics of (topic_name, topic_id,
  partitions of (partition_index, start_offset, leader_epoch, [v1: lag int64], error_code,
  error_message)), error_code, error_message. v1 (Kafka 4.2, KIP-1226) adds the lag.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

from pipeline.coordinator.protocol import Writer
from pipeline.coordinator.wire import Malformed, Reader
from schemas.errors import LagpilotError

GROUP_KEY_TYPE = 0  # FindCoordinator's key type for a group (share groups included)
SHARE = "share"  # ListGroups' group type for a share group

P = ParamSpec("P")
T = TypeVar("T")


class ShareGroupsDecodeError(LagpilotError, ValueError):
    """An answer the reader cannot read (names the API and the field)."""

    code = "malformed"


@dataclass(frozen=True, slots=True)
class Broker:
    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str


@dataclass(frozen=True, slots=True)
class GroupList:
    error_code: int
    groups: tuple[ListedGroup, ...]


@dataclass(frozen=True, slots=True)
class Coordinator:
    key: str
    node_id: int
    host: str
    port: int
    error_code: int
    error_message: str | None


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    client_id: str
    client_host: str
    assigned: tuple[tuple[str, int], ...]  # (topic, partition)


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    group_id: str
    error_code: int
    error_message: str | None
    state: str
    group_epoch: int
    members: tuple[Member, ...]


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    topic: str
    partition: int
    start_offset: int
    leader_epoch: int
    lag: int | None  # None: v0 (no lag on the wire) or a negative "unknown" from v1
    error_code: int
    error_message: str | None


@dataclass(frozen=True, slots=True)
class GroupOffsets:
    group_id: str
    error_code: int
    error_message: str | None
    partitions: tuple[PartitionOffsets, ...]


def _decoding(api: str) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """Turns a reader's ``Malformed`` into the error that names the API."""

    def wrap(decode: Callable[P, T]) -> Callable[P, T]:
        @functools.wraps(decode)
        def run(*args: P.args, **kwargs: P.kwargs) -> T:
            try:
                return decode(*args, **kwargs)
            except Malformed as exc:
                raise ShareGroupsDecodeError(f"{api}: {exc}") from None

        return run

    return wrap


# --------------------------------------------------------------------------- Metadata


def encode_metadata() -> bytes:
    """Metadata v12 asking for no topic: the brokers only."""
    return Writer().array_len(0, compact=True).boolean(False).boolean(False).no_tags().build()


@_decoding("Metadata")
def decode_metadata_brokers(body: bytes) -> tuple[Broker, ...]:
    r = Reader(body)
    r.int32("throttle_time_ms")
    brokers = []
    for _ in range(r.array_len("brokers", compact=True)):
        node_id, host = r.int32("node_id"), r.string("host", compact=True)
        port = r.int32("port")
        r.nullable_string("rack", compact=True)
        r.skip_tagged_fields("broker")
        brokers.append(Broker(node_id, host, port))
    return tuple(brokers)


# --------------------------------------------------------------------------- ListGroups


def encode_list_groups(types: Iterable[str] = (SHARE,)) -> bytes:
    """ListGroups v5: no state filter, the given type filter."""
    return Writer().strings((), compact=True).strings(types, compact=True).no_tags().build()


@_decoding("ListGroups")
def decode_list_groups(body: bytes) -> GroupList:
    r = Reader(body)
    r.int32("throttle_time_ms")
    error = r.int16("error_code")
    groups = []
    for _ in range(r.array_len("groups", compact=True)):
        group_id = r.string("group_id", compact=True)
        protocol_type = r.string("protocol_type", compact=True)
        state = r.string("group_state", compact=True)
        group_type = r.string("group_type", compact=True)
        r.skip_tagged_fields("group")
        groups.append(ListedGroup(group_id, protocol_type, state, group_type))
    r.skip_tagged_fields("ListGroups")
    return GroupList(error, tuple(groups))


# --------------------------------------------------------------------------- FindCoordinator


def encode_find_coordinator(group_ids: Iterable[str]) -> bytes:
    """FindCoordinator v4+ (same body through v6): every group in one request."""
    w = Writer().int8(GROUP_KEY_TYPE).strings(group_ids, compact=True)
    return w.no_tags().build()


@_decoding("FindCoordinator")
def decode_find_coordinator(body: bytes) -> tuple[Coordinator, ...]:
    r = Reader(body)
    r.int32("throttle_time_ms")
    out = []
    for _ in range(r.array_len("coordinators", compact=True)):
        key = r.string("key", compact=True)
        node_id, host = r.int32("node_id"), r.string("host", compact=True)
        port, error = r.int32("port"), r.int16("error_code")
        message = r.nullable_string("error_message", compact=True)
        r.skip_tagged_fields("coordinator")
        out.append(Coordinator(key, node_id, host, port, error, message))
    r.skip_tagged_fields("FindCoordinator")
    return tuple(out)


# --------------------------------------------------------------------------- ShareGroupDescribe


def encode_share_group_describe(group_ids: Iterable[str]) -> bytes:
    """ShareGroupDescribe v1, without authorized operations (the broker skips computing them)."""
    return Writer().strings(group_ids, compact=True).boolean(False).no_tags().build()


@_decoding("ShareGroupDescribe")
def decode_share_group_describe(body: bytes) -> tuple[DescribedGroup, ...]:
    r = Reader(body)
    r.int32("throttle_time_ms")
    out = []
    for _ in range(r.array_len("groups", compact=True)):
        error = r.int16("error_code")
        message = r.nullable_string("error_message", compact=True)
        group_id = r.string("group_id", compact=True)
        state = r.string("group_state", compact=True)
        epoch = r.int32("group_epoch")
        r.int32("assignment_epoch")
        r.string("assignor_name", compact=True)
        members = tuple(_member(r) for _ in range(r.array_len("members", compact=True)))
        r.int32("authorized_operations")
        r.skip_tagged_fields("group")
        out.append(DescribedGroup(group_id, error, message, state, epoch, members))
    r.skip_tagged_fields("ShareGroupDescribe")
    return tuple(out)


def _member(r: Reader) -> Member:
    member_id = r.string("member_id", compact=True)
    r.nullable_string("rack_id", compact=True)
    r.int32("member_epoch")
    client_id = r.string("client_id", compact=True)
    client_host = r.string("client_host", compact=True)
    r.string_array("subscribed_topic_names", compact=True)
    assigned: list[tuple[str, int]] = []
    for _ in range(r.array_len("topic_partitions", compact=True)):
        r.uuid("topic_id")
        topic = r.string("topic_name", compact=True)
        assigned += [(topic, p) for p in r.int32_array("partitions", compact=True)]
        r.skip_tagged_fields("topic_partitions")
    r.skip_tagged_fields("assignment")
    r.skip_tagged_fields("member")
    return Member(member_id, client_id, client_host, tuple(assigned))


# ------------------------------------------------------------- DescribeShareGroupOffsets


def encode_describe_offsets(group_ids: Iterable[str]) -> bytes:
    """DescribeShareGroupOffsets v0/v1 (one body): each group with topics null (all)."""
    groups = list(group_ids)
    w = Writer().array_len(len(groups), compact=True)
    for group_id in groups:
        w.string(group_id, compact=True).array_len(None, compact=True).no_tags()
    return w.no_tags().build()


def encode_describe_offsets_of(group_id: str, topics: Mapping[str, Iterable[int]]) -> bytes:
    """DescribeShareGroupOffsets for one group and the named topic-partitions."""
    w = Writer().array_len(1, compact=True).string(group_id, compact=True)
    w.array_len(len(topics), compact=True)
    for topic in sorted(topics):
        w.string(topic, compact=True).int32s(sorted(topics[topic]), compact=True).no_tags()
    return w.no_tags().no_tags().build()


@_decoding("DescribeShareGroupOffsets")
def decode_describe_offsets(body: bytes, version: int) -> tuple[GroupOffsets, ...]:
    r = Reader(body)
    r.int32("throttle_time_ms")
    out = []
    for _ in range(r.array_len("groups", compact=True)):
        group_id = r.string("group_id", compact=True)
        partitions: list[PartitionOffsets] = []
        for _ in range(r.array_len("topics", compact=True)):
            topic = r.string("topic_name", compact=True)
            r.uuid("topic_id")
            for _ in range(r.array_len("partitions", compact=True)):
                partitions.append(_partition(r, topic, version))
            r.skip_tagged_fields("topic")
        error = r.int16("error_code")
        message = r.nullable_string("error_message", compact=True)
        r.skip_tagged_fields("group")
        out.append(GroupOffsets(group_id, error, message, tuple(partitions)))
    r.skip_tagged_fields("DescribeShareGroupOffsets")
    return tuple(out)


def _partition(r: Reader, topic: str, version: int) -> PartitionOffsets:
    index, start = r.int32("partition_index"), r.int64("start_offset")
    epoch = r.int32("leader_epoch")
    lag = r.int64("lag") if version >= 1 else None
    error = r.int16("error_code")
    message = r.nullable_string("error_message", compact=True)
    r.skip_tagged_fields("partition")
    # a negative lag is the broker's "not known" (an uninitialized share-partition)
    known = lag if lag is not None and lag >= 0 else None
    return PartitionOffsets(topic, index, start, epoch, known, error, message)
