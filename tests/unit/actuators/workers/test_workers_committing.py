"""Backpressure and commits on the poll thread (committing.py), without a broker: a
partition whose lanes fill up is paused and resumed once drained, commits carry the
subclass's metadata and skip unknown positions, a revoke commits the processed prefix
synchronously (held partitions excepted), and the position of an idle partition comes from
the consumer, its committed offset, or the log start."""

from __future__ import annotations

import threading

from tests.support.workers import Msg, plain, wait_until, wire

TP = ("t", 0)


def test_a_full_partition_is_paused_and_resumed_once_half_drained() -> None:
    gates = [threading.Event() for _ in range(4)]
    engine = plain(lambda msg, ctx: gates[msg.offset()].wait(5), lanes=1,
                   max_buffered_per_partition=4)  # fmt: skip
    try:
        fakes = wire(engine, assigned=[TP, ("t", 1)])
        fakes.consumer.batches = [[Msg(i) for i in range(4)]]
        engine._poll_once()
        assert fakes.consumer.paused == [TP]  # 4 buffered: at the bound; ("t", 1) is empty
        assert engine.paused() == {TP} and engine.stats()["paused"] == 1
        gates[0].set()
        wait_until(lambda: engine._dispatcher.buffered().get(TP) == 3)
        engine._poll_once()
        assert fakes.consumer.paused == [TP] and fakes.consumer.resumed == []  # 3 > 4 // 2
        gates[1].set()
        wait_until(lambda: engine._dispatcher.buffered().get(TP) == 2)
        engine._poll_once()
        assert fakes.consumer.resumed == [TP] and engine.paused() == set()
    finally:
        for gate in gates:
            gate.set()
        engine._shutdown()


def test_commits_carry_the_metadata_and_skip_positions_not_known() -> None:
    engine = plain(lambda msg, ctx: None)
    try:
        fakes = wire(engine, assigned=[TP])
        engine._metadata = lambda tp: f"lagpilot:taken:a-{tp[1]}"  # type: ignore[method-assign]
        assert engine._commit({TP: 7, ("t", 1): -1}, asynchronous=False)
        assert fakes.consumer.commits == [({TP: (7, "lagpilot:taken:a-0")}, False)]
        assert engine._acked == {TP: 7}  # a synchronous commit's result is the broker's word
        assert engine._commit({TP: 8}, asynchronous=False, metadata="")
        assert fakes.consumer.commits[-1] == ({TP: (8, "")}, False)  # explicit metadata wins
        assert engine._commit({}, asynchronous=False)  # nothing to commit: nothing sent
        assert len(fakes.consumer.commits) == 2
    finally:
        engine._shutdown()


def test_a_revoke_commits_the_processed_prefix_but_nothing_of_a_held_partition() -> None:
    seen: list[int] = []
    engine = plain(lambda msg, ctx: seen.append(msg.offset()))
    try:
        fakes = wire(engine, assigned=[TP, ("t", 1)])
        engine.held.add(("t", 1))
        fakes.consumer.batches = [[Msg(10), Msg(11)]]
        engine._poll_once()
        wait_until(lambda: seen == [10, 11])
        engine._close_partitions([TP, ("t", 1)], timeout_s=5)
        assert fakes.consumer.commits[-1] == ({TP: (12, "")}, False)
        assert all(("t", 1) not in done for done, _ in fakes.consumer.commits)
    finally:
        engine._shutdown()


def test_an_idle_partitions_position_is_the_consumers_then_committed_then_log_start() -> None:
    engine = plain(lambda msg, ctx: None)
    try:
        fakes = wire(engine, assigned=[TP])
        fakes.consumer.low_watermarks[TP] = 3
        assert engine._current_position(TP) == 3  # nothing read, nothing committed
        fakes.consumer.committed_at[TP] = (40, "")
        assert engine._current_position(TP) == 40
        fakes.consumer.positions[TP] = 42
        assert engine._current_position(TP) == 42
    finally:
        engine._shutdown()


def test_a_failed_async_commit_leaves_the_position_unacknowledged() -> None:
    engine = plain(lambda msg, ctx: None)
    try:
        wire(engine, assigned=[TP])
        engine._on_commit("broker gone", [])
        assert engine.stats()["commit_failed"] == 1 and engine._acked == {}
    finally:
        engine._shutdown()


def test_the_committing_part_stands_alone_with_what_it_is_given() -> None:
    """The engine's commits part is built from explicit dependencies: the lanes, the
    assigned partitions, the tally, the consumer and the engine's two hooks."""
    from actuators.workers.committing import Committing
    from actuators.workers.handling import Tally
    from tests.support.workers import FakeConsumer

    engine = plain(lambda msg, ctx: None)
    try:
        consumer, tally = FakeConsumer(), Tally()
        part = Committing(dispatcher=engine._dispatcher, assigned={TP}, buffered=None,
                          interval_s=0.0, tally=tally, consumer=lambda: consumer,
                          held=lambda tp: False, metadata=lambda tp: "m")  # fmt: skip
        assert part.commit({TP: 3}, asynchronous=False)
        assert consumer.commits == [({TP: (3, "m")}, False)] and part.acked == {TP: 3}
        assert tally.snapshot() == {"commits": 1}
    finally:
        engine._shutdown()
