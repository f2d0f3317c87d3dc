"""The raw client's framing and wire writer, by hand: header versions per API, compact and
classic strings and arrays, uvarints, response headers (ApiVersions' always v0)."""

from __future__ import annotations

import pytest

from pipeline.coordinator.protocol import (
    ProtocolError,
    Writer,
    encode_request,
    error_name,
    frame,
    frame_size,
    is_flexible,
    read_frame,
    request_header,
    split_response,
    uvarint,
)


@pytest.mark.parametrize(
    ("n", "wire"),
    [(0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02"),
     (1 << 21, b"\x80\x80\x80\x01")],
)  # fmt: skip
def test_uvarint(n: int, wire: bytes) -> None:
    assert uvarint(n) == wire


def test_a_negative_uvarint_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        uvarint(-1)


@pytest.mark.parametrize(
    ("api", "version", "flexible"),
    [(18, 2, False), (18, 3, True), (17, 1, False), (36, 1, False), (36, 2, True),
     (10, 3, True), (16, 4, True), (16, 2, False), (77, 1, True), (90, 0, True), (3, 12, True),
     (999, 9, False)],
)  # fmt: skip
def test_which_versions_are_flexible(api: int, version: int, flexible: bool) -> None:
    assert is_flexible(api, version) is flexible


def test_a_flexible_request_has_header_v2_with_a_classic_client_id() -> None:
    # ListGroups v5, correlation 7, client "lp": key, version, id, int16 "lp", no tags
    assert request_header(16, 5, 7, "lp") == (
        b"\x00\x10" + b"\x00\x05" + b"\x00\x00\x00\x07" + b"\x00\x02lp" + b"\x00"
    )


def test_a_classic_request_has_header_v1_without_tags() -> None:
    # SaslHandshake v1 is never flexible
    assert request_header(17, 1, 2, "lp") == b"\x00\x11\x00\x01\x00\x00\x00\x02\x00\x02lp"


def test_encode_request_frames_header_and_body() -> None:
    out = encode_request(90, 1, 1, "c", b"\xaa")
    assert out == b"\x00\x00\x00\x0d" + b"\x00\x5a\x00\x01\x00\x00\x00\x01\x00\x01c\x00" + b"\xaa"
    assert frame(b"xyz") == b"\x00\x00\x00\x03xyz"


def test_writer_strings_arrays_and_nulls() -> None:
    w = Writer().string("ab", compact=True).string("ab", compact=False)
    w.string(None, compact=True).string(None, compact=False)
    w.array_len(None, compact=True).array_len(None, compact=False).array_len(2, compact=True)
    assert w.build() == (
        b"\x03ab" + b"\x00\x02ab" + b"\x00" + b"\xff\xff" + b"\x00" + b"\xff\xff\xff\xff" + b"\x03"
    )
    w = Writer().strings(["x"], compact=True).int32s([1, -1], compact=False).no_tags()
    assert w.build() == b"\x02\x02x" + b"\x00\x00\x00\x02\x00\x00\x00\x01\xff\xff\xff\xff" + b"\x00"
    w = Writer().int8(-1).boolean(True).int16(258).int64(-2).bytes_field(b"k", compact=True)
    w.bytes_field(b"k", compact=False)
    assert w.build() == (
        b"\xff\x01\x01\x02" + b"\xff" * 7 + b"\xfe" + b"\x02k" + b"\x00\x00\x00\x01k"
    )


def test_a_flexible_response_header_skips_its_tags() -> None:
    # correlation 5, one tagged field (tag 3, 2 bytes), then the body
    data = b"\x00\x00\x00\x05" + b"\x01\x03\x02\xbe\xef" + b"BODY"
    assert split_response(77, 1, data) == (5, b"BODY")


def test_api_versions_and_classic_answers_have_header_v0() -> None:
    assert split_response(18, 3, b"\x00\x00\x00\x09\x00\x00") == (9, b"\x00\x00")
    assert split_response(17, 1, b"\x00\x00\x00\x09\x00\x00") == (9, b"\x00\x00")


def test_a_truncated_header_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="correlation_id"):
        split_response(90, 1, b"\x00\x00")


@pytest.mark.parametrize("size", [0, 3, -1, (64 << 20) + 1])
def test_an_absurd_size_is_refused_before_reading(size: int) -> None:
    with pytest.raises(ProtocolError, match=r"security\.protocol"):
        frame_size(size.to_bytes(4, "big", signed=True))


def test_read_frame_reads_the_size_then_the_answer() -> None:
    stream = bytearray(b"\x00\x00\x00\x05hello+more")

    def recv_exact(n: int) -> bytes:
        out = bytes(stream[:n])
        del stream[:n]
        return out

    assert read_frame(recv_exact) == b"hello"
    assert bytes(stream) == b"+more"


def test_error_names() -> None:
    assert error_name(16) == "NOT_COORDINATOR"
    assert error_name(12345) == "error code 12345"
