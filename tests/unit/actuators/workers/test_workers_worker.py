"""``Worker``, the owner side, without a broker (tests/support/workers.py's fakes): spread
and restore per partition, the hand-off to a pool and its three endings (returned, lease
run out, never confirmed), the pool's progress mirrored into the owner's group, commands
remembered for a partition's next owner, and what a revoke and a loss commit."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
from confluent_kafka import TopicPartition

from actuators.workers import Worker
from actuators.workers.handoff import (
    RETURNED,
    TAKEN,
    Marker,
    handoff_marker,
    parse_marker,
    pool_group_id,
)
from schemas import ActionType
from tests.support.workers import Msg, Wired, command, settings, wait_until, wire

TP = ("t", 0)
POOL_GROUP = pool_group_id("g", "himem")


@pytest.fixture
def seen() -> list[int]:
    return []


@pytest.fixture
def worker(seen: list[int]) -> Iterator[Worker]:
    w = Worker(topics=["t"], instance_id="w-1", handoff_check_s=0.0,
               **settings(handler=lambda msg, ctx: seen.append(msg.offset())))  # fmt: skip
    yield w
    w._shutdown()


def _hand_off(worker: Worker, fakes: Wired, at: int) -> str:
    """Spread TP to pool himem once ``at`` is processed; returns the hand-off's action id."""
    fakes.consumer.batches = [[Msg(o) for o in range(at)]]
    worker._poll_once()
    wait_until(lambda: worker._dispatcher.positions().get(TP) == at)
    handoff = command(ActionType.SPREAD_PARTITION, TP, pool="himem")
    fakes.control.commands = [handoff]
    worker._poll_once()  # paused, running work ends, then the marker is committed
    return handoff.action_id


def test_spread_and_restore_change_the_lanes_and_say_so(worker: Worker) -> None:
    fakes = wire(worker, assigned=[TP])
    fakes.control.commands = [command(ActionType.SPREAD_PARTITION, TP, lanes=4)]
    worker._poll_once()
    assert worker.lanes(*TP) == 4
    fakes.control.commands = [command(ActionType.RESTORE_PARTITION, TP)]
    worker._poll_once()
    assert worker.lanes(*TP) == 1
    assert fakes.reporter.did() == ["spread", "restored"]
    assert [e["partition"] for e in fakes.reporter.events] == [0, 0]


def test_a_hand_off_commits_its_marker_and_holds_the_partition(
    worker: Worker, seen: list[int]
) -> None:
    fakes = wire(worker, assigned=[TP])
    action_id = _hand_off(worker, fakes, at=3)
    done, sync = fakes.consumer.commits[-1]
    offset, metadata = done[TP]
    marker = parse_marker(metadata)
    assert (offset, sync) == (3, False) and marker is not None
    assert marker.is_handoff(action_id, "himem") and marker.until_ms is not None
    assert marker.until_ms > int(time.time() * 1000)  # the pool must confirm by then
    assert TP in fakes.consumer.paused and worker.stats()["handed_off"] == 1
    assert fakes.reporter.did() == ["handoff_started"]
    fakes.consumer.batches = [[Msg(3), Msg(4)]]  # the pool's now: not processed here
    worker._poll_once()
    assert seen == [0, 1, 2] and worker.stats()["dropped_held"] == 2


def test_the_owner_takes_back_where_the_pool_returned_it(worker: Worker) -> None:
    fakes = wire(worker, assigned=[TP])
    action_id = _hand_off(worker, fakes, at=3)
    fakes.peek.answers[(POOL_GROUP, *TP)] = (42, Marker(RETURNED, action_id))
    worker._poll_once()
    assert fakes.consumer.seeks == [(TP, 42)]
    assert fakes.consumer.commits[-1] == ({TP: (42, "")}, False)  # the marker cleared
    assert fakes.reporter.did() == ["handoff_started", "handoff_returned"]
    assert worker.stats()["taken_back"] == 1 and not worker._held(TP)


def test_a_pool_whose_lease_ran_out_loses_the_partition_at_its_last_commit(
    worker: Worker,
) -> None:
    fakes = wire(worker, assigned=[TP])
    action_id = _hand_off(worker, fakes, at=3)
    gone = int(time.time() * 1000) - 1
    fakes.peek.answers[(POOL_GROUP, *TP)] = (17, Marker(TAKEN, action_id, None, gone))
    worker._poll_once()
    assert fakes.consumer.seeks == [(TP, 17)]
    assert worker.stats()["taken_back_lease_expired"] == 1 and not worker._held(TP)


def test_the_pools_progress_is_mirrored_into_the_owners_group_under_the_marker(
    worker: Worker,
) -> None:
    fakes = wire(worker, assigned=[TP])
    action_id = _hand_off(worker, fakes, at=3)
    lease = int(time.time() * 1000) + 10_000
    fakes.peek.answers[(POOL_GROUP, *TP)] = (30, Marker(TAKEN, action_id, None, lease))
    worker._poll_once()
    worker._poll_once()  # the same position: not committed again
    mirrored = [done[TP] for done, _ in fakes.consumer.commits if done.get(TP, (0,))[0] == 30]
    assert len(mirrored) == 1
    marker = parse_marker(mirrored[0][1])
    assert marker is not None and marker.is_handoff(action_id, "himem")  # still handed off
    assert worker.stats()["handoff_mirrored"] == 1 and worker._held(TP)


def test_a_hand_off_the_pool_never_confirmed_comes_back_from_the_owners_commit(
    worker: Worker,
) -> None:
    fakes = wire(worker, assigned=[TP])
    _hand_off(worker, fakes, at=3)
    worker._handed[TP] = replace(worker._handed[TP], until_ms=0)  # its deadline passed
    fakes.peek.answers[("g", *TP)] = (3, None)
    worker._poll_once()
    assert fakes.consumer.seeks == [(TP, 3)]
    assert worker.stats()["taken_back_unconfirmed"] == 1 and not worker._held(TP)


def test_a_command_for_a_partition_without_owner_is_obeyed_by_its_next_owner(
    worker: Worker,
) -> None:
    fakes = wire(worker, assigned=[TP])
    other = ("t", 1)
    fakes.control.commands = [command(ActionType.SPREAD_PARTITION, other, lanes=3)]
    worker._poll_once()
    assert worker.lanes(*other) == 1 and fakes.reporter.did() == []  # not ours yet
    worker._on_assign(fakes.consumer, [TopicPartition(*other)])  # type: ignore[arg-type]
    assert worker.lanes(*other) == 3 and fakes.reporter.did() == ["spread"]
    assert worker.assignment() == {TP, other} and worker.rebalances == 1


def test_a_new_owner_finds_the_hand_off_marker_and_keeps_off(worker: Worker) -> None:
    fakes = wire(worker)
    until = int(time.time() * 1000) + 10_000
    fakes.consumer.committed_at[TP] = (5, handoff_marker("himem", "a-1", until))
    worker._on_assign(fakes.consumer, [TopicPartition(*TP)])  # type: ignore[arg-type]
    assert worker._held(TP)
    fakes.consumer.batches = [[Msg(5)]]
    worker._poll_once()
    assert worker.stats()["dropped_held"] == 1


def test_a_revoke_commits_what_was_processed_and_a_loss_commits_nothing(
    worker: Worker, seen: list[int]
) -> None:
    fakes = wire(worker, assigned=[TP, ("t", 1)])
    fakes.consumer.batches = [[Msg(0), Msg(1), Msg(0, _partition=1)]]
    worker._poll_once()
    wait_until(lambda: worker._dispatcher.positions() == {TP: 2, ("t", 1): 1})
    assert sorted(seen) == [0, 0, 1]
    commits = len(fakes.consumer.commits)
    worker._on_lost(fakes.consumer, [TopicPartition("t", 1)])  # type: ignore[arg-type]
    assert len(fakes.consumer.commits) == commits and worker.stats()["lost"] == 1
    worker._on_revoke(fakes.consumer, [TopicPartition(*TP)])  # type: ignore[arg-type]
    assert fakes.consumer.commits[-1] == ({TP: (2, "")}, False)
    assert worker.assignment() == set()
