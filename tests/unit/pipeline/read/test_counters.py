"""The readers' counters: cumulative totals per run -> increases, and their queue."""

from __future__ import annotations

import multiprocessing

import pytest

from pipeline.read.counters import MAX_QUEUED, CounterChannel, RunTotals


def test_increases_within_a_run_and_from_zero_in_a_new_one():
    t = RunTotals()
    assert t.increase("a", {"commit": 10, "batches": 2}) == {"commit": 10, "batches": 2}
    assert t.increase("a", {"commit": 15, "batches": 2}) == {"commit": 5}
    assert t.increase("a", {"commit": 12}) == {}  # never a negative increase
    assert t.increase("b", {"commit": 3}) == {"commit": 3}


def test_two_sources_interleaved_would_count_again_at_each_change_of_run():
    # why each replica folds only its own source's totals (one queue per source): the
    # header path this replaced saw both replicas' runs alternate and counted 1 drop 3 times
    t = RunTotals()
    counted = sum(
        sum(t.increase(run, {"dropped": 1}).values()) for run in ("a", "b", "a", "b", "a")
    )
    assert counted == 5
    own = RunTotals()
    assert sum(sum(own.increase("a", {"dropped": 1}).values()) for _ in range(3)) == 1


def _send(channel: CounterChannel, n: int) -> None:
    for i in range(n):
        channel.send("child", {"commit": i + 1})


def test_totals_cross_from_a_spawned_process_and_a_full_queue_never_blocks_the_sender():
    channel = CounterChannel()
    proc = multiprocessing.get_context("spawn").Process(
        target=_send, args=(channel, MAX_QUEUED + 50)
    )
    proc.start()
    proc.join(30)
    assert proc.exitcode == 0  # it did not wait for a reader: the extra totals were dropped
    got = []
    while (item := channel.receive(timeout_s=1.0)) is not None:
        got.append(item)
    assert got[0] == ("child", {"commit": 1})
    assert 0 < len(got) <= MAX_QUEUED
    assert [t["commit"] for _, t in got] == sorted(t["commit"] for _, t in got)
    assert channel.receive(timeout_s=0.01) is None


def test_a_closed_channel_says_so_instead_of_raising_its_queues_error():
    channel = CounterChannel()
    channel.close()
    with pytest.raises(EOFError):
        channel.receive(timeout_s=0.01)
