"""Round trips through the ``__consumer_offsets`` decoder, for any encoder of the records.

The decoder's unit tests run these with the encoder driven by lagpilot's layout table
(``bench.support.layout_codec``); the conformance tests run the very same checks with
kafka-python's generic engine fed Kafka's own schemas (``bench.support.kafka_schemas``).
Both encoders take the table's snake_case field names and ``members`` as dicts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

from pipeline.read.offsets import decode_record
from schemas import GroupMember, GroupMetadata, OffsetCommit, TopicAssignment, to_dict, validate

Encode = Callable[..., bytes]
TS = 1_700_000_000_000
EXPIRE = 1_700_003_600_000


def _valid(record: object) -> object:
    validate(to_dict(record))
    return record


def _assignment(version: int, topics: list[tuple[str, list[int]]]) -> bytes:
    a = ConsumerProtocolAssignment(version=version, assigned_partitions=topics, user_data=b"ud")
    return bytes(a.encode(version=version))


def check_offset_commit(encode: Encode, record_type: int, version: int) -> None:
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
    assert _valid(got) == OffsetCommit(
        group="payments",
        topic="orders.v2",
        partition=11,
        offset=9_007_199_254_740_993,
        commit_ts_ms=TS,
        leader_epoch=17 if version >= 3 else -1,
        metadata="ünïcode",
        expire_ts_ms=EXPIRE if version == 1 else None,
    )


def group_members(version: int, assignment_version: int) -> list[dict[str, Any]]:
    return [
        {
            "member_id": f"consumer-{i}-9f0c",
            "group_instance_id": "static-1" if i == 0 else None,
            "client_id": f"client-{i}",
            "client_host": f"/10.0.0.{i}",
            "rebalance_timeout": 300_000,
            "session_timeout": 45_000,
            "subscription": b"\x00\x00\x00\x00\x00\x01\x00\x06orders\xff\xff\xff\xff",
            "assignment": _assignment(assignment_version, [("orders", [i, i + 2]), ("audit", [i])]),
        }
        for i in range(2)
    ]


def check_group_metadata(encode: Encode, version: int, assignment_version: int) -> None:
    value = encode(
        "GroupMetadataValue",
        version,
        protocol_type="consumer",
        generation=7,
        protocol="cooperative-sticky",
        leader="consumer-0-9f0c",
        current_state_timestamp=TS,
        members=group_members(version, assignment_version),
    )
    got = decode_record(encode("GroupMetadataKey", 2, group="payments"), value)
    assert _valid(got) == GroupMetadata(
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


def check_empty_group(encode: Encode, version: int) -> None:
    value = encode(
        "GroupMetadataValue", version, protocol_type="", generation=0, protocol=None,
        leader=None, current_state_timestamp=TS, members=[],
    )  # fmt: skip
    got = decode_record(encode("GroupMetadataKey", 2, group="grp"), value)
    assert isinstance(got, GroupMetadata), got
    assert (got.protocol, got.leader, got.members) == (None, None, ())
