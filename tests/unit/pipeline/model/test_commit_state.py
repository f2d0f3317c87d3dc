"""What commits change in the lag model (``pipeline.model.commit_state``): one at a time and
in batches, late, forgotten, or to partitions the topic cannot have."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.model.config import LagConfig
from pipeline.model.lag import TopicModel

CFG = LagConfig()


def test_forgotten_offsets_prune_the_group():
    m = TopicModel("t", CFG)
    m.commit("g", 0, 5, 1_000)
    m.forget("g", 0)
    assert "g" not in m.groups


def test_a_late_commit_corrects_the_window_rows_after_it():
    m = TopicModel("t", CFG)
    for i in range(8):
        t = 1_000 + i * 250
        if i < 4:
            m.commit("g", 0, i * 25, t)
        m.add_sample(t, [i * 50])
        m.observe(t)
    # commits made at 2_000 and 2_500 arrive only now (after a restart, replayed late)
    m.commit("g", 0, 100, 2_000)
    m.commit("g", 0, 125, 2_500)
    assert list(m.w_c[0, m.w_t >= 2_500, 0]) == [125, 125]
    assert list(m.w_c[0, (m.w_t >= 2_000) & (m.w_t < 2_500), 0]) == [100, 100]


commit_rows = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.one_of(st.integers(0, 3), st.just(100_000)),  # one the topic cannot have
        st.integers(0, 50),
        st.integers(900, 2_600),
    ),
    max_size=12,
    unique_by=lambda r: (r[0], r[1]),  # as the commits source coalesces them
)


@settings(max_examples=150, deadline=None)
@given(st.lists(commit_rows, min_size=1, max_size=4))
def test_a_commit_batch_does_what_its_commits_do_one_at_a_time(batches):
    one, many = TopicModel("t", CFG), TopicModel("t", CFG)
    t = 1_000
    for m in (one, many):  # a window with rows, so late commits correct them
        for i in range(8):
            m.add_sample(t + i * 250, [60, 60, 60, 60])
            m.observe(t + i * 250)
    for batch in batches:
        for row in batch:
            one.commit(*row)
        before = {n: many.position_state(n) for n in many.groups}
        touched = many.commit_many([list(r) for r in batch])
        assert touched <= {r[0] for r in batch if r[1] < 100_000}  # the rejected touch none
        for name in set(before) - touched:  # what it does not name, it did not change
            assert many.position_state(name) == before[name], name
    # the source re-sends what it knows: a repeat of the last batch touches nothing
    for row in batches[-1]:
        one.commit(*row)
    assert many.commit_many([list(r) for r in batches[-1]]) == set()
    assert one.groups == many.groups
    assert one.rejected_commits == many.rejected_commits
    for k in ("committed", "commit_ms", "progress_ms", "rewind_ms", "w_c"):
        assert np.array_equal(getattr(one, k), getattr(many, k)), k
    assert np.allclose(one.interval_s, many.interval_s, equal_nan=True)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]),
            st.integers(0, 2),
            st.integers(0, 50),
            st.integers(900, 2_600),
        ),
        min_size=2,
        max_size=10,
    )
)
def test_a_batch_naming_a_cell_twice_does_what_its_commits_do_in_order(batch):
    """A batch that was not coalesced (v1 rows replayed) may name a group-partition more
    than once: it is found (``_repeats``) and applied one commit at a time, in order."""
    one, many = TopicModel("t", CFG), TopicModel("t", CFG)
    for m in (one, many):
        m.add_sample(1_000, [60, 60, 60])
        m.observe(1_000)
    for row in batch:
        one.commit(*row)
    many.commit_many([list(r) for r in batch])
    for k in ("committed", "commit_ms", "progress_ms", "rewind_ms"):
        assert np.array_equal(getattr(one, k), getattr(many, k)), k


def test_repeats_finds_a_cell_named_twice_and_only_then():
    m = TopicModel("t", CFG)
    assert not m.positions.repeats(np.array([3, 0, 7, 1]), 8)
    assert m.positions.repeats(np.array([3, 0, 7, 3]), 8)
    assert m.positions.repeats(np.array([5, 5]), 8)
    assert not m.positions.repeats(np.array([], np.int64), 8)
    assert not m.positions.repeats(
        np.arange(1_000)[::-1], 1_000
    )  # the scratch grows with the cells
    assert m.positions.repeats(np.array([999, 0, 999]), 1_000)


def test_commits_to_partitions_the_topic_cannot_have_are_counted_not_allocated():
    """Garbage decoded as a commit to partition ~2**31 once made the model ask for 270 GiB
    (bench/faults/rows.py row 6b): it is dropped and counted; true commits beside it apply."""
    from pipeline.model.lag import MAX_PARTITIONS_UNSAMPLED

    m = TopicModel("t", CFG)
    m.commit_many([["g", 0, 5, 1_000], ["g", 2_147_483_000, 9, 1_000], ["g", -3, 1, 1_000]])
    m.commit("g", MAX_PARTITIONS_UNSAMPLED, 1, 1_000)  # before any sample: the fixed bound
    assert m.rejected_commits == 3 and m.committed.shape[1] == 1
    m.add_sample(1_000, [5, 7])
    m.commit("g", 100, 1, 1_100)  # beyond max(2 x 2 sampled partitions, 64)
    m.commit_many([["g", 1, 3, 1_100], ["h", 500, 2, 1_100]])
    assert m.rejected_commits == 5 and m.committed.shape[1] == 2
    m.add_sample(1_250, [5, 7])
    (o,) = m.observe(1_250)
    assert list(o.partitions) == [0, 1] and list(o.lag) == [0, 4]


def test_positions_round_trip_and_the_layout_of_earlier_releases_still_loads():
    """A group's positions as the store holds them: written now (two encodings), and as
    releases before wrote them (one per column; the oldest without read_offset/read_ms)."""
    from pipeline.model.arrays import encode

    m = TopicModel("t", CFG)
    for i, (offset, ts) in enumerate([(10, 1_000), (30, 1_500), (25, 2_000), (40, 2_600)]):
        m.commit("g", i % 3, offset, ts)
    m.commit("g", 0, 55, 3_000)
    m.record_read("g", 0, 55, 2_950)
    state = m.position_state("g")
    assert set(state) == {"width", "cols", "interval_s"}
    old = {"width": m._width} | {
        k: encode(getattr(m, k)[0])
        for k in ("committed", "commit_ms", "progress_ms", "interval_s", "rewind_ms")
    }
    for written in (state, old):
        back = TopicModel("t", CFG)
        back.load_position_state("g", written)
        for k in ("committed", "commit_ms", "progress_ms", "rewind_ms"):
            assert np.array_equal(getattr(back, k), getattr(m, k)), k
        assert np.allclose(back.interval_s, m.interval_s, equal_nan=True)
        assert np.array_equal(back.read_offset, m.read_offset if written is state else [[-1] * 3])


def test_the_commit_state_works_by_row_without_the_model():
    """``CommitState`` holds the arrays alone: its owner gives it rows and columns; a batch
    applied as array work ends where the same commits applied one at a time do."""
    from pipeline.model.commit_state import CommitState
    from pipeline.model.window import RateWindow

    one, many, win = CommitState(CFG), CommitState(CFG), RateWindow()
    for s in (one, many):
        s.add_rows(2)
        s.widen(3)
    cells = [(0, 0, 10, 1_000), (1, 2, 7, 1_000), (0, 1, 3, 1_100)]
    for g, p, off, ts in cells:
        one.apply(g, p, off, ts, win)
    g, p, off, ts = (np.array(c, np.int64) for c in zip(*cells, strict=True))
    assert many.apply_cells(g, p, off, ts, win).all()
    assert np.array_equal(one.committed, many.committed)
    assert not many.apply_cells(g, p, off, ts, win).any()  # the same again: nothing fresh
    assert many.any_commit(0) and many.any_commit(1)
    many.clear(1, 2)
    assert not many.any_commit(1)
    many.drop_row(1)
    assert many.committed.shape == (1, 3)
