"""The commit position never passes an unfinished message, whatever order lanes finish in."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actuators.workers import OffsetTracker


def test_position_waits_for_the_first_unfinished_offset() -> None:
    t = OffsetTracker()
    for o in (10, 11, 12):
        t.delivered(o)
    t.done(12)
    t.done(11)
    assert t.position == 10
    t.done(10)
    assert t.position == 13


def test_gaps_from_compaction_are_not_missing_messages() -> None:
    t = OffsetTracker()
    for o in (5, 9, 20):
        t.delivered(o)
    t.done(5)
    assert t.position == 9
    t.done(9)
    t.done(20)
    assert t.position == 21


def test_forget_after_keeps_position_below_abandoned_work() -> None:
    t = OffsetTracker()
    for o in (1, 2, 3, 4):
        t.delivered(o)
    t.forget_after(2)  # 2 was queued and abandoned; 3, 4 were on other lanes
    t.done(4)  # finishes late: must not move the position past 2
    t.done(1)
    assert t.position == 2
    t.delivered(2)  # redelivered
    t.done(2)
    assert t.position == 3


def test_offsets_must_ascend() -> None:
    t = OffsetTracker()
    t.delivered(3)
    with pytest.raises(ValueError, match="ascend"):
        t.delivered(3)


@given(st.integers(1, 60), st.randoms(use_true_random=False))
def test_position_is_first_unfinished_for_any_completion_order(n: int, rnd) -> None:
    offsets = sorted(rnd.sample(range(1000), n))
    t = OffsetTracker()
    for o in offsets:
        t.delivered(o)
    order = offsets[:]
    rnd.shuffle(order)
    finished: set[int] = set()
    for o in order:
        t.done(o)
        finished.add(o)
        unfinished = [x for x in offsets if x not in finished]
        want = unfinished[0] if unfinished else offsets[-1] + 1
        assert t.position == want


@given(st.lists(st.tuples(st.sampled_from(["deliver", "done", "forget"]), st.integers(0, 40))))
def test_in_flight_counts_delivered_unfinished_offsets(ops: list[tuple[str, int]]) -> None:
    """The kept count equals a recount of delivered, unfinished, not forgotten offsets,
    whatever order deliveries, completions (repeats, unknown offsets) and forgets come in."""
    t = OffsetTracker()
    unfinished: set[int] = set()
    last = -1
    for op, n in ops:
        if op == "deliver":
            last += 1 + n % 3  # ascending, with gaps
            t.delivered(last)
            unfinished.add(last)
        elif op == "done":
            t.done(n)
            unfinished.discard(n)
        else:
            t.forget_after(n)
            unfinished = {o for o in unfinished if o < n}
        assert t.in_flight == len(unfinished)
