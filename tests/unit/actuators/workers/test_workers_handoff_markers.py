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


@pytest.mark.parametrize(
    "metadata",
    [None, "", "x", "lagpilot", "lagpilot:handoff:big", "lagpilot:taken:", "other:taken:1"],
)
def test_other_metadata_is_not_a_marker(metadata: str | None) -> None:
    assert parse_marker(metadata) is None


def test_pool_names_cannot_break_the_format() -> None:
    with pytest.raises(ValueError, match="pool name"):
        handoff_marker("a:b", "x")
    assert pool_group_id("workers", "big") == "workers.pool.big"
