"""The engine's poll loop, without a broker (tests/support/workers.py's fakes): a polled
batch runs on the lanes, the processed prefix is committed at the interval and only when
it moved, held partitions' messages are dropped, consumer errors are counted and a fatal
one ends the loop."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException

from schemas import ActionType
from tests.support.workers import Msg, Plain, command, plain, wait_until, wire


@pytest.fixture
def seen() -> list[int]:
    return []


@pytest.fixture
def engine(seen: list[int]) -> Iterator[Plain]:
    e = plain(lambda msg, ctx: seen.append(msg.offset()))
    yield e
    e._shutdown()


def test_a_batch_runs_and_its_processed_prefix_is_committed_once(
    engine: Plain, seen: list[int]
) -> None:
    fakes = wire(engine, assigned=[("t", 0)])
    fakes.consumer.batches = [[Msg(5), Msg(6), Msg(7)]]
    engine._poll_once()
    wait_until(lambda: engine._dispatcher.positions() == {("t", 0): 8})
    assert seen == [5, 6, 7]
    engine._poll_once()  # the interval passed (0 s): the prefix goes out asynchronously
    assert fakes.consumer.commits[-1] == ({("t", 0): (8, "")}, True)
    assert engine.stats()["processed"] == 3
    commits = len(fakes.consumer.commits)
    engine._poll_once()  # acknowledged (on_commit) and unchanged: not committed again
    assert len(fakes.consumer.commits) == commits


def test_a_refused_commit_is_counted_and_sent_again_at_the_next_interval() -> None:
    gate, done = threading.Event(), threading.Event()
    engine = plain(lambda msg, ctx: (gate.wait(5), done.set()))
    try:
        fakes = wire(engine, assigned=[("t", 0)])
        fakes.consumer.batches = [[Msg(0)]]
        engine._poll_once()  # running, not done: the position stays at 0
        gate.set()
        wait_until(done.is_set)
        wait_until(lambda: engine._dispatcher.positions() == {("t", 0): 1})
        before = list(fakes.consumer.commits)
        fakes.consumer.fail_commits = True
        engine._poll_once()
        assert engine.stats()["commit_failed"] == 1 and fakes.consumer.commits == before
        fakes.consumer.fail_commits = False
        engine._poll_once()
        assert fakes.consumer.commits[len(before) :] == [({("t", 0): (1, "")}, True)]
    finally:
        engine._shutdown()


def test_a_held_partitions_messages_are_dropped_and_counted(engine: Plain, seen: list[int]) -> None:
    fakes = wire(engine, assigned=[("t", 0), ("t", 1)])
    engine.held.add(("t", 1))
    fakes.consumer.batches = [[Msg(0, _partition=0), Msg(0, _partition=1), Msg(1, _partition=1)]]
    engine._poll_once()
    wait_until(lambda: seen == [0])
    assert engine.stats()["dropped_held"] == 2
    assert ("t", 1) in fakes.consumer.paused  # held: paused as well as dropped


def test_consumer_errors_are_counted_and_a_fatal_one_ends_the_loop(engine: Plain) -> None:
    fakes = wire(engine, assigned=[("t", 0)])
    transient = Msg(0, _error=KafkaError(KafkaError._TRANSPORT))
    fakes.consumer.batches = [[transient]]
    engine._poll_once()
    assert engine.stats()["consumer_error"] == 1
    fakes.consumer.batches = [[Msg(0, _error=KafkaError(KafkaError._FATAL, fatal=True))]]
    with pytest.raises(KafkaException):
        engine._poll_once()
    assert engine.stats()["consumer_error"] == 2


def test_the_loop_keeps_its_error_and_shuts_down_committing_what_was_processed() -> None:
    release = threading.Event()
    engine = plain(lambda msg, ctx: release.wait(5))
    fakes = wire(engine, assigned=[("t", 0)])
    fakes.consumer.batches = [[Msg(3)], [Msg(0, _error=KafkaError(KafkaError._FATAL, fatal=True))]]
    engine._poll_once()  # 3 runs (blocked in the handler)
    release.set()
    with pytest.raises(KafkaException):
        engine._loop()
    assert isinstance(engine.error, KafkaException)
    # the shutdown drained the lanes and committed the processed prefix synchronously
    assert fakes.consumer.commits[-1] == ({("t", 0): (4, "")}, False)
    assert fakes.consumer.closed


def test_commands_reach_the_subclass_and_are_counted(engine: Plain) -> None:
    fakes = wire(engine, assigned=[("t", 0)])
    spread = command(ActionType.SPREAD_PARTITION, ("t", 0), lanes=3)
    fakes.control.commands = [spread]
    engine._poll_once()
    assert engine.applied == [spread]
    assert engine.stats()["obeyed_spread_partition"] == 1
