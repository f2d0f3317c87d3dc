"""KIP-848 consumer-group records (types 3..8, 16): real-broker bytes and built bytes.

The ``REAL`` vectors are what Apache Kafka 4.1 (the local broker) wrote for one
``group.protocol=consumer`` member of group ``cap-532ed6-k848`` on a 3-partition topic
(confluent-kafka 2.12): join, then the group's deletion. The AdminClient reported member
``9TOrTdh+THm9D5BV2zpheg``, client ``cap-532ed6-cli``, host ``/127.0.0.1``, partitions 0..2,
topic id ``TuQve8ZRTGKZQbFbKPnqwA``.
"""

from __future__ import annotations

import struct

import pytest

from pipeline.coordinator.records import (
    ConsumerGroupEpoch,
    ConsumerGroupRegex,
    ConsumerGroupTombstone,
    ConsumerMemberAssignment,
    ConsumerMemberMetadata,
    ConsumerPartitionMetadata,
    ConsumerTargetAssignment,
    ConsumerTargetEpoch,
    TopicIdPartitions,
)
from pipeline.read.offsets import DecodeCounters, Skipped, decode_record, make_message_decoder

GROUP = "cap-532ed6-k848"
MEMBER = "9TOrTdh+THm9D5BV2zpheg"
TOPIC_ID = "TuQve8ZRTGKZQbFbKPnqwA"
G = "000f" + GROUP.encode().hex()
M = "0016" + MEMBER.encode().hex()

REAL = [
    (
        "0005" + G + M,
        "000000000f6361702d3533326564362d636c690b2f3132372e302e302e31020e6361702d"
        "3533326564362d696e01000493e00001000100",
    ),
    ("0003" + G, "0000000000010100083f0e6979453d7e60"),  # epoch 1, tagged metadata hash
    ("0007" + G + M, "0000024ee42f7bc6514c629941b15b28f9eac0040000000000000001000000020000"),
    ("0006" + G, "00000000000100"),
    (
        "0008" + G + M,
        "0000000000010000000000024ee42f7bc6514c629941b15b28f9eac004000000000000000100000002000100",
    ),
    ("0008" + G + M, None),
    ("0007" + G + M, None),
    ("0005" + G + M, None),
    ("0003" + G, "00000000000200"),
    ("0006" + G, None),
    ("0004" + G, None),
    ("0003" + G, None),
]
PARTS = (TopicIdPartitions(TOPIC_ID, (0, 1, 2)),)
EXPECTED = [
    ConsumerMemberMetadata(
        GROUP, MEMBER, None, None, "cap-532ed6-cli", "/127.0.0.1",
        ("cap-532ed6-in",), "", 300_000, None,
    ),
    ConsumerGroupEpoch(GROUP, 1),
    ConsumerTargetAssignment(GROUP, MEMBER, PARTS),
    ConsumerTargetEpoch(GROUP, 1),
    ConsumerMemberAssignment(GROUP, MEMBER, 1, 0, 0, PARTS, ()),
    ConsumerGroupTombstone(GROUP, "member_assignment", MEMBER),
    ConsumerGroupTombstone(GROUP, "target_member", MEMBER),
    ConsumerGroupTombstone(GROUP, "member_metadata", MEMBER),
    ConsumerGroupEpoch(GROUP, 2),
    ConsumerGroupTombstone(GROUP, "target_epoch"),
    ConsumerGroupTombstone(GROUP, "partition_metadata"),
    ConsumerGroupTombstone(GROUP, "group_epoch"),
]  # fmt: skip


def _h(x: str | None) -> bytes | None:
    return None if x is None else bytes.fromhex(x)


@pytest.mark.parametrize("i", range(len(REAL)))
def test_real_broker_records_decode(i: int) -> None:
    key, value = REAL[i]
    assert decode_record(_h(key), _h(value)) == EXPECTED[i]


# ----------------------------------------------------------------- built bytes


def _s(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def _cs(text: str | None) -> bytes:  # compact (nullable) string
    return b"\x00" if text is None else bytes([len(text) + 1]) + text.encode()


def _key(rtype: int, *parts: str) -> bytes:
    return struct.pack(">h", rtype) + b"".join(_s(p) for p in parts)


UUID = bytes(range(16))
UUID_TEXT = "AAECAwQFBgcICQoLDA0ODw"


def test_partition_metadata_names_topic_ids() -> None:
    value = (
        b"\x00\x00" + b"\x02" + UUID + _cs("orders") + struct.pack(">i", 6)
        + b"\x02" + struct.pack(">i", 0) + b"\x02" + _cs("rack-a") + b"\x00"  # one partition
        + b"\x00" + b"\x00"  # topic's and value's tagged fields
    )  # fmt: skip
    got = decode_record(_key(4, "g"), value)
    assert got == ConsumerPartitionMetadata("g", ((UUID_TEXT, "orders", 6),))


def test_regular_expression_record_and_its_tombstone() -> None:
    key = _key(16, "g", "orders-.*")
    value = (
        b"\x00\x00" + b"\x03" + _cs("orders-a") + _cs("orders-b")
        + struct.pack(">qq", 7, 1_700_000_000_000) + b"\x00"
    )  # fmt: skip
    assert decode_record(key, value) == ConsumerGroupRegex(
        "g", "orders-.*", ("orders-a", "orders-b"), 7, 1_700_000_000_000
    )
    assert decode_record(key, None) == ConsumerGroupTombstone("g", "regex", regex="orders-.*")


def test_member_metadata_with_instance_rack_and_tagged_classic_metadata() -> None:
    value = (
        b"\x00\x00" + _cs("static-1") + _cs("rack-b") + _cs("cli") + _cs("/10.0.0.9")
        + b"\x01" + _cs(None) + struct.pack(">i", 45_000) + _cs("uniform")
        + b"\x01" + b"\x00" + b"\x03" + b"abc"  # one tagged field (tag 0, 3 bytes): skipped
    )  # fmt: skip
    got = decode_record(_key(5, "g", "m-1"), value)
    assert got == ConsumerMemberMetadata(
        "g", "m-1", "static-1", "rack-b", "cli", "/10.0.0.9", (), None, 45_000, "uniform"
    )


def test_assignment_with_pending_revocation_and_per_partition_tags() -> None:
    tp = UUID + b"\x03" + struct.pack(">ii", 4, 5) + b"\x01\x00\x01\x00"  # a tag in the struct
    value = b"\x00\x00" + struct.pack(">iib", 9, 8, 2) + b"\x02" + tp + b"\x02" + tp + b"\x00"
    got = decode_record(_key(8, "g", "m"), value)
    parts = (TopicIdPartitions(UUID_TEXT, (4, 5)),)
    assert got == ConsumerMemberAssignment("g", "m", 9, 8, 2, parts, parts)


@pytest.mark.parametrize("i", [0, 1, 2, 4])
def test_every_truncation_is_skipped_naming_a_value_field(i: int) -> None:
    key, value = REAL[i]
    raw = _h(value)
    assert raw is not None
    for cut in range(2, len(raw)):
        got = decode_record(_h(key), raw[:cut])
        assert isinstance(got, Skipped), (cut, got)
        assert got.reason == "malformed_value" and got.detail.startswith("value."), got


def test_trailing_bytes_and_bad_keys_are_skipped() -> None:
    key, value = REAL[1]
    got = decode_record(_h(key), _h(value) + b"\x00")  # type: ignore[operator]
    assert isinstance(got, Skipped) and got.reason == "malformed_value"
    got = decode_record(_key(5, "g"), b"\x00\x00")  # a member key without its member id
    assert isinstance(got, Skipped) and got.reason == "malformed_key"
    assert got.detail.startswith("key.member_id")
    assert isinstance(decode_record(_key(3, "g"), b"\x00"), Skipped)


@pytest.mark.parametrize("rtype", [3, 4, 5, 6, 7, 8, 16])
def test_unknown_value_versions_are_counted_and_skipped(rtype: int) -> None:
    parts = ("g", "m") if rtype in (5, 7, 8, 16) else ("g",)
    got = decode_record(_key(rtype, *parts), b"\x00\x01" + bytes(12))
    assert isinstance(got, Skipped)
    assert (got.reason, got.record_type, got.version) == ("unknown_version", rtype, 1)
    counters = DecodeCounters()
    counters.record(got)
    assert counters == {("unknown_version", rtype, 1): 1}


def test_the_message_decoder_does_not_forward_membership_records() -> None:
    counters = DecodeCounters()
    decode = make_message_decoder(counters=counters)
    for key, value in REAL:
        assert decode(_h(value), _h(key), 0, None) is None
    assert counters == {}  # decoded, not skipped: nothing counted
