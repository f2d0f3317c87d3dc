"""ApiVersions v3 by hand: the request lagpilot sends, the answers it reads (byte literals),
and the release the doctor names from ``metadata.version``."""

from __future__ import annotations

import pytest

from pipeline.commands.broker_version import (
    ApiVersions,
    DecodeError,
    decode_response,
    describe,
    encode_request,
    metadata_version_name,
)

MV = b"\x11metadata.version"  # compact string: length + 1, then 16 bytes

# error 0; ApiVersions (18) 0..4 and Metadata (3) 0..13; throttle 0; two tagged fields:
# 0 SupportedFeatures [metadata.version 7..27], 2 FinalizedFeatures [metadata.version 27..27]
KAFKA_41 = (
    b"\x00\x00" + b"\x03" + b"\x00\x12\x00\x00\x00\x04\x00" + b"\x00\x03\x00\x00\x00\x0d\x00"
    + b"\x00\x00\x00\x00" + b"\x02"
    + b"\x00\x17" + b"\x02" + MV + b"\x00\x07\x00\x1b\x00"
    + b"\x02\x17" + b"\x02" + MV + b"\x00\x1b\x00\x1b\x00"
)  # fmt: skip
# the same from Apache Kafka 4.4.0: metadata.version 7..33 supported, 33..33 finalized
KAFKA_44 = KAFKA_41.replace(b"\x00\x07\x00\x1b", b"\x00\x07\x00\x21").replace(
    b"\x00\x1b\x00\x1b", b"\x00\x21\x00\x21"
)


def test_the_request_is_api_versions_v3_with_a_flexible_header() -> None:
    req = encode_request(7, client_id="lp")
    assert req[:4] == (len(req) - 4).to_bytes(4, "big")
    assert req[4:8] == b"\x00\x12\x00\x03"  # api key 18, version 3
    assert req[8:12] == b"\x00\x00\x00\x07"  # correlation id
    assert req[12:16] == b"\x00\x02lp" and req[16:17] == b"\x00"  # client id, no tags
    assert req[17:] == b"\x10lagpilot-doctor" + b"\x021" + b"\x00"


def test_a_kafka_41_answer() -> None:
    av = decode_response(KAFKA_41)
    assert av.error_code == 0 and av.api_keys == {18: (0, 4), 3: (0, 13)}
    assert av.supported == {"metadata.version": (7, 27)}
    assert av.finalized == {"metadata.version": (27, 27)}  # wire order is max, min
    assert describe(av) == "Apache Kafka 4.1 (metadata.version 4.1-IV1)"


def test_a_kafka_44_answer() -> None:
    av = decode_response(KAFKA_44)
    assert av.supported == {"metadata.version": (7, 33)}
    assert av.finalized == {"metadata.version": (33, 33)}
    assert describe(av) == "Apache Kafka 4.4 (metadata.version 4.4-IV2)"


@pytest.mark.parametrize(
    ("level", "name"),
    [(7, "3.3-IV3"), (21, "3.9-IV0"), (27, "4.1-IV1"), (29, "4.2-IV1"), (30, "4.3-IV0"),
     (31, "4.4-IV0"), (33, "4.4-IV2")],
)  # fmt: skip
def test_levels_are_named_as_kafka_numbers_them(level: int, name: str) -> None:
    assert metadata_version_name(level) == name


def test_a_44_broker_whose_cluster_still_runs_41_says_finish_the_upgrade() -> None:
    av = ApiVersions(0, {}, {"metadata.version": (7, 33)}, {"metadata.version": (27, 27)})
    assert describe(av) == (
        "Apache Kafka 4.4 (cluster still at metadata.version 4.1-IV1: finish the upgrade)"
    )


def test_a_cluster_not_yet_finalized_at_its_release_says_so() -> None:
    av = ApiVersions(0, {}, {"metadata.version": (7, 27)}, {"metadata.version": (21, 21)})
    assert describe(av) == (
        "Apache Kafka 4.1 (cluster still at metadata.version 3.9-IV0: finish the upgrade)"
    )


def test_a_broker_without_metadata_version_is_named_by_its_apis() -> None:
    no_tags = b"\x00\x00\x02\x00\x12\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00"
    av = decode_response(no_tags)
    assert av.api_keys == {18: (0, 3)} and not av.supported
    assert describe(av).startswith("Kafka protocol, 1 APIs (no metadata.version")


def test_an_old_broker_answers_unsupported_version_in_the_v0_layout() -> None:
    v0 = b"\x00\x23" + b"\x00\x00\x00\x01" + b"\x00\x12\x00\x00\x00\x02"
    av = decode_response(v0, version=0)
    assert av.error_code == 35 and av.api_keys == {18: (0, 2)}


def test_unknown_tags_are_skipped_and_newer_levels_named() -> None:
    tags_at = KAFKA_41.index(b"\x02\x00\x17")  # the tag count, then tag 0
    extra = KAFKA_41[:tags_at] + b"\x03" + KAFKA_41[tags_at + 1 :] + b"\x05\x01\x01"  # tag 5
    assert decode_response(extra).finalized == {"metadata.version": (27, 27)}
    assert metadata_version_name(99) == "level 99"
    assert metadata_version_name(34) == "level 34"  # 4.5-IV0 in 4.4.0, not yet production
    future = ApiVersions(0, {}, {"metadata.version": (7, 40)}, {"metadata.version": (40, 40)})
    assert describe(future).startswith("Apache Kafka newer than 4.4 (level 40)")


@pytest.mark.parametrize("cut", [1, 3, 10, 18, 23, 30, len(KAFKA_41) - 1])
def test_a_truncated_answer_names_the_field(cut: int) -> None:
    with pytest.raises(DecodeError, match="truncated"):
        decode_response(KAFKA_41[:cut])
