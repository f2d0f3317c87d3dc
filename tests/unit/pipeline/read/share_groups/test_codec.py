"""The share-group reader's requests and answers as bytes, built by hand from the protocol
facts in pipeline/read/share_groups/codec.py: every field in its order, compact lengths
stored +1, a 0 tag count closing each structure; error codes and null / empty cases too."""

from __future__ import annotations

import pytest

from pipeline.read.share_groups.codec import (
    Broker,
    Coordinator,
    DescribedGroup,
    GroupList,
    GroupOffsets,
    ListedGroup,
    Member,
    PartitionOffsets,
    ShareGroupsDecodeError,
    decode_describe_offsets,
    decode_find_coordinator,
    decode_list_groups,
    decode_metadata_brokers,
    decode_share_group_describe,
    encode_describe_offsets,
    encode_describe_offsets_of,
    encode_find_coordinator,
    encode_list_groups,
    encode_metadata,
    encode_share_group_describe,
)

THROTTLE = b"\x00\x00\x00\x00"
NO_TAGS = b"\x00"
TOPIC_ID = bytes(range(16))


def test_metadata_asks_for_no_topic() -> None:
    # topics: empty compact array (1), allow_auto_topic_creation false,
    # include_topic_authorized_operations false, no tags
    assert encode_metadata() == b"\x01\x00\x00\x00"


def test_metadata_brokers_are_read_and_the_rest_left() -> None:
    body = (
        THROTTLE + b"\x03"
        + b"\x00\x00\x00\x01" + b"\x0a127.0.0.1" + b"\x00\x00\x65\xbc" + b"\x00" + NO_TAGS
        + b"\x00\x00\x00\x02" + b"\x02h" + b"\x00\x00\x23\x84" + b"\x03r1" + NO_TAGS
        + b"<cluster id, controller, topics: not read>"
    )  # fmt: skip
    assert decode_metadata_brokers(body) == (Broker(1, "127.0.0.1", 26044), Broker(2, "h", 9092))


def test_list_groups_asks_for_share_groups_only() -> None:
    # states_filter: empty; types_filter: ["share"]; no tags
    assert encode_list_groups() == b"\x01" + b"\x02\x06share" + NO_TAGS


def test_list_groups_answer() -> None:
    body = (
        THROTTLE + b"\x00\x00" + b"\x02"
        + b"\x03g1" + b"\x01" + b"\x07Stable" + b"\x06share" + NO_TAGS
        + NO_TAGS
    )  # fmt: skip
    assert decode_list_groups(body) == GroupList(0, (ListedGroup("g1", "", "Stable", "share"),))


def test_list_groups_error_and_no_group() -> None:
    # COORDINATOR_LOAD_IN_PROGRESS (14), an empty group array
    body = THROTTLE + b"\x00\x0e" + b"\x01" + NO_TAGS
    assert decode_list_groups(body) == GroupList(14, ())


def test_find_coordinator_batches_group_keys() -> None:
    # key_type 0 (group), coordinator_keys ["a", "bc"], no tags
    assert encode_find_coordinator(["a", "bc"]) == b"\x00" + b"\x03\x02a\x03bc" + NO_TAGS


def test_find_coordinator_answer_with_an_error_and_a_null_message() -> None:
    body = (
        THROTTLE + b"\x03"
        + b"\x02a" + b"\x00\x00\x00\x01" + b"\x02h" + b"\x00\x00\x23\x84" + b"\x00\x00"
        + b"\x00" + NO_TAGS
        + b"\x03bc" + b"\xff\xff\xff\xff" + b"\x01" + b"\xff\xff\xff\xff" + b"\x00\x0f"
        + b"\x05busy" + NO_TAGS
        + NO_TAGS
    )  # fmt: skip
    assert decode_find_coordinator(body) == (
        Coordinator("a", 1, "h", 9092, 0, None),
        Coordinator("bc", -1, "", -1, 15, "busy"),
    )


def test_share_group_describe_request() -> None:
    # group_ids ["g"], include_authorized_operations false, no tags
    assert encode_share_group_describe(["g"]) == b"\x02\x02g" + b"\x00" + NO_TAGS


MEMBER = (
    b"\x03m1" + b"\x00" + b"\x00\x00\x00\x05" + b"\x03c1" + b"\x0b/127.0.0.1"
    + b"\x02\x02t"  # subscribed ["t"]
    + b"\x02" + TOPIC_ID + b"\x02t" + b"\x03\x00\x00\x00\x00\x00\x00\x00\x02" + NO_TAGS
    + NO_TAGS  # assignment
    + NO_TAGS  # member
)  # fmt: skip


def test_share_group_describe_answer_with_a_member_and_a_missing_group() -> None:
    body = (
        THROTTLE + b"\x03"
        + b"\x00\x00" + b"\x00" + b"\x02g" + b"\x07Stable" + b"\x00\x00\x00\x03"
        + b"\x00\x00\x00\x03" + b"\x07simple" + b"\x02" + MEMBER
        + b"\x80\x00\x00\x00" + NO_TAGS
        # GROUP_ID_NOT_FOUND (69) with a message, empty strings, no member
        + b"\x00\x45" + b"\x05gone" + b"\x02x" + b"\x05Dead" + b"\xff\xff\xff\xff"
        + b"\xff\xff\xff\xff" + b"\x01" + b"\x01" + b"\x80\x00\x00\x00" + NO_TAGS
        + NO_TAGS
    )  # fmt: skip
    member = Member("m1", "c1", "/127.0.0.1", (("t", 0), ("t", 2)))
    assert decode_share_group_describe(body) == (
        DescribedGroup("g", 0, None, "Stable", 3, (member,)),
        DescribedGroup("x", 69, "gone", "Dead", -1, ()),
    )


def test_describe_offsets_asks_for_all_topics_of_each_group() -> None:
    # groups [("g", topics null)], no tags
    assert encode_describe_offsets(["g"]) == b"\x02" + b"\x02g" + b"\x00" + NO_TAGS + NO_TAGS
    assert encode_describe_offsets([]) == b"\x01" + NO_TAGS


def _offsets_answer(partitions: bytes, group_error: bytes = b"\x00\x00\x00") -> bytes:
    return (
        THROTTLE + b"\x02"
        + b"\x02g" + b"\x02" + b"\x02t" + TOPIC_ID + partitions + NO_TAGS
        + group_error + NO_TAGS
        + NO_TAGS
    )  # fmt: skip


def test_describe_offsets_v1_has_the_lag() -> None:
    partitions = (
        b"\x03"
        + b"\x00\x00\x00\x00" + b"\x00" * 7 + b"\x46" + b"\x00\x00\x00\x00"
        + b"\x00" * 7 + b"\x07" + b"\x00\x00" + b"\x00" + NO_TAGS
        # not initialized: start offset -1, lag -1 (unknown), no error
        + b"\x00\x00\x00\x01" + b"\xff" * 8 + b"\xff\xff\xff\xff"
        + b"\xff" * 8 + b"\x00\x00" + b"\x00" + NO_TAGS
    )  # fmt: skip
    assert decode_describe_offsets(_offsets_answer(partitions), 1) == (
        GroupOffsets("g", 0, None, (
            PartitionOffsets("t", 0, 70, 0, 7, 0, None),
            PartitionOffsets("t", 1, -1, -1, None, 0, None),
        )),
    )  # fmt: skip


def test_describe_offsets_v0_has_no_lag_and_carries_partition_errors() -> None:
    # UNKNOWN_TOPIC_OR_PARTITION (3) with a message
    partitions = (
        b"\x02" + b"\x00\x00\x00\x02" + b"\x00" * 7 + b"\x05" + b"\x00\x00\x00\x01"
        + b"\x00\x03" + b"\x04bad" + NO_TAGS
    )  # fmt: skip
    assert decode_describe_offsets(_offsets_answer(partitions), 0) == (
        GroupOffsets("g", 0, None, (PartitionOffsets("t", 2, 5, 1, None, 3, "bad"),)),
    )


def test_describe_offsets_group_error() -> None:
    # GROUP_AUTHORIZATION_FAILED (30), message "no", no topic
    body = THROTTLE + b"\x02" + b"\x02g" + b"\x01" + b"\x00\x1e" + b"\x03no" + NO_TAGS + NO_TAGS
    assert decode_describe_offsets(body, 1) == (GroupOffsets("g", 30, "no", ()),)


@pytest.mark.parametrize("cut", [0, 3, 5, 9, 30, 40])
def test_a_truncated_answer_names_the_api_and_the_field(cut: int) -> None:
    partitions = b"\x02" + b"\x00" * 4 + b"\x00" * 8 + b"\x00" * 4 + b"\x00" * 8 + b"\x00\x00\x00"
    body = _offsets_answer(partitions + NO_TAGS)
    with pytest.raises(ShareGroupsDecodeError, match=r"^DescribeShareGroupOffsets: \w+"):
        decode_describe_offsets(body[:cut], 1)


def test_describe_offsets_of_named_topics() -> None:
    # one group, topics [("a", [0, 2]), ("b", [1])], each closed, then group and request
    assert encode_describe_offsets_of("g", {"b": [1], "a": [2, 0]}) == (
        b"\x02" + b"\x02g" + b"\x03"
        + b"\x02a" + b"\x03\x00\x00\x00\x00\x00\x00\x00\x02" + NO_TAGS
        + b"\x02b" + b"\x02\x00\x00\x00\x01" + NO_TAGS
        + NO_TAGS + NO_TAGS
    )  # fmt: skip
