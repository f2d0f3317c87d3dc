"""Decode ``__consumer_offsets`` records into lagpilot's typed coordinator records.

A record's key is an int16 record type followed by a struct; its value is an int16 value
version followed by a struct; a null value is a tombstone. :func:`decode_record` is pure:
it returns an :class:`~schemas.offsets.OffsetCommit`, :class:`~schemas.offsets.OffsetDeleted`,
:class:`~schemas.offsets.GroupMetadata` or :class:`~schemas.offsets.GroupRemoved`, a KIP-848
membership record of :mod:`pipeline.coordinator.records` (types 3..8 and 16), or a
:class:`Skipped` naming why and which field it could not read. It never raises: the topic
is written by brokers of many versions and vendors, and one record we do not understand
must not stop lag detection for every other group.

Offset commits are nearly all of the topic's traffic, so type 0/1 keys with v1/v3 values
take a hot path (precompiled structs, no reader object); everything else, and any record
the hot path rejects, goes through a field-by-field reader that names the field that failed.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from quixstreams.models.serializers import Deserializer, SerializationContext

from pipeline.coordinator.records import (
    CONSUMER_GROUP_RECORD_TYPES,
    ConsumerGroupRecord,
    decode_consumer_group_record,
)
from pipeline.coordinator.wire import INT16, INT32, INT64, Malformed, Reader
from pipeline.read.group_metadata import FLEXIBLE_FROM, decode_assignment, decode_group_metadata
from schemas.codec import to_dict
from schemas.offsets import (
    CoordinatorRecord,
    GroupMetadata,
    GroupRemoved,
    OffsetCommit,
    OffsetDeleted,
)
from schemas.topics import OWN_GROUP_PREFIX

__all__ = [
    "CoordinatorKeyDeserializer",
    "DecodeCounters",
    "SkipReason",
    "Skipped",
    "decode_assignment",
    "decode_message",
    "decode_record",
    "is_own_group",
    "make_message_decoder",
]

SkipReason = Literal["unknown_type", "unknown_version", "malformed_key", "malformed_value"]

OFFSET_COMMIT_VALUE_VERSIONS = range(5)  # v0..v4, v4 flexible
GROUP_METADATA_VALUE_VERSIONS = range(5)  # v0..v4, v4 flexible

_KIND_BY_TYPE = {
    **dict.fromkeys(range(9, 16), "a share group record (types 9..15)"),
}


@dataclass(frozen=True, slots=True)
class Skipped:
    """A record the decoder did not turn into an event, and why.

    Counted by ``(reason, record_type, version)`` so an operator sees, e.g., that a broker
    upgrade started writing OffsetCommitValue v5 before lag silently stops for everyone.
    """

    reason: SkipReason
    record_type: int | None
    version: int | None
    detail: str


# --------------------------------------------------------------------------- hot path

_KEY_HEAD = struct.Struct(">hh")  # record type, group length
#: the hot path's own names for the wire's Structs (the same objects): it decodes faster
#: through module-private names than through the imported ones (bench/perf/decode.py)
_INT16, _INT32, _INT64 = INT16, INT32, INT64
_INT64X2 = struct.Struct(">qq")
_V1_HEAD = struct.Struct(">hqh")  # version, offset, metadata length
_V3_HEAD = struct.Struct(">hqih")  # version, offset, leader epoch, metadata length
_V1_EMPTY = struct.Struct(">hqhqq")  # v1 whole, when metadata is empty
_V3_EMPTY = struct.Struct(">hqihq")  # v3 whole, when metadata is empty

#: Every OffsetCommit slot, in order; the unit tests check it against the dataclass.
_FAST_FIELDS = (
    "group",
    "topic",
    "partition",
    "offset",
    "commit_ts_ms",
    "leader_epoch",
    "metadata",
    "expire_ts_ms",
    "event",
    "v",
)


class _CommitBuilder:
    """An unfrozen twin of ``OffsetCommit`` with the very same slots.

    A frozen dataclass's ``__init__`` stores each field through ``object.__setattr__``,
    which costs more than the rest of the hot path together. Plain slot stores on this
    twin, then ``__class__`` assignment (CPython allows it between classes with identical
    slot layouts), build the same ``OffsetCommit`` in a fraction of the time. The module
    checks at import that the trick yields an equal object and falls back to the
    dataclass constructor if it ever does not (e.g. ``OffsetCommit`` loses its slots).
    """

    __slots__ = _FAST_FIELDS


def _build_commit(
    group: str,
    topic: str,
    partition: int,
    offset: int,
    commit_ts_ms: int,
    leader_epoch: int,
    metadata: str,
    expire_ts_ms: int | None,
) -> OffsetCommit:
    c: Any = _CommitBuilder()
    c.group = group
    c.topic = topic
    c.partition = partition
    c.offset = offset
    c.commit_ts_ms = commit_ts_ms
    c.leader_epoch = leader_epoch
    c.metadata = metadata
    c.expire_ts_ms = expire_ts_ms
    c.event = "commit"
    c.v = 1
    c.__class__ = OffsetCommit
    return c


def _builder_works() -> bool:
    args = ("g", "t", 1, 2, 3, 4, "m", 5)
    try:
        built = _build_commit(*args)
    except TypeError:  # layouts differ: __class__ assignment refused
        return False
    return type(built) is OffsetCommit and built == OffsetCommit(*args)


_FAST_BUILD = _builder_works()

Decoded = CoordinatorRecord | ConsumerGroupRecord | Skipped
"""What :func:`decode_record` returns: a record the lag model and group health read, or
why it was skipped. KIP-848 membership records (:mod:`pipeline.coordinator.records`)
feed the group-health model inside the reader and are never forwarded as events."""
_new_commit: Callable[..., OffsetCommit] = _build_commit if _FAST_BUILD else OffsetCommit


def decode_record(key: bytes | None, value: bytes | None) -> Decoded:
    """Decode one ``__consumer_offsets`` record; never raises.

    >>> key = bytes.fromhex("0001" "0001") + b"g" + bytes.fromhex("0001") + b"t" + bytes(4)
    >>> value = bytes.fromhex("0003") + (42).to_bytes(8, "big") + (7).to_bytes(4, "big")
    >>> value += bytes(2) + (1700000000000).to_bytes(8, "big")
    >>> decode_record(key, value)  # doctest: +NORMALIZE_WHITESPACE
    OffsetCommit(group='g', topic='t', partition=0, offset=42, commit_ts_ms=1700000000000,
                 leader_epoch=7, metadata='', expire_ts_ms=None, event='commit', v=1)
    >>> decode_record(key, None)
    OffsetDeleted(group='g', topic='t', partition=0, event='offset_deleted', v=1)

    The hot path below handles type 0/1 keys with v1/v3 values and hands anything else,
    or anything it does not like, to the careful reader, which decides and explains.
    """
    if type(key) is not bytes or value is None:  # tombstones, odd buffers: the careful way
        return _decode_slow(key, value)
    try:
        ktype, glen = _KEY_HEAD.unpack_from(key)
        if (ktype != 1 and ktype != 0) or glen < 0:
            return _decode_slow(key, value)
        p = 4 + glen
        (tlen,) = _INT16.unpack_from(key, p)
        p2 = p + 2 + tlen
        (partition,) = _INT32.unpack_from(key, p2)
        if tlen < 0 or p2 + 4 != len(key):
            return _decode_slow(key, value)
        n = len(value)
        if n == 24 and value[1] == 3 and value[0] == 0:  # v3, empty metadata: the usual case
            _, offset, epoch, mlen, commit_ts = _V3_EMPTY.unpack(value)
            if mlen:
                return _decode_slow(key, value)
            metadata = ""
            expire_ts = None
        elif n == 28 and value[1] == 1 and value[0] == 0:  # v1, empty metadata
            _, offset, mlen, commit_ts, expire = _V1_EMPTY.unpack(value)
            if mlen:
                return _decode_slow(key, value)
            epoch = -1
            metadata = ""
            expire_ts = None if expire < 0 else expire
        elif value[0] == 0 and value[1] == 3:
            _, offset, epoch, mlen = _V3_HEAD.unpack_from(value)
            q = 16 + mlen
            (commit_ts,) = _INT64.unpack_from(value, q)
            if mlen < 0 or q + 8 != n:
                return _decode_slow(key, value)
            metadata = value[16:q].decode()
            expire_ts = None
        elif value[0] == 0 and value[1] == 1:
            _, offset, mlen = _V1_HEAD.unpack_from(value)
            q = 12 + mlen
            commit_ts, expire = _INT64X2.unpack_from(value, q)
            if mlen < 0 or q + 16 != n:
                return _decode_slow(key, value)
            epoch = -1
            metadata = value[12:q].decode()
            expire_ts = None if expire < 0 else expire
        else:
            return _decode_slow(key, value)
        group = key[4:p].decode()
        topic = key[p + 2 : p2].decode()
    except Exception:  # any surprise falls through to the careful reader, which explains it
        return _decode_slow(key, value)
    if not _FAST_BUILD:
        return OffsetCommit(group, topic, partition, offset, commit_ts, epoch, metadata, expire_ts)
    # Inline on purpose: see _CommitBuilder. Plain slot stores, then become an OffsetCommit.
    c: Any = _CommitBuilder()
    c.group = group
    c.topic = topic
    c.partition = partition
    c.offset = offset
    c.commit_ts_ms = commit_ts
    c.leader_epoch = epoch
    c.metadata = metadata
    c.expire_ts_ms = expire_ts
    c.event = "commit"
    c.v = 1
    c.__class__ = OffsetCommit
    return c


# --------------------------------------------------------------------------- slow path


def _decode_slow(key: bytes | None, value: bytes | None) -> Decoded:
    if not isinstance(key, bytes | bytearray | memoryview):
        return Skipped("malformed_key", None, None, "key: null or not bytes")
    kr = Reader(bytes(key))
    try:
        ktype = kr.int16("key.record_type")
    except Malformed as exc:
        return Skipped("malformed_key", None, None, str(exc))
    version: int | None = None
    if value is not None:
        if not isinstance(value, bytes | bytearray | memoryview):
            return Skipped("malformed_value", ktype, None, "value: not bytes")
        value = bytes(value)
        version = INT16.unpack_from(value)[0] if len(value) >= 2 else None
    if ktype in CONSUMER_GROUP_RECORD_TYPES:
        return _consumer_group_record(ktype, kr, value, version)
    if ktype not in (0, 1, 2):
        kind = _KIND_BY_TYPE.get(ktype, "a record type this decoder does not know")
        return Skipped("unknown_type", ktype, version, f"key.record_type: {ktype} is {kind}")
    try:
        if ktype == 2:
            group = kr.string("key.group", compact=False)
            kr.end("key.group")
        else:
            group = kr.string("key.group", compact=False)
            topic = kr.string("key.topic", compact=False)
            partition = kr.int32("key.partition")
            kr.end("key.partition")
    except Malformed as exc:
        return Skipped("malformed_key", ktype, version, str(exc))
    if value is None:
        return GroupRemoved(group) if ktype == 2 else OffsetDeleted(group, topic, partition)
    if version is None:
        return Skipped("malformed_value", ktype, None, "value.version: needs 2 bytes")
    if ktype == 2:
        if version not in GROUP_METADATA_VALUE_VERSIONS:
            return Skipped("unknown_version", ktype, version, _unknown_version("Group", version))
        return _group_metadata(group, value, version)
    if version not in OFFSET_COMMIT_VALUE_VERSIONS:
        return Skipped("unknown_version", ktype, version, _unknown_version("OffsetCommit", version))
    try:
        return _offset_commit(group, topic, partition, Reader(value, 2), version)
    except Malformed as exc:
        return Skipped("malformed_value", ktype, version, str(exc))


def _consumer_group_record(
    ktype: int, kr: Reader, value: bytes | None, version: int | None
) -> ConsumerGroupRecord | Skipped:
    if value is not None and version is None:
        return Skipped("malformed_value", ktype, None, "value.version: needs 2 bytes")
    try:
        return decode_consumer_group_record(ktype, kr, value, version)
    except Malformed as exc:
        reason: SkipReason = "malformed_key" if exc.field.startswith("key.") else "malformed_value"
        return Skipped(reason, ktype, version, str(exc))
    except ValueError:
        detail = f"value.version: v{version} of record type {ktype} is newer than this decoder (v0)"
        return Skipped("unknown_version", ktype, version, detail)


def _unknown_version(kind: str, version: int) -> str:
    return f"value.version: {kind}Value v{version} is newer than this decoder (v0..v4)"


def _offset_commit(group: str, topic: str, partition: int, r: Reader, version: int) -> OffsetCommit:
    flexible = version >= FLEXIBLE_FROM
    offset = r.int64("value.offset")
    epoch = r.int32("value.leader_epoch") if version >= 3 else -1
    # Kafka stores a null commit metadata as ""; be as lenient as the broker.
    metadata = r.nullable_string("value.metadata", flexible) or ""
    commit_ts = r.int64("value.commit_timestamp")
    expire_ts = r.int64("value.expire_timestamp") if version == 1 else -1
    last = "value.expire_timestamp" if version == 1 else "value.commit_timestamp"
    if flexible:
        r.skip_tagged_fields("value.tagged_fields")
        last = "value.tagged_fields"
    r.end(last)
    return _new_commit(
        group,
        topic,
        partition,
        offset,
        commit_ts,
        epoch,
        metadata,
        None if expire_ts < 0 else expire_ts,
    )


def _group_metadata(group: str, value: bytes, version: int) -> GroupMetadata | Skipped:
    try:
        return decode_group_metadata(group, value, version)
    except Malformed as exc:
        return Skipped("malformed_value", 2, version, str(exc))


# --------------------------------------------------------------------------- pipeline edges


def is_own_group(group: str, own_prefix: str = OWN_GROUP_PREFIX) -> bool:
    """True for lagpilot's own consumer groups, whose commits the pipeline must ignore:
    reading our own commits would feed our consumption back into our lag model.
    An empty prefix matches nothing (rather than every group)."""
    return bool(own_prefix) and group.startswith(own_prefix)


class DecodeCounters(Counter[tuple[str, int | None, int | None]]):
    """Skipped records counted by ``(reason, record_type, version)``, plus own-group drops.

    A plain counter so the pipeline's metrics module can export it as a labelled Prometheus
    counter without this module importing prometheus-client.
    """

    own_group_filtered: int = 0

    def record(self, skipped: Skipped) -> None:
        self[(skipped.reason, skipped.record_type, skipped.version)] += 1


class CoordinatorKeyDeserializer(Deserializer):
    """Passes ``__consumer_offsets`` key bytes through untouched.

    The key alone cannot be decoded into an event (a key with a null value is a deletion),
    so decoding happens in :func:`decode_message` with key and value together.
    Quix never calls a key deserializer for a null key; it passes ``None`` on itself.
    """

    def __call__(self, value: bytes | bytearray | memoryview, ctx: SerializationContext) -> bytes:
        return bytes(value)


MessageDecoder = Callable[[bytes | None, bytes | None, int, Any], dict[str, Any] | None]


def make_message_decoder(
    own_prefix: str = OWN_GROUP_PREFIX, counters: DecodeCounters | None = None
) -> MessageDecoder:
    """A function for ``sdf.apply(fn, metadata=True)`` over ``__consumer_offsets``.

    Quix delivers a tombstone as ``value=None`` (the value deserializer is not called), so
    deletions flow through as ``offset_deleted``/``group_removed`` dicts. Returns ``None``
    for skipped records (counted in ``counters``) and for lagpilot's own groups; follow it
    with ``.filter(lambda v: v is not None)``.
    """

    def decode(
        value: bytes | None, key: bytes | None, timestamp: int, headers: Any
    ) -> dict[str, Any] | None:
        record = decode_record(key, value)
        if isinstance(record, Skipped):
            if counters is not None:
                counters.record(record)
            return None
        if is_own_group(record.group, own_prefix):
            if counters is not None:
                counters.own_group_filtered += 1
            return None
        if not hasattr(record, "event"):  # KIP-848 membership: read by group health only
            return None
        return to_dict(record)

    return decode


decode_message: MessageDecoder = make_message_decoder()
"""The default :func:`make_message_decoder`: lagpilot's own prefix, nothing counted."""
