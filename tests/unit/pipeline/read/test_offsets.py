"""The ``__consumer_offsets`` decoder, byte by byte.

Evidence that needs no upstream file: byte literals written out by hand (every value
version, every truncation point), and vectors encoded from lagpilot's stated layout table
(``pipeline.coordinator.layouts``, by ``bench.support.layout_codec``); properties over
arbitrary bytes are in ``test_offsets_properties``. Every decoded record is validated against its
JSON Schema. That the table matches Kafka's own schemas, and that kafka-python's generic
engine fed those schemas builds the same vectors, is checked in
``tests/conformance/test_coordinator_records.py``.
"""

from __future__ import annotations

import dataclasses

import pytest
from support import offset_vectors

from bench.support import layout_codec
from pipeline.coordinator import layouts as coordinator_layouts
from pipeline.coordinator.layouts import (
    GROUP_METADATA_KEY,
    GROUP_METADATA_VALUE,
    LAYOUTS,
    OFFSET_COMMIT_KEY,
    OFFSET_COMMIT_VALUE,
)
from pipeline.read import offsets
from pipeline.read.offsets import Skipped, decode_assignment, decode_record
from schemas import (
    GroupMember,
    GroupMetadata,
    GroupRemoved,
    OffsetCommit,
    OffsetDeleted,
    TopicAssignment,
    to_dict,
    validate,
)

TS = 1_700_000_000_000  # 0x0000018bcfe56800
EXPIRE = 1_700_003_600_000  # 0x0000018bd01c5680

# OffsetCommitKey: type 1, group "g1", topic "t", partition 7.
KEY_1 = bytes.fromhex("00010002673100017400000007")
KEY_0 = bytes.fromhex("00000002673100017400000007")
GROUP_KEY = bytes.fromhex("00020003677270")  # GroupMetadataKey: type 2, group "grp"

# OffsetCommitValue, offset 42, metadata "md", commit timestamp TS.
COMMIT_VALUES = {
    0: "0000000000000000002a00026d640000018bcfe56800",
    1: "0001000000000000002a00026d640000018bcfe568000000018bd01c5680",
    2: "0002000000000000002a00026d640000018bcfe56800",
    3: "0003000000000000002a0000000500026d640000018bcfe56800",
    # flexible: compact string (length + 1), then an empty tagged-field section
    4: "0004000000000000002a00000005036d640000018bcfe5680000",
}
COMMIT_EXPECTED = {
    0: OffsetCommit("g1", "t", 7, 42, TS, -1, "md", None),
    1: OffsetCommit("g1", "t", 7, 42, TS, -1, "md", EXPIRE),
    2: OffsetCommit("g1", "t", 7, 42, TS, -1, "md", None),
    3: OffsetCommit("g1", "t", 7, 42, TS, 5, "md", None),
    4: OffsetCommit("g1", "t", 7, 42, TS, 5, "md", None),
}

ASSIGNMENT = "00000000000100066f7264657273000000020000000000000002ffffffff"  # orders: [0, 2]
MEMBER_V3 = (
    "00036d2d31ffff000163000a2f3132372e302e302e31000493e00000afc8000000000000001e" + ASSIGNMENT
)
GROUP_HEAD_V3 = "00030008636f6e73756d657200000003000572616e676500036d2d310000018bcfe56800"
KAFKA_GROUP_V3 = bytes.fromhex(GROUP_HEAD_V3 + "00000001" + MEMBER_V3)
# Redpanda: the same, but each member entry starts with its own int16 version.
REDPANDA_GROUP_V3 = bytes.fromhex(GROUP_HEAD_V3 + "00000001" + "0003" + MEMBER_V3)
MEMBER = GroupMember(
    member_id="m-1",
    client_id="c",
    client_host="/127.0.0.1",
    group_instance_id=None,
    rebalance_timeout_ms=300_000,
    session_timeout_ms=45_000,
    assignment=(TopicAssignment("orders", (0, 2)),),
)
GROUP_EXPECTED = GroupMetadata("grp", "consumer", 3, "range", "m-1", TS, (MEMBER,))


def valid(record: object) -> object:
    validate(to_dict(record))
    return record


# ----------------------------------------------------------------- byte literals


@pytest.mark.parametrize("key", [KEY_0, KEY_1], ids=["type0", "type1"])
@pytest.mark.parametrize("version", sorted(COMMIT_VALUES))
def test_offset_commit_value_versions(key: bytes, version: int) -> None:
    got = decode_record(key, bytes.fromhex(COMMIT_VALUES[version]))
    assert valid(got) == COMMIT_EXPECTED[version]


@pytest.mark.parametrize("version", sorted(COMMIT_VALUES))
def test_hot_path_agrees_with_the_careful_reader(version: int) -> None:
    value = bytes.fromhex(COMMIT_VALUES[version])
    assert decode_record(KEY_1, value) == offsets._decode_slow(KEY_1, value)


@pytest.mark.parametrize("version", sorted(COMMIT_VALUES))
def test_every_truncated_commit_value_is_malformed(version: int) -> None:
    value = bytes.fromhex(COMMIT_VALUES[version])
    for cut in range(len(value)):
        got = decode_record(KEY_1, value[:cut])
        assert isinstance(got, Skipped), (cut, got)
        assert got.reason == "malformed_value"
        assert got.record_type == 1
        assert got.version == (version if cut >= 2 else None)
        assert got.detail.startswith("value.")


@pytest.mark.parametrize("version", sorted(COMMIT_VALUES))
def test_trailing_bytes_are_malformed_not_silently_ignored(version: int) -> None:
    got = decode_record(KEY_1, bytes.fromhex(COMMIT_VALUES[version]) + b"\x00")
    assert isinstance(got, Skipped) and got.reason == "malformed_value"
    assert "trailing" in got.detail


def test_truncation_names_the_field_that_failed() -> None:
    v3 = bytes.fromhex(COMMIT_VALUES[3])
    assert decode_record(KEY_1, v3[:5]).detail.startswith("value.offset")  # type: ignore[union-attr]
    assert decode_record(KEY_1, v3[:12]).detail.startswith("value.leader_epoch")  # type: ignore[union-attr]
    assert decode_record(KEY_1, v3[:17]).detail.startswith("value.metadata")  # type: ignore[union-attr]
    assert decode_record(KEY_1, v3[:-1]).detail.startswith("value.commit_timestamp")  # type: ignore[union-attr]


@pytest.mark.parametrize("key", [KEY_0, KEY_1, GROUP_KEY], ids=["type0", "type1", "type2"])
def test_every_truncated_key_is_malformed(key: bytes) -> None:
    value = bytes.fromhex(COMMIT_VALUES[3])
    for cut in range(len(key)):
        for v in (value, None):
            got = decode_record(key[:cut], v)
            assert isinstance(got, Skipped) and got.reason == "malformed_key", (cut, got)
            assert got.detail.startswith("key.")
            assert got.record_type == (None if cut < 2 else key[1])


def test_tombstones_are_deletions() -> None:
    assert valid(decode_record(KEY_1, None)) == OffsetDeleted("g1", "t", 7)
    assert valid(decode_record(KEY_0, None)) == OffsetDeleted("g1", "t", 7)
    assert valid(decode_record(GROUP_KEY, None)) == GroupRemoved("grp")


def test_null_key_and_bad_strings() -> None:
    assert decode_record(None, b"\x00\x03") == Skipped(
        "malformed_key", None, None, "key: null or not bytes"
    )
    bad_utf8 = bytes.fromhex("00010002ff fe00017400000007")
    got = decode_record(bad_utf8, bytes.fromhex(COMMIT_VALUES[3]))
    assert isinstance(got, Skipped) and got.reason == "malformed_key"
    assert got.detail.startswith("key.group: not UTF-8")
    null_group = bytes.fromhex("0001ffff00017400000007")
    got = decode_record(null_group, bytes.fromhex(COMMIT_VALUES[3]))
    assert isinstance(got, Skipped) and got.detail.startswith("key.group: null")


def test_null_commit_metadata_reads_as_empty_like_the_broker() -> None:
    value = bytes.fromhex("0003000000000000002a00000005ffff0000018bcfe56800")
    assert decode_record(KEY_1, value) == OffsetCommit("g1", "t", 7, 42, TS, 5, "", None)


@pytest.mark.parametrize("version", [5, 6, 300, -1])
def test_unknown_value_versions_are_skipped(version: int) -> None:
    value = version.to_bytes(2, "big", signed=True) + bytes(30)
    for key, kind in ((KEY_1, "OffsetCommit"), (GROUP_KEY, "Group")):
        got = decode_record(key, value)
        assert isinstance(got, Skipped)
        assert (got.reason, got.record_type, got.version) == ("unknown_version", key[1], version)
        assert f"{kind}Value v{version}" in got.detail


def test_kafka_group_metadata_v3_literal() -> None:
    assert valid(decode_record(GROUP_KEY, KAFKA_GROUP_V3)) == GROUP_EXPECTED


def test_redpanda_group_metadata_with_per_member_versions() -> None:
    assert valid(decode_record(GROUP_KEY, REDPANDA_GROUP_V3)) == GROUP_EXPECTED


def test_redpanda_members_may_carry_older_versions_than_the_value() -> None:
    member_v0 = "000000036d2d31000163000a2f3132372e302e302e310000afc8"
    member_v0 += "000000000000001e" + ASSIGNMENT
    value = bytes.fromhex(GROUP_HEAD_V3 + "00000001" + member_v0)
    got = decode_record(GROUP_KEY, value)
    expected = dataclasses.replace(MEMBER, rebalance_timeout_ms=-1)
    assert valid(got) == dataclasses.replace(GROUP_EXPECTED, members=(expected,))


@pytest.mark.parametrize("value", [KAFKA_GROUP_V3, REDPANDA_GROUP_V3], ids=["kafka", "redpanda"])
def test_every_truncated_group_metadata_is_malformed(value: bytes) -> None:
    for cut in range(len(value)):
        got = decode_record(GROUP_KEY, value[:cut])
        assert isinstance(got, Skipped) and got.reason == "malformed_value", (cut, got)
        assert got.detail.startswith("value."), got


def test_non_consumer_protocols_keep_assignments_empty() -> None:
    connect = bytes.fromhex("00030007636f6e6e656374" + GROUP_HEAD_V3[24:] + "00000001" + MEMBER_V3)
    got = decode_record(GROUP_KEY, connect)
    assert isinstance(got, GroupMetadata) and got.protocol_type == "connect"
    assert got.members[0].assignment == ()


@pytest.mark.parametrize(
    "raw",
    [None, b"", b"\x00", bytes.fromhex(ASSIGNMENT)[:-9], b"\x00\x00\x7f\xff\xff\xff", b"\xff" * 9],
)
def test_unreadable_assignments_are_empty_not_errors(raw: bytes | None) -> None:
    assert decode_assignment(raw) == ()


# ----------------------------------------------------------------- the stated layouts


@pytest.mark.parametrize("record_type", [0, 1])
@pytest.mark.parametrize("version", OFFSET_COMMIT_VALUE.versions)
def test_offset_commit_vectors_from_the_layout_table(record_type: int, version: int) -> None:
    offset_vectors.check_offset_commit(layout_codec.encode, record_type, version)


@pytest.mark.parametrize("version", GROUP_METADATA_VALUE.versions)
@pytest.mark.parametrize("assignment_version", range(4))
def test_group_metadata_vectors_from_the_layout_table(
    version: int, assignment_version: int
) -> None:
    offset_vectors.check_group_metadata(layout_codec.encode, version, assignment_version)


@pytest.mark.parametrize("version", GROUP_METADATA_VALUE.versions)
def test_group_metadata_with_no_members_and_null_protocol(version: int) -> None:
    offset_vectors.check_empty_group(layout_codec.encode, version)


def test_the_layout_encoder_writes_the_hand_written_literals() -> None:
    """The table-driven encoder and the byte literals above say the same thing."""
    for version, literal in COMMIT_VALUES.items():
        value = layout_codec.encode(
            "OffsetCommitValue", version, offset=42, leader_epoch=5, metadata="md",
            commit_timestamp=TS, expire_timestamp=EXPIRE,
        )  # fmt: skip
        assert value.hex() == literal, version
    key = layout_codec.encode("OffsetCommitKey", 1, group="g1", topic="t", partition=7)
    assert key == KEY_1
    assert layout_codec.encode("GroupMetadataKey", 2, group="grp") == GROUP_KEY


def test_the_decoder_accepts_exactly_the_stated_versions() -> None:
    """Record types and value versions: the decoder reads the stated ones, skips the rest."""
    assert OFFSET_COMMIT_VALUE.versions == offsets.OFFSET_COMMIT_VALUE_VERSIONS
    assert GROUP_METADATA_VALUE.versions == offsets.GROUP_METADATA_VALUE_VERSIONS
    assert OFFSET_COMMIT_VALUE.flexible_from == offsets.FLEXIBLE_FROM
    assert GROUP_METADATA_VALUE.flexible_from == offsets.FLEXIBLE_FROM
    keys = [spec for spec in LAYOUTS if spec.part == "key"]
    assert keys == [OFFSET_COMMIT_KEY, GROUP_METADATA_KEY]
    for rtype in range(-1, 20):
        if rtype in coordinator_layouts.CONSUMER_GROUP_TYPES:
            continue  # pipeline.coordinator.records states and reads them
        spec = next((k for k in keys if rtype in k.versions), OFFSET_COMMIT_KEY)
        fields = {f.name: "x" if f.type == "string" else 1 for f in spec.fields}
        body = layout_codec.encode(spec.name, spec.versions[0], **fields)[2:]
        got = decode_record(rtype.to_bytes(2, "big", signed=True) + body, None)
        assert isinstance(got, Skipped) == (rtype not in spec.versions), (rtype, got)
        if rtype not in spec.versions:
            continue
        value_spec = coordinator_layouts.VALUE_OF[spec.name]
        for version in range(-1, 8):
            value = version.to_bytes(2, "big", signed=True) + bytes(40)
            got = decode_record(rtype.to_bytes(2, "big") + body, value)
            unknown = isinstance(got, Skipped) and got.reason == "unknown_version"
            assert unknown == (version not in value_spec.versions), (spec.name, version, got)


@pytest.mark.parametrize(
    ("kind", "rtype"),
    [(kind, t) for kind, types in coordinator_layouts.SKIPPED_KINDS.items() for t in types],
)
def test_share_group_records_are_skipped(kind: str, rtype: int) -> None:
    key = rtype.to_bytes(2, "big") + b"\x00\x03grp"
    for value, version in ((b"\x00\x00" + bytes(8), 0), (None, None)):
        got = decode_record(key, value)
        assert isinstance(got, Skipped)
        assert (got.reason, got.record_type, got.version) == ("unknown_type", rtype, version)
        assert kind.split()[0] in got.detail


@pytest.mark.parametrize("rtype", [17, 24, 100, 32767, -1])
def test_newer_record_types_such_as_streams_groups_are_skipped(rtype: int) -> None:
    key = rtype.to_bytes(2, "big", signed=True) + b"\x00\x03grp"  # e.g. StreamsGroupMetadataKey
    got = decode_record(key, b"\x00\x00" + bytes(20))
    assert got == Skipped(
        "unknown_type",
        rtype,
        0,
        f"key.record_type: {rtype} is a record type this decoder does not know",
    )


# ----------------------------------------------------------------- the fast constructor


def test_fast_constructor_sets_every_field_like_the_dataclass() -> None:
    assert tuple(f.name for f in dataclasses.fields(OffsetCommit)) == offsets._FAST_FIELDS
    args = ("g", "t", 3, 99, TS, 4, "meta", EXPIRE)
    fast, slow = offsets._new_commit(*args), OffsetCommit(*args)
    assert fast == slow and hash(fast) == hash(slow) and to_dict(fast) == to_dict(slow)


def test_hot_path_builds_through_the_twin_class_and_falls_back_without_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert offsets._FAST_BUILD, "the slot-twin trick stopped working: the hot path is slow"
    values = [bytes.fromhex(COMMIT_VALUES[v]) for v in (1, 3)]
    fast = [decode_record(KEY_1, v) for v in values]
    monkeypatch.setattr(offsets, "_FAST_BUILD", False)
    slow = [decode_record(KEY_1, v) for v in values]
    assert fast == slow == [COMMIT_EXPECTED[1], COMMIT_EXPECTED[3]]
    assert all(type(r) is OffsetCommit for r in fast)


@pytest.mark.parametrize(
    "value",
    [
        "0003000000000000002a0000000500020000018bcfe56800",  # 24 bytes, mlen 2
        "0001000000000000002a00040000018bcfe568000000018b",  # 28 bytes, mlen 4
        "0000000000000000002a00046d646d640000018bcfe56800",  # v0, also 24 bytes
    ],
)
def test_fixed_size_shortcuts_check_what_they_assume(value: str) -> None:
    raw = bytes.fromhex(value)
    assert decode_record(KEY_1, raw) == offsets._decode_slow(KEY_1, raw)


@pytest.mark.parametrize("version", GROUP_METADATA_VALUE.versions)
def test_redpanda_per_member_versions_where_the_table_states_them(version: int) -> None:
    """Redpanda prefixes each member with an int16 version, in versions 0..3 only."""
    members = offset_vectors.group_members(version, 0)[:1]
    head = dict(
        protocol_type="consumer", generation=7, protocol="range", leader=None,
        current_state_timestamp=TS,
    )  # fmt: skip
    empty = layout_codec.encode("GroupMetadataValue", version, **head, members=[])
    kafka = layout_codec.encode("GroupMetadataValue", version, **head, members=members)
    if GROUP_METADATA_VALUE.flexible(version):  # varint count (n + 1) ... tagged fields
        assert empty.endswith(b"\x01\x00")
        head_bytes, count, tail = empty[:-2], b"\x02", b"\x00"
    else:  # int32 count, no tail
        assert empty.endswith(bytes(4))
        head_bytes, count, tail = empty[:-4], (1).to_bytes(4, "big"), b""
    member = kafka[len(head_bytes) + len(count) : len(kafka) - len(tail)]
    redpanda = head_bytes + count + version.to_bytes(2, "big") + member + tail
    ours, theirs = decode_record(GROUP_KEY, kafka), decode_record(GROUP_KEY, redpanda)
    assert isinstance(ours, GroupMetadata) and len(ours.members) == 1
    if version in coordinator_layouts.REDPANDA_MEMBER_VERSION_PREFIX:
        assert theirs == ours
    else:
        assert isinstance(theirs, Skipped) and theirs.reason == "malformed_value"
