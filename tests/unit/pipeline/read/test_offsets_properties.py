"""Properties of the ``__consumer_offsets`` decoder over generated input.

The topic is written by brokers we do not control; whatever bytes arrive, the decoder must
answer with a record or a ``Skipped`` and never raise. Valid records generated here with
the encoder driven by the stated layout table (``bench.support.layout_codec``) must decode to
exactly what was encoded, on the hot path and on the careful reader alike.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bench.support.layout_codec import encode
from pipeline.coordinator.records import ConsumerGroupRecord
from pipeline.read import offsets
from pipeline.read.offsets import Skipped, decode_record
from schemas import (
    GroupMetadata,
    GroupRemoved,
    OffsetCommit,
    OffsetDeleted,
    to_dict,
    validate,
)

KIP848_TYPES = ConsumerGroupRecord.__args__  # type: ignore[attr-defined]
RESULT_TYPES = (OffsetCommit, OffsetDeleted, GroupMetadata, GroupRemoved, Skipped, *KIP848_TYPES)
SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

names = st.text(min_size=1, max_size=40)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)


def _record_type_prefixed(draw_bytes: bytes, rtype: int) -> bytes:
    return rtype.to_bytes(2, "big", signed=True) + draw_bytes


typed_keys = st.builds(
    _record_type_prefixed, st.binary(max_size=40), st.sampled_from([0, 1, 2, 3, 9, 17, -1])
)
versioned_values = st.builds(
    _record_type_prefixed, st.binary(max_size=80), st.sampled_from([0, 1, 2, 3, 4, 5, -1])
)


def _check(result: object) -> None:
    assert isinstance(result, RESULT_TYPES), result
    if isinstance(result, Skipped):
        assert result.reason in (
            "unknown_type",
            "unknown_version",
            "malformed_key",
            "malformed_value",
        )
        assert result.detail


@SETTINGS
@given(
    key=st.one_of(st.none(), st.binary(max_size=64), typed_keys),
    value=st.one_of(st.none(), st.binary(max_size=128), versioned_values),
)
@example(key=b"\x00\x01\x7f\xff", value=b"\x00\x03")
@example(key=b"\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00", value=b"\x00\x04" + b"\xff" * 20)
def test_arbitrary_bytes_never_raise(key: bytes | None, value: bytes | None) -> None:
    _check(decode_record(key, value))


@st.composite
def commits(draw: st.DrawFn) -> tuple[bytes, bytes, OffsetCommit, int]:
    rtype = draw(st.sampled_from([0, 1]))
    version = draw(st.integers(0, 4))
    group, topic = draw(st.text(max_size=30)), draw(names)
    partition = draw(st.integers(0, 2**31 - 1))
    offset, epoch = draw(st.integers(-1, 2**63 - 1)), draw(st.integers(-1, 2**31 - 1))
    metadata = draw(st.text(max_size=50))
    commit_ts, expire_ts = draw(st.integers(0, 2**62)), draw(st.integers(-1, 2**62))
    key = encode("OffsetCommitKey", rtype, group=group, topic=topic, partition=partition)
    value = encode(
        "OffsetCommitValue",
        version,
        offset=offset,
        leader_epoch=epoch,
        metadata=metadata,
        commit_timestamp=commit_ts,
        expire_timestamp=expire_ts,
    )
    expected = OffsetCommit(
        group=group,
        topic=topic,
        partition=partition,
        offset=offset,
        commit_ts_ms=commit_ts,
        leader_epoch=epoch if version >= 3 else -1,
        metadata=metadata,
        expire_ts_ms=expire_ts if version == 1 and expire_ts >= 0 else None,
    )
    return key, value, expected, version


@SETTINGS
@given(commits())
def test_generated_commits_decode_exactly_on_both_paths(
    case: tuple[bytes, bytes, OffsetCommit, int],
) -> None:
    key, value, expected, _ = case
    assert decode_record(key, value) == expected
    assert offsets._decode_slow(key, value) == expected
    validate(to_dict(expected))


@SETTINGS
@given(commits(), st.data())
def test_truncated_and_mutated_commits_never_raise(
    case: tuple[bytes, bytes, OffsetCommit, int], data: st.DataObject
) -> None:
    key, value, _, _ = case
    cut = data.draw(st.integers(0, len(value) - 1))
    got = decode_record(key, value[:cut])
    assert isinstance(got, Skipped) and got.reason == "malformed_value"
    kcut = data.draw(st.integers(0, len(key) - 1))
    got = decode_record(key[:kcut], value)
    assert isinstance(got, Skipped) and got.reason == "malformed_key"
    at = data.draw(st.integers(0, len(value) - 1))
    flipped = value[:at] + bytes([value[at] ^ data.draw(st.integers(1, 255))]) + value[at + 1 :]
    _check(decode_record(key, flipped))


@SETTINGS
@given(
    version=st.integers(0, 4),
    members=st.lists(
        st.tuples(names, st.one_of(st.none(), names), names, names, int32, int32, st.binary()),
        max_size=4,
    ),
    data=st.data(),
)
def test_group_metadata_truncations_never_raise(
    version: int, members: list[tuple], data: st.DataObject
) -> None:
    value = encode(
        "GroupMetadataValue",
        version,
        protocol_type=data.draw(st.sampled_from(["consumer", "connect", ""])),
        generation=data.draw(int32),
        protocol=data.draw(st.one_of(st.none(), names)),
        leader=data.draw(st.one_of(st.none(), names)),
        current_state_timestamp=data.draw(int64),
        members=[
            {
                "member_id": m[0],
                "group_instance_id": m[1],
                "client_id": m[2],
                "client_host": m[3],
                "rebalance_timeout": m[4],
                "session_timeout": m[5],
                "subscription": b"",
                "assignment": m[6],  # arbitrary bytes: assignments are best effort
            }
            for m in members
        ],
    )
    key = encode("GroupMetadataKey", 2, group="g")
    got = decode_record(key, value)
    assert isinstance(got, GroupMetadata), got
    assert [m.member_id for m in got.members] == [m[0] for m in members]
    cut = data.draw(st.integers(0, len(value) - 1))
    got = decode_record(key, value[:cut])
    assert isinstance(got, Skipped) and got.reason == "malformed_value"


@pytest.mark.parametrize("rtype", [0, 1])
@SETTINGS
@given(group=st.text(max_size=20), topic=names)
def test_any_offset_key_tombstone_is_a_deletion(rtype: int, group: str, topic: str) -> None:
    key = encode("OffsetCommitKey", rtype, group=group, topic=topic, partition=0)
    assert decode_record(key, None) == OffsetDeleted(group, topic, 0)
