"""Hand-off markers round-trip; anything else in commit metadata is not a marker."""

from __future__ import annotations

import pytest

from actuators.workers.handoff import (
    HANDOFF,
    RETURNED,
    TAKEN,
    Marker,
    handoff_marker,
    parse_marker,
    pool_group_id,
    returned_marker,
    taken_marker,
)


def test_markers_round_trip() -> None:
    assert parse_marker(handoff_marker("big", "a" * 32)) == Marker(HANDOFF, "a" * 32, "big")
    assert parse_marker(taken_marker("b1")) == Marker(TAKEN, "b1")
    assert parse_marker(returned_marker("b1")) == Marker(RETURNED, "b1")
    # with leases: the hand-off's confirm deadline, the pool's lease
    assert parse_marker(handoff_marker("big", "a1", 1_800_000_000_000)) == Marker(
        HANDOFF, "a1", "big", 1_800_000_000_000)  # fmt: skip
    assert parse_marker(taken_marker("b1", 42)) == Marker(TAKEN, "b1", None, 42)


def test_deadlines_and_leases_expire_and_markers_without_them_never_do() -> None:
    lease = Marker(TAKEN, "b1", None, 1000)
    assert not lease.expired(1000) and lease.expired(1001)
    assert not Marker(TAKEN, "b1").expired(2**62)
    handed = parse_marker(handoff_marker("big", "a1", 5000))
    assert handed is not None and handed.is_handoff("a1", "big")
    assert not handed.is_handoff("a2", "big") and not handed.is_handoff("a1", "small")


@pytest.mark.parametrize(
    "metadata",
    [
        None,
        "",
        "x",
        "lagpilot",
        "lagpilot:handoff:big",
        "lagpilot:taken:",
        "other:taken:1",
        "lagpilot:taken:b1:soon",
        "lagpilot:handoff:big:a1:-5",
        "lagpilot:returned:b1:7",
    ],
)
def test_other_metadata_is_not_a_marker(metadata: str | None) -> None:
    assert parse_marker(metadata) is None


def test_pool_names_cannot_break_the_format() -> None:
    with pytest.raises(ValueError, match="pool name"):
        handoff_marker("a:b", "x")
    assert pool_group_id("workers", "big") == "workers.pool.big"
