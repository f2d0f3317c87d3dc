"""The readers of Kafka's own group commands (tests/support/kafka_tools.py), on what the 4.4.0
tools printed against a real broker: each file in ``kafka_tools_output/`` says in its header
how and when it was captured, then holds the command's stderr and stdout as printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.kafka_tools import (
    ConsumerGroupRow,
    ShareGroupRow,
    parse_consumer_groups,
    parse_share_groups,
)

OUTPUT = Path(__file__).resolve().parent / "kafka_tools_output"
T = "cap-orders"


def captured(name: str) -> tuple[str, str]:
    """(stdout, stderr) of a capture."""
    text = (OUTPUT / name).read_text()
    _, _, rest = text.partition("# ---- stderr\n")
    stderr, _, stdout = rest.partition("# ---- stdout\n")
    assert stdout, f"{name} holds no stdout section"
    return stdout, stderr


def joined(name: str) -> str:
    """The two streams as ``describe_*`` hands them to the parser: stderr, then stdout."""
    stdout, stderr = captured(name)
    return stderr + "\n" + stdout


def test_a_group_without_members_has_its_committed_partitions_and_is_named_inactive() -> None:
    d = parse_consumer_groups(joined("consumer_group_inactive.txt"))
    assert d.inactive == {"cap-classic"}
    assert d.rows == {
        ("cap-classic", T, 0): ConsumerGroupRow(
            "cap-classic", T, 0, 100, 110, 10, None, None, None
        ),
        ("cap-classic", T, 1): ConsumerGroupRow("cap-classic", T, 1, 50, 110, 60, None, None, None),
    }  # partition 2: never committed, no member, so no row at all
    assert d.lags("cap-classic") == {(T, 0): 10, (T, 1): 60}


def test_a_group_id_with_a_space_stays_one_cell_and_dashes_read_as_none() -> None:
    group = "cap 848 with a space"  # its column is exactly as wide as the id: one space after
    d = parse_consumer_groups(joined("consumer_group_active.txt"))
    assert d.inactive == set()
    assert d.lags(group) == {(T, 0): 80, (T, 1): 10, (T, 2): None}
    p2 = d.rows[(group, T, 2)]
    assert (p2.current_offset, p2.log_end_offset, p2.lag) == (None, 110, None)
    assert p2.consumer_id == "HEZAK2lkTDSlXzITjUFMLg"
    assert (p2.host, p2.client_id) == ("/127.0.0.1", "rdkafka")


@pytest.mark.parametrize("name", ["consumer_groups_two.txt", "consumer_groups_all.txt"])
def test_every_table_of_several_groups_is_read_each_at_its_own_widths(name: str) -> None:
    d = parse_consumer_groups(joined(name))
    long = "cap-a-group-id-longer-than-fifteen"
    assert d.lags(long) == {(T, 2): 103}
    assert d.rows[(long, T, 2)].current_offset == 7
    assert d.lags("cap-classic") == {(T, 0): 10, (T, 1): 60}
    assert {long, "cap-classic"} <= d.inactive
    if name == "consumer_groups_all.txt":
        assert d.lags("cap 848 with a space") == {(T, 0): 80, (T, 1): 10, (T, 2): None}
        assert d.lags("__lagpilot_ready") == {("__lagpilot_ready", 0): 0}
        assert len(d.rows) == 7
    else:
        assert len(d.rows) == 3


def test_the_streams_joined_the_other_way_read_the_same() -> None:
    """The preface, wherever it lands (stderr after stdout, as a terminal may show it), is
    no row and names the group."""
    stdout, stderr = captured("consumer_group_inactive.txt")
    other = parse_consumer_groups(stdout + stderr)
    assert other.rows == parse_consumer_groups(joined("consumer_group_inactive.txt")).rows
    assert other.inactive == {"cap-classic"}


def test_a_value_wider_than_its_column_falls_back_to_the_words() -> None:
    stdout, _ = captured("consumer_group_inactive.txt")
    wide = stdout.replace("100             110", "12345678901234567 12345678901234599")
    assert wide != stdout
    row = parse_consumer_groups(wide).rows[("cap-classic", T, 0)]
    assert (row.current_offset, row.log_end_offset, row.lag) == (
        12345678901234567,
        12345678901234599,
        10,
    )


def test_a_row_that_fits_no_column_is_an_error_naming_it() -> None:
    stdout, _ = captured("consumer_group_inactive.txt")
    broken = stdout.replace("100             110", "100 extra words 110")
    with pytest.raises(ValueError, match="does not fit the columns: '100 extra words'"):
        parse_consumer_groups(broken)


def test_a_share_group_has_its_start_offset_and_lag_per_partition() -> None:
    d = parse_share_groups(joined("share_group.txt"))
    assert d.rows == {
        ("cap-share", T, 0): ShareGroupRow("cap-share", T, 0, 0, 10),
        ("cap-share", T, 1): ShareGroupRow("cap-share", T, 1, 50, 60),
        ("cap-share", T, 2): ShareGroupRow("cap-share", T, 2, 0, 110),
    }
    # a share group's lag is not log end - start offset: partition 0's 100 acknowledged
    # records count as delivered while its start offset still stands at 0
    assert d.lags("cap-share") == {(T, 0): 10, (T, 1): 60, (T, 2): 110}


def test_verbose_adds_the_leader_epoch_and_changes_nothing_else() -> None:
    plain = parse_share_groups(joined("share_group.txt"))
    verbose = parse_share_groups(joined("share_group_verbose.txt"))
    assert {k: r.leader_epoch for k, r in verbose.rows.items()} == dict.fromkeys(plain.rows, 0)
    assert verbose.lags("cap-share") == plain.lags("cap-share")
    assert {k: r.start_offset for k, r in verbose.rows.items()} == {
        k: r.start_offset for k, r in plain.rows.items()
    }


def test_each_reader_refuses_the_other_commands_table() -> None:
    with pytest.raises(ValueError, match="ConsumerGroupCommand"):
        parse_consumer_groups(joined("share_group.txt"))
    with pytest.raises(ValueError, match="ShareGroupCommand"):
        parse_share_groups(joined("consumer_group_active.txt"))


def test_every_share_group_at_once_with_partitions_not_initialized() -> None:
    d = parse_share_groups(joined("share_groups_all.txt"))
    assert len(d.rows) == 8
    f = "sg-fixture"
    assert d.rows[("sg-fixture-g", f, 0)] == ShareGroupRow("sg-fixture-g", f, 0, None, None)
    assert d.lags("sg-fixture-g2") == {(f, 0): 0, (f, 1): 7, (f, 2): None}
    assert d.rows[("sg-fixture-g2", f, 1)].start_offset == 70
    assert d.rows[("sg-g1", "sg-probe", 1)] == ShareGroupRow("sg-g1", "sg-probe", 1, 0, 0)


def test_a_share_group_without_offsets_has_no_row() -> None:
    # as the 4.4.0 tools print a group whose consumer had no partition yet
    assert parse_share_groups("\nShare group 'sg-g1' has no offset information.\n").rows == {}
