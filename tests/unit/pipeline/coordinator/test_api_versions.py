"""ApiVersions as the raw client sends it (v3, or v0 for an old broker) and the version it
then picks per API; the answers' decoding is tested in
tests/unit/pipeline/commands/test_broker_version.py."""

from __future__ import annotations

from pipeline.coordinator.api_versions import ApiVersions, encode, pick_version


def test_v3_names_the_software_and_v0_has_no_body() -> None:
    v3 = encode(5, "lp", "lagpilot")
    assert v3 == (
        b"\x00\x00\x00\x19" + b"\x00\x12\x00\x03\x00\x00\x00\x05\x00\x02lp\x00"
        + b"\x09lagpilot" + b"\x021" + b"\x00"
    )  # fmt: skip
    # v0 is not flexible: header v1 (no tags), empty body
    assert encode(6, "lp", "lagpilot", version=0) == (
        b"\x00\x00\x00\x0c" + b"\x00\x12\x00\x00\x00\x00\x00\x06\x00\x02lp"
    )


def test_pick_version_is_the_highest_both_speak() -> None:
    av = ApiVersions(0, {90: (0, 1), 77: (1, 1), 10: (0, 3)})
    assert pick_version(av, 90, 0, 1) == 1
    assert pick_version(av, 90, 0, 0) == 0  # we ask for less than the broker has
    assert pick_version(av, 10, 4, 6) is None  # no batched FindCoordinator
    assert pick_version(av, 77, 0, 0) is None  # 4.0's early-access v0 is gone
    assert pick_version(av, 16, 0, 5) is None  # not listed at all
