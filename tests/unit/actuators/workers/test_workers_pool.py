"""``PoolWorker``, the pool side of a hand-off, without a broker (tests/support/workers.py's
fakes): it takes a partition only when the owner's marker names this hand-off and there is
time left before its confirm deadline, reads it from exactly the owner's position, renews
its lease while the owner's marker still names it, lets go when the owner took it back, and
returns it with the ``returned`` marker."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from actuators.workers import PoolWorker
from actuators.workers.handoff import HANDOFF, HANDOFF_MARGIN_MS, Marker, parse_marker
from schemas import ActionType
from tests.support.workers import Msg, Wired, command, settings, wait_until, wire

TP = ("t", 0)


@pytest.fixture
def seen() -> list[int]:
    return []


@pytest.fixture
def pool(seen: list[int]) -> Iterator[PoolWorker]:
    p = PoolWorker(pool="himem", check_s=0.0, take_timeout_s=60.0, lease_s=3.0,
                   **settings(handler=lambda msg, ctx: seen.append(msg.offset())))  # fmt: skip
    yield p
    p._shutdown()


def _owner_marks(fakes: Wired, action_id: str, at: int, confirm_in_ms: int = 10_000) -> None:
    until = int(time.time() * 1000) + confirm_in_ms
    fakes.peek.answers[("g", *TP)] = (at, Marker(HANDOFF, action_id, "himem", until))


def _take(pool: PoolWorker, fakes: Wired, at: int) -> str:
    spread = command(ActionType.SPREAD_PARTITION, TP, pool="himem")
    fakes.control.commands = [spread]
    pool._poll_once()
    _owner_marks(fakes, spread.action_id, at)
    pool._poll_once()
    return spread.action_id


def test_the_pool_takes_the_partition_from_exactly_the_owners_position(
    pool: PoolWorker, seen: list[int]
) -> None:
    fakes = wire(pool)
    action_id = _take(pool, fakes, at=40)
    done, sync = fakes.consumer.commits[0]
    marker = parse_marker(done[TP][1])
    assert (done[TP][0], sync) == (40, False)  # recorded in the pool's group first
    assert marker is not None and (marker.kind, marker.action_id) == ("taken", action_id)
    assert fakes.consumer.assigned == [TP] and fakes.consumer.positions[TP] == 40
    assert pool.held() == {TP} and pool.stats()["taken"] == 1
    fakes.consumer.batches = [[Msg(40), Msg(41)]]
    pool._poll_once()
    wait_until(lambda: seen == [40, 41])


def test_a_spread_to_another_pool_or_without_a_marker_takes_nothing(pool: PoolWorker) -> None:
    fakes = wire(pool)
    fakes.control.commands = [command(ActionType.SPREAD_PARTITION, TP, pool="other")]
    pool._poll_once()
    assert pool._taking == {}
    pool._take_timeout_s = 0.0
    fakes.control.commands = [command(ActionType.SPREAD_PARTITION, TP, pool="himem")]
    pool._poll_once()  # registered; no marker from the owner by its (zero) deadline
    time.sleep(0.01)
    pool._poll_once()
    assert pool.held() == set() and pool.stats()["take_timeout"] == 1
    assert fakes.consumer.assigned == []


def test_a_hand_off_too_close_to_its_deadline_is_left_to_the_owner(pool: PoolWorker) -> None:
    fakes = wire(pool)
    spread = command(ActionType.SPREAD_PARTITION, TP, pool="himem")
    fakes.control.commands = [spread]
    pool._poll_once()
    _owner_marks(fakes, spread.action_id, at=5, confirm_in_ms=HANDOFF_MARGIN_MS // 2)
    pool._poll_once()
    assert pool.held() == set() and pool.stats()["take_too_late"] == 1
    assert fakes.consumer.commits == []


def test_the_lease_is_renewed_while_the_owner_names_the_hand_off(pool: PoolWorker) -> None:
    fakes = wire(pool)
    action_id = _take(pool, fakes, at=40)
    pool._last_renew = 0.0  # a third of the lease has passed
    pool._poll_once()
    done, sync = fakes.consumer.commits[-1]
    marker = parse_marker(done[TP][1])
    assert (done[TP][0], sync) == (40, False) and marker is not None
    assert (marker.kind, marker.action_id) == ("taken", action_id)
    assert marker.until_ms is not None and marker.until_ms > int(time.time() * 1000)


def test_the_pool_lets_go_without_committing_when_the_owner_took_it_back(
    pool: PoolWorker,
) -> None:
    fakes = wire(pool)
    _take(pool, fakes, at=40)
    fakes.peek.answers[("g", *TP)] = (40, None)  # the owner's marker is gone: it took it back
    commits = len(fakes.consumer.commits)
    pool._last_renew = 0.0
    pool._poll_once()
    assert len(fakes.consumer.commits) == commits
    assert fakes.consumer.unassigned == [TP] and pool.held() == set()
    assert pool.stats()["lease_lost"] == 1


def test_restore_returns_the_partition_with_the_returned_marker(
    pool: PoolWorker, seen: list[int]
) -> None:
    fakes = wire(pool)
    action_id = _take(pool, fakes, at=40)
    fakes.consumer.batches = [[Msg(40), Msg(41)]]
    pool._poll_once()
    wait_until(lambda: pool._dispatcher.positions().get(TP) == 42)
    fakes.control.commands = [command(ActionType.RESTORE_PARTITION, TP)]
    pool._poll_once()  # paused, nothing running: returned within the same poll
    assert TP in fakes.consumer.paused
    done, sync = fakes.consumer.commits[-1]
    assert (done[TP], sync) == ((42, f"lagpilot:returned:{action_id}"), False)
    assert fakes.consumer.unassigned == [TP] and pool.held() == set()
    assert pool.stats()["returned"] == 1


def test_a_restore_that_arrives_while_taking_returns_it_once_taken(pool: PoolWorker) -> None:
    fakes = wire(pool)
    spread = command(ActionType.SPREAD_PARTITION, TP, pool="himem")
    fakes.control.commands = [spread]
    pool._poll_once()
    fakes.control.commands = [command(ActionType.RESTORE_PARTITION, TP)]
    pool._poll_once()  # no marker yet: remembered
    _owner_marks(fakes, spread.action_id, at=7)
    pool._poll_once()  # taken, then returned at once: nothing processed in between
    metas = [parse_marker(done[TP][1]) for done, _ in fakes.consumer.commits]
    assert [m.kind for m in metas if m is not None] == ["taken", "returned"]
    assert pool.held() == set() and pool.stats()["returned"] == 1


def test_a_spread_without_pool_spreads_a_held_partitions_lanes(pool: PoolWorker) -> None:
    fakes = wire(pool)
    _take(pool, fakes, at=0)
    fakes.control.commands = [command(ActionType.SPREAD_PARTITION, TP, lanes=3)]
    pool._poll_once()
    assert pool.lanes(*TP) == 3
