"""The commit table: plain commits taken as bytes, decoded at a drain, last in the log wins."""

from __future__ import annotations

import pytest

from bench.support import layout_codec
from pipeline.read import commit_table
from pipeline.read.commit_table import DELETED, CommitTable, Record, commit_key


def _value(version: int, offset: int, ts: int) -> bytes:
    return layout_codec.encode(
        "OffsetCommitValue", version, offset=offset, leader_epoch=3, metadata="",
        commit_timestamp=ts, expire_timestamp=-1,
    )  # fmt: skip


def _rows(table: CommitTable) -> dict[str, list[tuple[str, int, int, int]]]:
    out = {}
    for topic, c in table.drain().items():
        out[topic] = sorted(
            (c.groups[g], p, o, t)
            for g, p, o, t in zip(c.group, c.partition, c.offset, c.commit_ts_ms, strict=True)
        )
    return out


def test_both_value_versions_in_one_batch_each_by_its_own_layout() -> None:
    t = CommitTable()
    msgs = [
        Record(commit_key("g", "t", 0), _value(3, 10, 100)),
        Record(commit_key("g", "t", 1), _value(1, 11, 101)),
        Record(commit_key("h", "u", 0), _value(3, 12, 102)),
    ]
    assert t.take_many(msgs, 0) == 3
    assert _rows(t) == {"t": [("g", 0, 10, 100), ("g", 1, 11, 101)], "u": [("h", 0, 12, 102)]}
    assert t.drain() == {}  # nothing since


def test_the_last_record_of_a_key_wins_and_a_deletion_in_between_is_undone() -> None:
    t = CommitTable()
    key = commit_key("g", "t", 0)
    t.take_many([Record(key, _value(3, 10, 100))], 0)
    t.add("t", "g", 0, DELETED, 0)  # a tombstone, decoded the careful way
    t.take_many([Record(key, _value(3, 9, 99))], 0)  # then a commit (even an older ts)
    (c,) = t.drain().values()
    assert (c.offset, c.deleted) == ([9], [])
    t.take_many([Record(key, _value(3, 12, 120))], 0)
    t.add("t", "g", 0, DELETED, 0)
    (c,) = t.drain().values()
    assert (c.offset, c.deleted) == ([], [["g", 0]])
    assert t.known() == {} and t.resend_known() == 0


def test_a_resend_queues_every_live_known_commit_once_with_what_is_pending() -> None:
    t = CommitTable()
    t.take_many([Record(commit_key("g", "t", p), _value(3, p, 100)) for p in range(3)], 0)
    t.drain()
    t.take_many([Record(commit_key("g", "t", 1), _value(3, 50, 200))], 0)
    t.add("t", "g", 2, DELETED, 0)
    assert t.resend_known() == 2  # p0 (known) and p1 (pending), not p2 (deleted)
    (c,) = t.drain().values()
    assert sorted(zip(c.partition, c.offset, strict=True)) == [(0, 0), (1, 50)]
    assert c.deleted == [["g", 2]]


def test_commits_of_tracked_groups_are_handed_on_in_read_order_careful_ones_not() -> None:
    t = CommitTable()
    t.tracked = {"g": object()}
    t.take_many([Record(commit_key("g", "t", 0), _value(3, 5, 10))], 0)
    t.take_many([Record(commit_key("h", "t", 0), _value(3, 6, 11))], 0)
    t.add("t", "g", 1, 7, 12)  # the caller gave this one to group health itself
    t.take_many([Record(commit_key("g", "t", 0), _value(1, 8, 13))], 0)
    assert t.take_tracked() == [(("t", "g", 0), 5, 10), (("t", "g", 0), 8, 13)]
    assert t.take_tracked() == []


def test_the_fast_path_stops_at_what_it_does_not_take() -> None:
    t = CommitTable(own_prefix="lagpilot")
    key = commit_key("g", "t", 0)
    with_metadata = layout_codec.encode(
        "OffsetCommitValue", 3, offset=1, leader_epoch=3, metadata="m",
        commit_timestamp=1, expire_timestamp=-1,
    )  # fmt: skip
    bad_length = bytearray(_value(3, 1, 1))
    bad_length[15] = 1  # says one byte of metadata in a 24-byte value: malformed
    msgs = [
        Record(commit_key("lagpilot.me", "t", 0), _value(3, 1, 1)),  # own: dropped
        Record(key, _value(3, 1, 1)),
        Record(key, None),  # a tombstone
        Record(key, with_metadata),
        Record(key, bytes(bad_length)),
        Record(key, _value(4, 1, 1)),  # v4, flexible
        Record(b"\x00\x00" + key[2:], _value(3, 1, 1)),  # a type 0 key
        Record(key[:-1], _value(3, 1, 1)),  # a malformed key
        Record(None, b"x"),  # an error message has neither
    ]
    stops, i = [], 0
    while (i := t.take_many(msgs, i)) < len(msgs):
        stops.append(i)
        i += 1
    assert stops == [2, 3, 4, 5, 6, 7, 8]
    assert t.take_counts() == (1, 1)


def test_slots_of_deleted_group_partitions_go_when_the_table_is_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cluster that churns through groups: the table keeps the live slots (and what is
    pending) and numbers them anew; nothing read is lost."""
    monkeypatch.setattr(commit_table, "MAX_SLOTS", 8)
    t = CommitTable()
    for i in range(30):
        t.take_many([Record(commit_key(f"g{i}", "t", 0), _value(3, i, i))], 0)
        if i % 2:
            t.add("t", f"g{i}", 0, DELETED, 0)
        if i % 5 == 4:
            t.drain()
    t.take_many([Record(commit_key("g0", "t", 0), _value(3, 100, 100))], 0)
    assert len(t._key_of) <= 2 * len(t.known()) + 2  # live ones, and what was pending
    known = t.known()
    t.drain()
    assert t.known() == {**known, ("t", "g0", 0): (100, 100)}
    assert set(t.known()) == {("t", f"g{i}", 0) for i in range(0, 30, 2)}


def test_a_batch_that_fills_the_table_loses_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(commit_table, "MAX_SLOTS", 4)
    t = CommitTable()
    msgs = [Record(commit_key(f"g{i}", "t", 0), _value(3, i, i)) for i in range(20)]
    assert t.take_many(msgs, 0) == 20
    assert _rows(t) == {"t": sorted((f"g{i}", 0, i, i) for i in range(20))}


def test_a_partial_resend_goes_round_every_live_group_partition_evenly() -> None:
    t = CommitTable()
    t.take_many([Record(commit_key("g", "t", p), _value(3, p, 100)) for p in range(10)], 0)
    t.add("t", "g", 3, DELETED, 0)
    t.drain()
    seen: list[int] = []
    for _ in range(5):  # a fifth at a time: 2 slots a call
        t.resend_known(share=0.2)
        (c,) = t.drain().values()
        assert len(c.partition) <= 2
        seen += c.partition
    assert sorted(seen) == [p for p in range(10) if p != 3]  # each once, not the deleted
