"""The byte layouts of the ``__consumer_offsets`` records lagpilot decodes, stated as data.

This is lagpilot's own statement of what :mod:`pipeline.read.offsets` relies on: for each key
and value it reads, which int16 prefixes it accepts (a key's record type, a value's
version), which fields follow in which order, their wire types, when they may be null, and
the value a field takes in versions that do not carry it. The decoder is written by hand
for speed; two kinds of test hold it to this table:

- unit tests (no upstream file needed) encode records from this table and check that the
  decoder reads back exactly what was encoded, and that the versions the decoder accepts
  are the versions stated here;
- conformance tests (``tests/conformance/``) check every layout here, version by version,
  against Apache Kafka's own message schemas for these records, read where they live
  (``tests/support/reference.py`` says where).

Wire rules, the same for every record here: a key is an int16 record type and then its
fields; a value is an int16 version and then its fields; a null value is a tombstone.
Integers are big-endian. In non-flexible versions a string is an int16 length (-1: null)
and its UTF-8 bytes, ``bytes`` and arrays an int32 length (-1: null). From a layout's first
flexible version on, strings, bytes and arrays carry an unsigned-varint length plus one
(0: null), and every struct ends with a tagged-field section (a varint count, then tag,
size, bytes per field), which the decoder skips.

Redpanda writes offset commits exactly as Kafka does. Its GroupMetadataValue differs in one
point no Kafka schema states: in versions 0..3 every member entry starts with its own int16
member version (:data:`REDPANDA_MEMBER_VERSION_PREFIX`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pipeline.coordinator.records import CONSUMER_GROUP_RECORD_TYPES

WireType = Literal["int16", "int32", "int64", "string", "bytes", "[]member"]

#: Versions 0..3 of Redpanda's GroupMetadataValue prefix each member with an int16 version.
REDPANDA_MEMBER_VERSION_PREFIX = range(4)


@dataclass(frozen=True)
class Field:
    """One field of a record, in wire order."""

    name: str  # snake_case, as the decoder names it in a Skipped detail ("value.<name>")
    type: WireType
    versions: range  # the prefixes (record types or value versions) that carry it
    nullable: range = range(0)  # the versions in which it may be null
    absent: int | None = None  # what the record means when its version does not carry it

    def in_version(self, version: int) -> bool:
        return version in self.versions


@dataclass(frozen=True)
class Layout:
    """A key or a value: its accepted int16 prefixes and its fields."""

    name: str  # the record's name in Kafka's sources, e.g. "OffsetCommitValue"
    part: Literal["key", "value"]
    versions: range  # key: the record types; value: the value versions the decoder reads
    fields: tuple[Field, ...]
    flexible_from: int | None = None  # first flexible version; None: never flexible
    member: tuple[Field, ...] = field(default=())  # the fields of each "[]member" element

    def flexible(self, version: int) -> bool:
        return self.flexible_from is not None and version >= self.flexible_from

    def fields_in(self, version: int) -> tuple[Field, ...]:
        """The fields a record of this version carries, in wire order."""
        return tuple(f for f in self.fields if f.in_version(version))

    def member_fields_in(self, version: int) -> tuple[Field, ...]:
        return tuple(f for f in self.member if f.in_version(version))


_ALL = range(0, 2**15)  # "every version": intersected with a layout's versions when read

OFFSET_COMMIT_KEY = Layout(
    "OffsetCommitKey",
    "key",
    versions=range(0, 2),  # 0: written by Kafka before 0.10.1 (and read back), 1: today
    fields=(
        Field("group", "string", _ALL),
        Field("topic", "string", _ALL),
        Field("partition", "int32", _ALL),
    ),
)

OFFSET_COMMIT_VALUE = Layout(
    "OffsetCommitValue",
    "value",
    versions=range(0, 5),
    flexible_from=4,
    fields=(
        Field("offset", "int64", _ALL),
        Field("leader_epoch", "int32", range(3, 2**15), absent=-1),
        # Kafka writes a null metadata as ""; the decoder is as lenient as the broker.
        Field("metadata", "string", _ALL),
        Field("commit_timestamp", "int64", _ALL),
        Field("expire_timestamp", "int64", range(1, 2), absent=-1),  # -1 / absent: None
    ),
)

GROUP_METADATA_KEY = Layout(
    "GroupMetadataKey",
    "key",
    versions=range(2, 3),
    fields=(Field("group", "string", _ALL),),
)

GROUP_METADATA_VALUE = Layout(
    "GroupMetadataValue",
    "value",
    versions=range(0, 5),
    flexible_from=4,
    fields=(
        Field("protocol_type", "string", _ALL),
        Field("generation", "int32", _ALL),
        Field("protocol", "string", _ALL, nullable=_ALL),
        Field("leader", "string", _ALL, nullable=_ALL),
        Field("current_state_timestamp", "int64", range(2, 2**15), absent=-1),
        Field("members", "[]member", _ALL),
    ),
    member=(
        Field("member_id", "string", _ALL),
        Field("group_instance_id", "string", range(3, 2**15), nullable=range(3, 2**15)),
        Field("client_id", "string", _ALL),
        Field("client_host", "string", _ALL),
        Field("rebalance_timeout", "int32", range(1, 2**15), absent=-1),
        Field("session_timeout", "int32", _ALL),
        Field("subscription", "bytes", _ALL),
        Field("assignment", "bytes", _ALL),
    ),
)

#: Every layout the decoder claims, keys first. A new record kind adds its layouts here.
LAYOUTS: tuple[Layout, ...] = (
    OFFSET_COMMIT_KEY,
    OFFSET_COMMIT_VALUE,
    GROUP_METADATA_KEY,
    GROUP_METADATA_VALUE,
)

#: The value layout that follows each key, by key name.
VALUE_OF: dict[str, Layout] = {
    OFFSET_COMMIT_KEY.name: OFFSET_COMMIT_VALUE,
    GROUP_METADATA_KEY.name: GROUP_METADATA_VALUE,
}

#: Record types decoded by :mod:`pipeline.coordinator.records`, whose ``LAYOUTS`` states
#: them: the KIP-848 consumer-group records (16, regular expressions, is newer).
CONSUMER_GROUP_TYPES = tuple(sorted(CONSUMER_GROUP_RECORD_TYPES))

#: What the decoder says of record types it skips, by type: the kinds Kafka defines.
SKIPPED_KINDS: dict[str, range] = {
    "share group": range(9, 16),
}


def layout(name: str) -> Layout:
    """The layout named ``name`` (e.g. ``"OffsetCommitValue"``)."""
    for candidate in LAYOUTS:
        if candidate.name == name:
            return candidate
    raise KeyError(f"no layout named {name!r}: known {[c.name for c in LAYOUTS]}")
