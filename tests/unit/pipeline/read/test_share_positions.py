"""Share groups as positions (pure): the position is the high watermark less the broker's
lag, never back unless the start offset goes back, re-sent while members are there, and a
share-partition gone for a few reads is deleted."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from pipeline.read.share_positions import (
    GONE_AFTER_READS,
    SharePoller,
    SharePositions,
    group_partition,
)
from schemas import OffsetCommit, OffsetDeleted


@dataclass(frozen=True)
class Part:
    group: str
    topic: str
    partition: int
    start_offset: int
    lag: int | None
    leader_epoch: int = 0


@dataclass(frozen=True)
class Group:
    group: str
    members: int
    partitions: tuple[Part, ...]
    state: str = "Stable"


def one(group: str, start: int, lag: int | None, members: int = 1) -> list[Group]:
    return [Group(group, members, (Part(group, "t", 0, start, lag),))]


# (group, offsets partitions, partition): each from Java 17's String.hashCode() and
# Kafka's Utils.abs, run on the JVM (h = hashCode(); (h == MIN_VALUE ? 0 : |h|) % n)
@pytest.mark.parametrize(
    ("group", "partitions", "expected"),
    [
        ("", 50, 0),
        ("hello", 50, 22),  # 99162322
        ("zzzzzzzzzzzz", 50, 42),  # 1097476992 (the 32-bit product wrapped)
        ("share-workers", 16, 9),  # -1797259065: a negative hash
        ("embeddings", 50, 44),  # -713251844
        ("swarm-share-7", 16, 12),  # -906697100
        ("polygenelubricants", 50, 0),  # Integer.MIN_VALUE, whose abs Kafka takes as 0
        ("é", 16, 9),  # 233: one UTF-16 code unit
        ("😀", 50, 49),  # 1772899: a surrogate pair, two code units
    ],
)
def test_a_group_lands_where_kafka_places_it(group: str, partitions: int, expected: int) -> None:
    assert group_partition(group, partitions) == expected


def test_the_position_is_the_high_watermark_less_the_brokers_lag() -> None:
    sp = SharePositions()
    # start offset 100, 30 records done past it; 200 produced: lag = 200 - 100 - 30 = 70
    out = sp.update(one("g", 100, 70), {("t", 0): 200}, now_ms=1_000)
    assert out == [OffsetCommit("g", "t", 0, 130, 1_000)]


def test_without_the_brokers_lag_the_position_is_the_start_offset() -> None:
    sp = SharePositions()
    assert sp.update(one("g", 100, None), {("t", 0): 200}, 1) == [OffsetCommit("g", "t", 0, 100, 1)]
    sp = SharePositions()  # and without a high watermark
    assert sp.update(one("g", 100, 5), {}, 1) == [OffsetCommit("g", "t", 0, 100, 1)]


def test_the_position_stays_between_the_start_offset_and_the_high_watermark() -> None:
    sp = SharePositions()
    [low] = sp.update(one("g", 100, 150), {("t", 0): 200}, 1)  # lag past the start: clamp
    assert isinstance(low, OffsetCommit) and low.offset == 100
    sp = SharePositions()
    [high] = sp.update(one("g", 100, 0), {("t", 0): 150}, 1)
    assert isinstance(high, OffsetCommit) and high.offset == 150


def test_a_lag_read_against_a_fresher_high_watermark_is_no_rewind() -> None:
    sp = SharePositions()
    sp.update(one("g", 100, 10), {("t", 0): 200}, 1)  # 190
    # a record produced between the lag and the high watermark read: 201 - 12 = 189
    [again] = sp.update(one("g", 100, 12), {("t", 0): 201}, 2)
    assert isinstance(again, OffsetCommit) and again.offset == 190


def test_an_offset_reset_goes_back() -> None:
    sp = SharePositions()
    sp.update(one("g", 100, 10), {("t", 0): 200}, 1)
    [reset] = sp.update(one("g", 0, 200), {("t", 0): 200}, 2)
    assert isinstance(reset, OffsetCommit) and reset.offset == 0


def test_members_resend_a_still_position_an_empty_group_does_not() -> None:
    sp = SharePositions()
    hw = {("t", 0): 200}
    assert len(sp.update(one("g", 100, 50, members=1), hw, 1)) == 1
    assert [r.offset for r in sp.update(one("g", 100, 50, members=1), hw, 2)] == [150]  # type: ignore[union-attr]
    assert sp.update(one("g", 100, 50, members=0), hw, 3) == []
    moved = sp.update(one("g", 120, 30, members=0), hw, 4)
    assert moved == [OffsetCommit("g", "t", 0, 170, 4)]


def test_an_uninitialized_share_partition_is_left_out() -> None:
    assert SharePositions().update(one("g", -1, None), {("t", 0): 5}, 1) == []


def test_a_share_partition_gone_for_some_reads_is_deleted_once() -> None:
    sp = SharePositions()
    sp.update(one("g", 1, 0), {("t", 0): 1}, 1)
    for i in range(GONE_AFTER_READS - 1):
        assert sp.update([], {}, 2 + i) == []  # a read that missed it deletes nothing
    assert sp.update([], {}, 9) == [OffsetDeleted("g", "t", 0)]
    assert sp.update([], {}, 10) == []


def test_a_read_that_finds_it_again_restarts_the_count() -> None:
    sp = SharePositions()
    hw = {("t", 0): 1}
    sp.update(one("g", 1, 0), hw, 1)
    for _ in range(GONE_AFTER_READS - 1):
        sp.update([], {}, 2)
    sp.update(one("g", 1, 0), hw, 3)
    assert all(sp.update([], {}, 4) == [] for _ in range(GONE_AFTER_READS - 1))


def test_a_group_gone_to_another_replica_is_forgotten_without_a_deletion() -> None:
    sp = SharePositions()
    sp.update(one("g", 1, 0), {("t", 0): 1}, 1)
    for _ in range(GONE_AFTER_READS + 1):
        assert sp.update([], {}, 2, owns=lambda group: False) == []
    assert sp.known == {}


class Reader:
    """A reader that answers from a list (the real one is tested against a broker)."""

    def __init__(self, groups: list[Group], served: bool = True) -> None:
        self.groups, self.served, self.closed = groups, served, False

    def read(self) -> list[Group]:
        return self.groups

    def close(self) -> None:
        self.closed = True


def test_the_poller_keeps_only_the_groups_this_replica_owns() -> None:
    groups = one("mine", 10, 5) + one("theirs", 10, 5)
    poller = SharePoller(
        {},
        0.5,
        owns=lambda g: g == "mine",
        reader=Reader(groups),
        high_watermarks=lambda cells: {c: 20 for c in cells},
    )
    assert poller.read_once() is True
    got = poller.take()
    assert got is not None
    assert got.share_groups == {"mine"}
    assert [(r.group, r.offset) for r in got.records] == [("mine", 15)]  # type: ignore[union-attr]
    assert poller.take() is None  # taken


def test_the_high_watermarks_are_read_before_the_lags() -> None:
    """The broker's high watermark at its lag can only be higher than one read before it:
    the position may fall short, never run ahead of the group (a stalled group's position
    crept forward when it was read after)."""
    calls: list[str] = []

    class Logged(Reader):
        def read(self) -> list[Group]:
            calls.append("lags")
            return super().read()

    def hwms(cells: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        calls.append(f"hwms {cells}")
        return {c: 20 for c in cells}

    poller = SharePoller({}, 0.5, lambda g: True, reader=Logged(one("g", 10, 5)),
                         high_watermarks=hwms)  # fmt: skip
    poller.read_once()
    poller.read_once()
    # the first read meets the cell, so its high watermark comes after (once); then before
    assert calls == ["lags", "hwms [('t', 0)]", "hwms [('t', 0)]", "lags"]


def test_a_broker_without_share_groups_says_so() -> None:
    poller = SharePoller({}, 0.5, owns=lambda g: True, reader=Reader([], served=False))
    assert poller.read_once() is False
    assert poller.take() is None
    poller.stop()
    assert poller._reader.closed


def test_an_empty_groups_waiting_partitions_are_released_to_nobody() -> None:
    from pipeline.read.share_positions import release_report, unconsumed
    from schemas import validate

    groups = [
        Group("empty", 0, (Part("empty", "t", 0, 10, 5), Part("empty", "t", 1, 10, 0),
                           Part("empty", "t", 2, -1, None), Part("empty", "t", 3, 4, None))),
        Group("busy", 2, (Part("busy", "t", 0, 10, 5),)),
    ]  # fmt: skip
    # caught up (lag 0) and not initialized (-1) wait for nothing; an unknown lag may
    assert unconsumed(groups) == {"empty": [("t", 0), ("t", 3)]}
    report = release_report("empty", [("t", 0), ("t", 3)], 1_000, 500)
    validate(report)
    assert report["released"] == [["t", 0], ["t", 3]] and report["partitions"] == []


def test_the_poller_hands_on_the_latest_reads_empty_groups() -> None:
    groups = one("g", 10, 5, members=0)
    poller = SharePoller({}, 0.5, lambda g: True, reader=Reader(groups),
                         high_watermarks=lambda cells: {c: 20 for c in cells})  # fmt: skip
    poller.read_once()
    got = poller.take()
    assert got is not None and got.unconsumed == {"g": [("t", 0)]}
    poller.read_once()  # nothing moved, nobody there: no position, the release again
    again = poller.take()
    assert again is not None and again.records == [] and again.unconsumed == {"g": [("t", 0)]}
