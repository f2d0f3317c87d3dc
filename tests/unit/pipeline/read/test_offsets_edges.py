"""The decoder's edges toward the pipeline: own-group filter, counters, Quix adapters."""

from __future__ import annotations

from quixstreams.models.serializers import Deserializer, SerializationContext

from pipeline.read.offsets import (
    CoordinatorKeyDeserializer,
    DecodeCounters,
    Skipped,
    decode_message,
    decode_record,
    is_own_group,
    make_message_decoder,
)
from schemas import validate

KEY = bytes.fromhex("00010002673100017400000007")  # g1 / t / 7
OWN_KEY = bytes.fromhex("0001000c") + b"lagpilot-app" + bytes.fromhex("00017400000000")
VALUE = bytes.fromhex("0003000000000000002a0000000500000000018bcfe56800")
SHARE_KEY = bytes.fromhex("00090003") + b"grp"  # a share group record: not decoded


def test_is_own_group() -> None:
    assert is_own_group("lagpilot")
    assert is_own_group("lagpilot-pipeline-0")
    assert not is_own_group("payments-lagpilot")
    assert is_own_group("ops-x", own_prefix="ops-")
    assert not is_own_group("anything", own_prefix="")  # an empty prefix must not eat all groups


def test_counters_count_by_reason_type_and_version() -> None:
    counters = DecodeCounters()
    for key, value in [(SHARE_KEY, b"\x00\x00"), (SHARE_KEY, b"\x00\x01"), (SHARE_KEY, None)]:
        got = decode_record(key, value)
        assert isinstance(got, Skipped)
        counters.record(got)
    counters.record(decode_record(KEY, b"\x00\x09"))  # type: ignore[arg-type]
    counters.record(decode_record(KEY, b"\x00\x09\x00"))  # type: ignore[arg-type]
    assert counters == {
        ("unknown_type", 9, 0): 1,
        ("unknown_type", 9, 1): 1,
        ("unknown_type", 9, None): 1,
        ("unknown_version", 1, 9): 2,
    }
    assert counters.total() == 5


def test_message_decoder_emits_valid_dicts_and_tombstones() -> None:
    got = decode_message(VALUE, KEY, 0, None)
    assert got is not None
    validate(got)
    assert (got["event"], got["group"], got["offset"], got["leader_epoch"]) == (
        "commit",
        "g1",
        42,
        5,
    )
    deleted = decode_message(None, KEY, 0, None)
    assert deleted == {
        "event": "offset_deleted",
        "v": 1,
        "group": "g1",
        "topic": "t",
        "partition": 7,
    }


def test_message_decoder_drops_own_group_and_counts_skips() -> None:
    counters = DecodeCounters()
    decode = make_message_decoder(counters=counters)
    assert decode(VALUE, OWN_KEY, 0, None) is None
    assert decode(None, OWN_KEY, 0, None) is None
    assert decode(b"\x00\x00", SHARE_KEY, 0, None) is None
    assert decode(VALUE, KEY, 0, None) is not None
    assert counters.own_group_filtered == 2
    assert counters == {("unknown_type", 9, 0): 1}
    other = make_message_decoder(own_prefix="g1")
    assert other(VALUE, KEY, 0, None) is None
    assert other(VALUE, OWN_KEY, 0, None) is not None


def test_key_deserializer_passes_bytes_through() -> None:
    deserializer = CoordinatorKeyDeserializer()
    assert isinstance(deserializer, Deserializer)
    ctx = SerializationContext(topic="__consumer_offsets", field="key")
    assert deserializer(KEY, ctx=ctx) == KEY
    assert type(deserializer(bytearray(KEY), ctx=ctx)) is bytes


def test_docstring_examples_run() -> None:
    import doctest

    from pipeline.read import offsets

    result = doctest.testmod(offsets, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 2 and result.failed == 0
