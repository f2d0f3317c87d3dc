"""Samples held until the commits before them are read (``PendingSamples``, pure)."""

from __future__ import annotations

from pipeline.read.sampler_process import PendingSamples, later_ends, read_up_to
from pipeline.read.watermarks import ENDS_FIELD, Tick


def tick(ms: int) -> Tick:
    return (ms, [("orders", b"{}")], {"tick": ms, "errors": 0, "by_kind": {}, "sample_ms": 1.0})


def test_a_sample_waits_until_the_commits_are_read_through_its_time() -> None:
    p = PendingSamples(timeout_s=1.0)
    p.add(tick(1_000), now_s=0.0)
    p.add(tick(1_250), now_s=0.25)
    assert p.wanted_ms == 1_250
    assert p.due(read_through_ms=999, now_s=0.3) == []
    assert [t[0] for t in p.due(read_through_ms=1_100, now_s=0.3)] == [1_000]
    assert [t[0] for t in p.due(read_through_ms=1_250, now_s=0.3)] == [1_250]
    assert p.wanted_ms == 0 and p.dropped == 0


def test_samples_keep_their_order_and_a_stale_one_is_dropped_and_counted() -> None:
    p = PendingSamples(timeout_s=1.0)
    p.add(tick(1_000), now_s=0.0)
    p.add(tick(1_250), now_s=0.9)
    # the reader fell behind: the first waited too long, the second still may go out
    assert p.due(read_through_ms=0, now_s=1.2) == []
    assert p.dropped == 1
    assert [t[0] for t in p.due(read_through_ms=1_300, now_s=1.3)] == [1_250]


def ended(ms: int, ends: list[int]) -> Tick:
    """A tick whose round also asked where each offsets partition ends."""
    sampled_at, messages, fields = tick(ms)
    return (sampled_at, messages, {**fields, ENDS_FIELD: ends})


def test_a_tick_with_ends_waits_for_the_positions_not_for_the_cached_watermarks() -> None:
    """The overload case: the reader found itself at the end of its last fetch responses
    (read_through_ms past the tick) while commits written before the sample still wait in
    the broker. The tick waits until every assigned partition's position reaches its end."""
    t = ended(1_000, [50, 70, 90])
    assert read_up_to(t, read_through_ms=2_000, positions={0: 50, 1: 69}) is False
    assert read_up_to(t, read_through_ms=0, positions={0: 50, 1: 70}) is True  # partition 2
    assert read_up_to(t, read_through_ms=0, positions={0: 51, 1: 75, 2: 90}) is True  # not ours


def test_without_ends_or_positions_the_time_read_through_decides() -> None:
    # a partition whose end did not answer (-1), one beyond the list, no positions, no ends
    for t, positions in (
        (ended(1_000, [50, -1]), {0: 50, 1: 10}),
        (ended(1_000, [50]), {0: 50, 1: 10}),
        (ended(1_000, [50]), None),
        (tick(1_000), {0: 50}),
    ):
        assert read_up_to(t, read_through_ms=999, positions=positions) is False
        assert read_up_to(t, read_through_ms=1_000, positions=positions) is True


def test_the_reader_s_other_topics_must_be_read_through_too() -> None:
    """Workers' progress reports (another topic of the reader) have no ends: for those, the
    time the reader was last found at the end of what it fetched."""
    t = ended(1_000, [5])
    assert read_up_to(t, 0, {0: 5}, others_through_ms=999) is False
    assert read_up_to(t, 0, {0: 5}, others_through_ms=1_000) is True


def test_pending_samples_release_ticks_in_order_as_positions_reach_their_ends() -> None:
    p = PendingSamples(timeout_s=1.0)
    p.add(ended(1_000, [10, 20]), now_s=0.0)
    p.add(ended(1_250, [15, 20]), now_s=0.25)
    assert p.due(read_through_ms=5_000, now_s=0.3, positions={0: 9, 1: 20}) == []
    assert [t[0] for t in p.due(0, 0.3, positions={0: 12, 1: 20})] == [1_000]
    # behind for longer than the timeout: dropped and counted, never released early
    assert p.due(5_000, 1.3, positions={0: 12, 1: 20}) == [] and p.dropped == 1


def test_held_ticks_are_exact_only_while_each_carries_every_end() -> None:
    """Exact ticks need no read-through time: the reader skips that check while they wait."""
    p = PendingSamples(timeout_s=1.0)
    assert p.exact  # nothing held
    p.add(ended(1_000, [10, 20]), now_s=0.0)
    assert p.exact
    p.add(ended(1_250, [10, -1]), now_s=0.25)  # a partition whose end did not answer
    assert not p.exact
    p.due(0, 0.3, positions={0: 10, 1: 20})  # the first goes; the second waits
    assert not p.exact
    p.due(1_250, 0.3, positions={0: 10, 1: 20})
    p.add((1_500, [], {}), now_s=0.5)  # a tick with no ends at all
    assert not p.exact


def test_a_reader_assigned_no_offsets_partition_releases_no_sample() -> None:
    """A rebalance that takes every partition leaves no position: no commit is read, so a
    held sample waits (and is dropped), rather than every one going out at once."""
    assert read_up_to(ended(1_000, [10, 20]), read_through_ms=5_000, positions={}) is False
    assert read_up_to((1_000, [], {ENDS_FIELD: [10]}), 0, positions={}) is True  # no samples
    p = PendingSamples(timeout_s=1.0)
    p.add(ended(1_000, [10, 20]), now_s=0.0)
    assert p.due(5_000, 0.5, positions={}) == []
    assert p.due(5_000, 1.5, positions={}) == [] and p.dropped == 1


def test_a_missing_end_is_taken_from_the_next_later_round_that_has_it() -> None:
    ticks = [ended(1_000, [5, -1]), ended(1_250, [6, -1]), tick(1_400), ended(1_500, [7, 30])]
    assert later_ends(ticks) == [[5, 30], [6, 30], None, [7, 30]]
    assert later_ends([ended(1_000, [5, -1])]) == [[5, -1]]  # nothing later: still unknown


def test_a_sample_whose_end_did_not_answer_waits_for_a_later_round_not_the_cached_time() -> None:
    """Under load a read_committed answer can miss the round's wait. The cached rule would
    release such a tick as soon as the reader reached its last fetch responses' ends (the
    rule that showed healthy groups as stopped); it waits for the next round's end."""
    p = PendingSamples(timeout_s=1.0)
    p.add(ended(1_000, [10, -1]), now_s=0.0)
    assert p.due(read_through_ms=5_000, now_s=0.1, positions={0: 10, 1: 20}) == []
    p.add(ended(1_250, [11, 25]), now_s=0.25)
    assert p.due(5_000, 0.3, positions={0: 11, 1: 24}) == []  # 25 not reached yet
    assert [t[0] for t in p.due(0, 0.3, positions={0: 11, 1: 25})] == [1_000, 1_250]
    assert p.dropped == 0


def test_an_end_missing_longer_than_the_timeout_goes_by_the_time_read_through() -> None:
    """A broker that never answers read_committed must not stop every sample."""
    p = PendingSamples(timeout_s=1.0)
    for i in range(6):
        p.add(ended(1_000 + 250 * i, [10, -1]), now_s=0.25 * i)
    released = p.due(2_250, 1.3, positions={0: 10, 1: 20})
    assert [t[0] for t in released] == [1_000 + 250 * i for i in range(6)]
    p.add(ended(2_500, [10, -1]), now_s=1.5)
    assert p.due(2_000, 1.6, positions={0: 10, 1: 20}) == []  # not read through its time yet
