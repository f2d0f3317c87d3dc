"""The parser of Kafka's ShareGroupCommand describe table, on output captured from a real
run (tests/support/fixtures/share_group_describe_all_4.4.0.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.share_group_command import DescribedPartition, parse_describe

FIXTURE = Path(__file__).resolve().parents[2] / "support" / "fixtures"


def test_the_captured_all_groups_output() -> None:
    rows = parse_describe((FIXTURE / "share_group_describe_all_4.4.0.txt").read_text())
    assert len(rows) == 8
    assert rows[0] == DescribedPartition("sg-fixture-g", "sg-fixture", 0, None, None)
    assert rows[3:6] == [
        DescribedPartition("sg-fixture-g2", "sg-fixture", 0, 70, 0),
        DescribedPartition("sg-fixture-g2", "sg-fixture", 1, 70, 7),
        DescribedPartition("sg-fixture-g2", "sg-fixture", 2, None, None),
    ]
    assert rows[-1] == DescribedPartition("sg-g1", "sg-probe", 1, 0, 0)


def test_a_group_without_offsets_has_no_row() -> None:
    # captured from the same tools, a group whose consumer had no partition yet
    assert parse_describe("\nShare group 'sg-g1' has no offset information.\n") == []


def test_a_changed_table_is_an_error_not_a_guess() -> None:
    with pytest.raises(ValueError, match="unexpected ShareGroupCommand header"):
        parse_describe("GROUP TOPIC PARTITION START-OFFSET LAG LEADER-EPOCH\n")
    with pytest.raises(ValueError, match="cells"):
        parse_describe("GROUP TOPIC PARTITION START-OFFSET LAG\ng t 0 5\n")
