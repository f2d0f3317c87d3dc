"""The ``__consumer_offsets`` decoder, byte by byte.

Three kinds of evidence: byte literals written out by hand (every value version, every
truncation point), vectors built by an independent encoder from the upstream schemas
(``coordinator_schemas``: kafka-python's generic engine over Kafka's own JSON), and
properties over arbitrary bytes. Every decoded record is validated against its JSON Schema.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

from pipeline import offsets
from pipeline.consumer_group_records import ConsumerGroupTombstone
from pipeline.offsets import Skipped, decode_assignment, decode_record
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
from tests.unit.pipeline.coordinator_schemas import (
    VECTORS,
    encode,
    key_type,
    record_schema_names,
    schema_class,
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


# ----------------------------------------------------------------- independent vectors


def _assignment(version: int, topics: list[tuple[str, list[int]]]) -> bytes:
    a = ConsumerProtocolAssignment(version=version, assigned_partitions=topics, user_data=b"ud")
    return bytes(a.encode(version=version))


@pytest.mark.parametrize("record_type", [0, 1])
@pytest.mark.parametrize("version", range(5))
def test_offset_commit_vectors_from_upstream_schema(record_type: int, version: int) -> None:
    key = encode("OffsetCommitKey", record_type, group="payments", topic="orders.v2", partition=11)
    value = encode(
        "OffsetCommitValue",
        version,
        offset=9_007_199_254_740_993,
        leader_epoch=17,
        metadata="ünïcode",
        commit_timestamp=TS,
        expire_timestamp=EXPIRE,
    )
    got = decode_record(key, value)
    assert valid(got) == OffsetCommit(
        group="payments",
        topic="orders.v2",
        partition=11,
        offset=9_007_199_254_740_993,
        commit_ts_ms=TS,
        leader_epoch=17 if version >= 3 else -1,
        metadata="ünïcode",
        expire_ts_ms=EXPIRE if version == 1 else None,
    )


@pytest.mark.parametrize("version", range(5))
@pytest.mark.parametrize("assignment_version", range(4))
def test_group_metadata_vectors_from_upstream_schema(version: int, assignment_version: int) -> None:
    member_class = schema_class("GroupMetadataValue").MemberMetadata
    members = [
        member_class(
            version=version,
            member_id=f"consumer-{i}-9f0c",
            group_instance_id="static-1" if i == 0 else None,
            client_id=f"client-{i}",
            client_host=f"/10.0.0.{i}",
            rebalance_timeout=300_000,
            session_timeout=45_000,
            subscription=b"\x00\x00\x00\x00\x00\x01\x00\x06orders\xff\xff\xff\xff",
            assignment=_assignment(assignment_version, [("orders", [i, i + 2]), ("audit", [i])]),
        )
        for i in range(2)
    ]
    value = encode(
        "GroupMetadataValue",
        version,
        protocol_type="consumer",
        generation=7,
        protocol="cooperative-sticky",
        leader="consumer-0-9f0c",
        current_state_timestamp=TS,
        members=members,
    )
    got = decode_record(encode("GroupMetadataKey", 2, group="payments"), value)
    assert valid(got) == GroupMetadata(
        group="payments",
        protocol_type="consumer",
        generation=7,
        protocol="cooperative-sticky",
        leader="consumer-0-9f0c",
        current_state_ts_ms=TS if version >= 2 else -1,
        members=tuple(
            GroupMember(
                member_id=f"consumer-{i}-9f0c",
                client_id=f"client-{i}",
                client_host=f"/10.0.0.{i}",
                group_instance_id="static-1" if i == 0 and version >= 3 else None,
                rebalance_timeout_ms=300_000 if version >= 1 else -1,
                session_timeout_ms=45_000,
                assignment=(
                    TopicAssignment("orders", (i, i + 2)),
                    TopicAssignment("audit", (i,)),
                ),
            )
            for i in range(2)
        ),
    )


def test_group_metadata_with_no_members_and_null_protocol() -> None:
    for version in range(5):
        value = encode(
            "GroupMetadataValue", version, protocol_type="", generation=0, protocol=None,
            leader=None, current_state_timestamp=TS, members=[],
        )  # fmt: skip
        got = decode_record(GROUP_KEY, value)
        assert isinstance(got, GroupMetadata), got
        assert (got.protocol, got.leader, got.members) == (None, None, ())


DECODED_KEYS = ("OffsetCommitKey", "GroupMetadataKey")
OTHER_KEYS = [n for n in record_schema_names() if n.endswith("Key") and n not in DECODED_KEYS]


def test_the_vectors_cover_every_old_style_record_type() -> None:
    assert sorted(key_type(n) for n in OTHER_KEYS) == list(range(3, 16))


@pytest.mark.parametrize("key_name", [k for k in OTHER_KEYS if key_type(k) >= 9])
def test_share_group_records_are_skipped(key_name: str) -> None:
    rtype = key_type(key_name)
    fields = {f: "grp" if "group" in f else "x" for f in schema_class(key_name).fields}
    key = encode(key_name, rtype, **fields)
    value = encode(key_name[: -len("Key")] + "Value", 0)
    for v, version in ((value, 0), (None, None)):
        got = decode_record(key, v)
        assert isinstance(got, Skipped)
        assert (got.reason, got.record_type, got.version) == ("unknown_type", rtype, version)
        assert "share group" in got.detail


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


def _kafka4x_key(path: Path) -> tuple[int, bytes, dict[str, object]]:
    """A Kafka 4.x ``coordinator-key`` schema's record type, and a key built from its
    fields (non-flexible keys: int16 apiKey, then int16-length strings and int32s)."""
    doc = json.loads(re.sub(r"(?m)^\s*//.*$", "", path.read_text()))
    assert doc["type"] == "coordinator-key"
    out: bytes = doc["apiKey"].to_bytes(2, "big")
    values: dict[str, object] = {}
    for f in doc["fields"]:
        if f["type"] == "string":
            text = f"{f['name'].lower()}-x"
            values[f["name"]] = text
            out += len(text).to_bytes(2, "big") + text.encode()
        else:
            assert f["type"] == "int32", f
            values[f["name"]] = 9
            out += (9).to_bytes(4, "big")
    return int(doc["apiKey"]), out, values


@pytest.mark.parametrize(
    "path", sorted((VECTORS / "kafka4x").glob("*Key.json")), ids=lambda p: p.stem
)
def test_kafka4x_coordinator_keys(path: Path) -> None:
    rtype, key, values = _kafka4x_key(path)
    got = decode_record(key, None)
    if rtype in (0, 1):
        assert got == OffsetDeleted(values["group"], values["topic"], 9)  # type: ignore[arg-type]
    elif rtype == 2:
        assert got == GroupRemoved(values["group"])  # type: ignore[arg-type]
    elif rtype == 3:  # KIP-848: decoded by pipeline.consumer_group_records
        assert got == ConsumerGroupTombstone(str(values["GroupId"]), "group_epoch")
    else:  # streams groups (17, 24): newer kinds, skipped and counted
        assert isinstance(got, Skipped) and (got.reason, got.record_type) == ("unknown_type", rtype)
