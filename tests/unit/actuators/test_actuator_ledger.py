"""The ledger is a pure fold over outcome events: rebuild, leases, renewals, kill switch."""

from __future__ import annotations

from typing import Any

from actuators.checks import released
from actuators.ledger import Ledger


def applied(action_id: str, kind: str, at: int, **extra: Any) -> dict[str, Any]:
    return {"action_id": action_id, "action_type": kind, "result": "applied", "at": at, **extra}


def throttle(action_id: str, name: str, at: int, lease_ms: int = 1000) -> dict[str, Any]:
    params = {"entity": "client-id", "name": name, "producer_byte_rate": 100, "lease_s": 1}
    return applied(
        action_id, "throttle_producer", at, params=params, lease_expires_at=at + lease_ms
    )


def test_applied_duplicate_and_released_ids_count_as_applied_others_do_not() -> None:
    ledger = Ledger().fold_all(
        [
            applied("a", "add_partitions", 1),
            {"action_id": "b", "result": "duplicate", "at": 2},
            {"action_id": "c", "result": "released", "at": 3},
            {"action_id": "d", "result": "rejected", "at": 4},
            {"action_id": "e", "result": "failed", "at": 5},
            {"action_id": "f", "result": "expired", "at": 6},
            {"action_id": "g", "result": "recorded", "at": 7},
        ]
    )
    assert ledger.applied == {"a", "b", "c"}


def test_a_throttle_holds_a_lease_until_it_is_due() -> None:
    ledger = Ledger().fold_all([throttle("t1", "agent-1", at=1000, lease_ms=500)])
    assert ledger.due(1499) == []
    [lease] = ledger.due(1500)
    assert (lease.action_id, lease.name, lease.bytes_per_s) == ("t1", "agent-1", 100)


def test_a_renewal_replaces_the_lease_and_the_old_lease_end_does_not_release_it() -> None:
    ledger = Ledger().fold_all([throttle("t1", "a", at=1000), throttle("t2", "a", at=1800)])
    assert ledger.due(2000) == []  # t1 would have ended at 2000; t2 holds until 2800
    [lease] = ledger.leases.values()
    ledger.fold(released(lease.__class__("t1", "client-id", "a", 100, 2000, 1000),
                         actuator="x", now_ms=2000))  # fmt: skip
    assert [lease.action_id for lease in ledger.leases.values()] == ["t2"]


def test_a_released_outcome_ends_its_lease_and_survives_restart() -> None:
    ledger = Ledger().fold_all([throttle("t1", "a", at=1000)])
    [lease] = ledger.due(2000)
    end = released(lease, actuator="x", now_ms=2001)
    ledger.fold(end)
    assert ledger.leases == {} and "t1" in ledger.applied
    # after compaction only the released outcome of t1 is left: a restart knows both facts
    rebuilt = Ledger().fold_all([end])
    assert rebuilt.leases == {} and rebuilt.applied == {"t1"}


def test_release_producer_ends_the_throttle_even_if_read_before_it() -> None:
    rel = applied("r1", "release_producer", 2000, params={"entity": "client-id", "name": "a"})
    in_order = Ledger().fold_all([throttle("t1", "a", at=1000), rel])
    out_of_order = Ledger().fold_all([rel, throttle("t1", "a", at=1000)])
    assert in_order.leases == {} and out_of_order.leases == {}
    renewed_later = Ledger().fold_all([rel, throttle("t2", "a", at=3000)])
    assert list(renewed_later.leases) == [("client-id", "a")]


def test_kill_switch_follows_the_newest_halt_or_resume_of_scope_all() -> None:
    halt = applied("h", "halt", 1000, params={"scope": "all"})
    resume = applied("r", "resume", 2000, params={"scope": "all"})
    group_halt = applied("g", "halt", 3000, params={"scope": "workers"})
    assert Ledger().fold_all([halt]).halted
    assert not Ledger().fold_all([halt, resume]).halted
    assert not Ledger().fold_all([resume, halt]).halted  # order read does not matter, `at` does
    assert not Ledger().fold_all([halt, resume, group_halt]).halted


def test_outcomes_without_entity_params_are_ignored_for_leases() -> None:
    ledger = Ledger().fold_all([applied("t", "throttle_producer", 1, params={"name": 3})])
    assert ledger.leases == {} and ledger.applied == {"t"}


def test_a_delegated_id_is_done_so_its_replay_is_a_duplicate() -> None:
    """A pipeline killed mid-incident publishes its last decisions again (same ids): a worker
    action already delegated must not be delegated a second time (faults row 4)."""
    ledger = Ledger().fold_all([{"action_id": "s", "result": "delegated", "at": 1}])
    assert "s" in ledger.applied
