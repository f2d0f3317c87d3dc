"""The group-health model: membership, ownership, rebalance rate and storm status (pure)."""

from __future__ import annotations

import pytest

from pipeline.coordinator.records import (
    ConsumerGroupEpoch,
    ConsumerGroupTombstone,
    ConsumerMemberAssignment,
    ConsumerMemberMetadata,
    ConsumerTargetEpoch,
    TopicIdPartitions,
)
from pipeline.model.group_health import GroupHealth, HealthConfig
from schemas import GroupMember, GroupMetadata, GroupRemoved, OffsetCommit, TopicAssignment
from schemas.codec import validate

T0 = 1_700_000_000_000
S = 1000


def _member(mid: str, client: str, parts: tuple[int, ...], host: str = "/10.0.0.1") -> GroupMember:
    return GroupMember(mid, client, host, assignment=(TopicAssignment("orders", parts),))


def _gm(gen: int, *members: GroupMember, group: str = "g") -> GroupMetadata:
    return GroupMetadata(group, "consumer", gen, "range", None, T0, members)


STEADY = _member("steady-1-aaa", "steady", (0, 1))


def _flap(n: int) -> GroupMember:
    return _member(f"flappy-{n}", "flappy", (2, 3), host="/10.0.0.7")


def _storm(h: GroupHealth, cycles: int, start_ms: int = T0, every_ms: int = 4 * S) -> int:
    """A member killed and restarted ``cycles`` times: joins and leaves move the generation."""
    t, gen = start_ms, 1
    h.apply(_gm(gen, STEADY, _flap(0)), t)
    for n in range(cycles):
        t += every_ms
        gen += 1
        h.apply(_gm(gen, _member("steady-1-aaa", "steady", (0, 1, 2, 3))), t)  # flappy died
        t += every_ms
        gen += 1
        h.apply(_gm(gen, STEADY, _flap(n + 1)), t)  # restarted, new member id
    return t


def test_membership_and_assignment_of_a_classic_group() -> None:
    h = GroupHealth()
    h.apply(_gm(5, STEADY, _flap(0)), T0)
    ev = h.event("g", T0 + S)
    assert ev is not None
    validate(ev)
    assert (ev["protocol"], ev["state"], ev["generation"]) == ("classic", "Stable", 5)
    assert [(m["member_id"], m["client_id"], m["client_host"]) for m in ev["members"]] == [
        ("flappy-0", "flappy", "/10.0.0.7"),
        ("steady-1-aaa", "steady", "/10.0.0.1"),
    ]
    assert h.owners("orders") == [
        ["g", 0, "steady-1-aaa", "steady", "/10.0.0.1"],
        ["g", 1, "steady-1-aaa", "steady", "/10.0.0.1"],
        ["g", 2, "flappy-0", "flappy", "/10.0.0.7"],
        ["g", 3, "flappy-0", "flappy", "/10.0.0.7"],
    ]
    assert h.drain_owner_changes() == {"orders"}
    assert h.drain_owner_changes() == set()


def test_three_generation_moves_with_stalled_commits_is_a_storm_naming_the_flapper() -> None:
    h = GroupHealth(HealthConfig(storm_rebalances=3, storm_window_s=60, stall_s=10))
    h.apply(_gm(1, STEADY, _flap(0)), T0)
    h.apply(_gm(2, _member("steady-1-aaa", "steady", (0, 1, 2, 3))), T0 + 4 * S)
    assert h.status("g", T0 + 4 * S) == "REBALANCING"  # two moves: not yet
    h.apply(_gm(3, STEADY, _flap(1)), T0 + 8 * S)  # the crossing record
    (ev,) = [e for e in h.due(T0 + 8 * S) if e["group"] == "g"]
    validate(ev)
    assert ev["status"] == "STORM" and ev["consumption_stopped"] is True
    assert ev["rebalances_total"] == 3 and ev["last_rebalance_ms"] == T0 + 8 * S
    assert ev["rebalances_per_min"] == 3.0
    assert (ev["joined"], ev["left"]) == (3, 1)
    storm = ev["storm"]
    assert (storm["client_id"], storm["client_host"], storm["member_id"]) == (
        "flappy",
        "/10.0.0.7",
        "flappy-0",
    )
    assert storm["leaves"] == 1
    assert storm["partitions"] == [{"topic": "orders", "topic_id": None, "partitions": [2, 3]}]


def test_the_member_that_keeps_leaving_is_named_across_new_member_ids() -> None:
    h = GroupHealth()
    t = _storm(h, cycles=3)
    ev = h.event("g", t)
    assert ev is not None and ev["status"] == "STORM"
    assert ev["storm"]["identity"] == "flappy@/10.0.0.7" and ev["storm"]["leaves"] == 3
    assert ev["storm"]["member_id"] == "flappy-2"  # the last incarnation that left


def test_rebalances_while_commits_advance_are_not_a_storm() -> None:
    h = GroupHealth(HealthConfig(stall_s=10))
    h.apply(_gm(1, STEADY), T0)
    for i in range(1, 6):  # a rolling deploy: five moves in 20 s, consumption goes on
        h.apply(OffsetCommit("g", "orders", 0, 100 * i, T0 + i * 4 * S), T0 + i * 4 * S)
        h.apply(_gm(1 + i, STEADY), T0 + i * 4 * S)
    assert h.status("g", T0 + 20 * S) == "REBALANCING"
    for i in range(6, 8):  # and consumption goes on after it
        h.apply(OffsetCommit("g", "orders", 0, 100 * i, T0 + i * 4 * S), T0 + i * 4 * S)
    assert h.status("g", T0 + 31 * S) == "OK"
    assert h.status("g", T0 + 28 * S + 10 * S) == "STORM"  # were it to stop: 5 moves, stalled


def test_the_storm_ends_when_the_window_holds_fewer_moves() -> None:
    h = GroupHealth(HealthConfig(storm_rebalances=3, storm_window_s=20, stall_s=5))
    t = _storm(h, cycles=2, every_ms=2 * S)
    assert h.status("g", t) == "STORM"
    assert [e["status"] for e in h.due(t) if e["group"] == "g"] == ["STORM"]
    assert h.status("g", t + 13 * S) == "STORM"  # moves at t-6, t-4, t-2, t: 4 in 20 s
    assert [e["status"] for e in h.due(t + 13 * S)] == ["STORM"]  # re-sent each interval
    statuses = [e["status"] for e in h.due(t + 17 * S) if e["group"] == "g"]
    assert statuses == ["OK"]  # 2 moves left in the window
    ev = h.event("g", t + 17 * S)
    assert ev is not None and ev["storm"] is None and ev["rebalances_total"] == 5


def test_old_records_replayed_at_start_do_not_make_a_storm_now() -> None:
    h = GroupHealth()
    t = _storm(h, cycles=3)
    assert h.status("g", t + 3_600 * S) == "OK"


def test_due_publishes_changes_at_once_and_unchanged_groups_each_interval() -> None:
    h = GroupHealth(HealthConfig(interval_ms=5000))
    h.apply(_gm(1, STEADY), T0)
    assert [e["generation"] for e in h.due(T0)] == [1]
    assert h.due(T0 + 300) == []
    h.apply(_gm(2, STEADY, _flap(0)), T0 + 400)
    assert [e["generation"] for e in h.due(T0 + 400)] == [2]
    assert [e["group"] for e in h.due(T0 + 5500)] == ["g"]


def test_a_deleted_group_is_published_once_then_forgotten() -> None:
    h = GroupHealth()
    h.apply(_gm(1, STEADY), T0)
    h.due(T0)
    h.apply(_gm(2), T0 + S)
    assert h.status("g", T0 + 12 * S) == "EMPTY"
    h.apply(GroupRemoved("g"), T0 + 13 * S)
    (ev,) = h.due(T0 + 13 * S)
    validate(ev)
    assert (ev["status"], ev["group"]) == ("DELETED", "g")
    assert h.due(T0 + 60 * S) == [] and "g" not in h.groups
    assert h.owners("orders") == [] and h.owned_topics() == []


TID = "AAECAwQFBgcICQoLDA0ODw"


def _kip848(
    h: GroupHealth, t: int, member: str, parts: tuple[int, ...], epoch: int, client: str = ""
) -> None:
    h.apply(ConsumerMemberMetadata("k", member, None, None, client or f"c-{member}", "/10.1.1.1",
                                   ("orders",), None, 300_000, None), t)  # fmt: skip
    h.apply(ConsumerGroupEpoch("k", epoch), t)
    h.apply(ConsumerTargetEpoch("k", epoch), t)
    assigned = (TopicIdPartitions(TID, parts),)
    h.apply(ConsumerMemberAssignment("k", member, epoch, epoch - 1, 0, assigned, ()), t)


def test_kip848_members_assignment_and_topic_ids() -> None:
    h = GroupHealth()
    _kip848(h, T0, "m1", (0, 1, 2), 1)
    assert h.unknown_topic_ids() == {TID}
    assert h.owners("orders") == []  # not resolved yet
    ev = h.event("k", T0)
    assert ev is not None and ev["members"][0]["assignment"] == [
        {"topic": None, "topic_id": TID, "partitions": [0, 1, 2]}
    ]
    h.learn_topic_ids({TID: "orders"})
    assert h.unknown_topic_ids() == set()
    assert [o[1:3] for o in h.owners("orders")] == [[0, "m1"], [1, "m1"], [2, "m1"]]
    ev = h.event("k", T0)
    assert ev is not None
    validate(ev)
    assert (ev["protocol"], ev["state"], ev["generation"], ev["status"]) == (
        "consumer",
        "Stable",
        1,
        "REBALANCING",
    )
    h.apply(ConsumerGroupEpoch("k", 2), T0 + S)  # a second member comes: assigning
    assert h.event("k", T0 + S)["state"] == "Assigning"  # type: ignore[index]
    h.apply(ConsumerGroupTombstone("k", "member_metadata", "m1"), T0 + 2 * S)
    ev = h.event("k", T0 + 2 * S)
    assert ev is not None and (ev["members"], ev["left"], ev["state"]) == ([], 1, "Empty")
    assert h.owners("orders") == []
    assert [e["members"] for e in h.due(T0 + 2 * S)] == [[]]
    h.apply(ConsumerGroupTombstone("k", "group_epoch"), T0 + 3 * S)
    assert [e["status"] for e in h.due(T0 + 3 * S)] == ["DELETED"] and not h.groups


def test_config_errors_name_the_key() -> None:
    with pytest.raises(ValueError, match="storm_rebalances"):
        HealthConfig(storm_rebalances=1)
    with pytest.raises(ValueError, match="stall_s"):
        HealthConfig(stall_s=0)


def test_a_group_created_and_deleted_before_it_was_published_stays_quiet() -> None:
    h = GroupHealth()  # e.g. the history of deleted test groups, replayed at start
    h.apply(_gm(1, STEADY), T0)
    h.apply(GroupRemoved("g"), T0 + S)
    assert h.due(T0 + S) == [] and not h.groups


def test_a_start_up_scan_never_overrides_what_the_live_reader_applied() -> None:
    h = GroupHealth()
    live = _gm(7, STEADY, _flap(3))
    h.apply(live, T0 + 9 * S, offset=900, partition=4)  # live, while a scan runs
    h.apply(_gm(5, STEADY), T0, offset=500, partition=4)  # the scan's older snapshot
    assert h.groups["g"].generation == 7 and len(h.groups["g"].members) == 2
    h.apply(GroupRemoved("gone"), T0 + 9 * S, offset=901, partition=4)
    h.apply(_gm(3, STEADY, group="gone"), T0, offset=300, partition=4)  # deleted since
    assert "gone" not in h.groups
    h.apply(ConsumerMemberMetadata("k", "m2", None, None, "c2", "/h", (), None, 1, None), T0,
            offset=950, partition=4)  # fmt: skip
    h.apply(ConsumerMemberMetadata("k", "m1", None, None, "c1", "/h", (), None, 1, None), T0,
            offset=400, partition=4)  # fmt: skip
    assert sorted(h.groups["k"].members) == ["m1", "m2"]  # another key: not superseded
    h.forget_order()
    h.apply(_gm(6, STEADY), T0, offset=600)
    assert h.groups["g"].generation == 6  # no ordering once the scan is over


def test_groups_of_partitions_another_replica_took_are_dropped_quietly() -> None:
    h = GroupHealth()
    h.apply(_gm(1, STEADY), T0, partition=3)
    h.apply(_gm(1, STEADY, group="other"), T0, partition=5)
    h.due(T0)
    h.forget_partitions({3})
    assert set(h.groups) == {"other"} and h.due(T0 + 100) == []
    assert {o[0] for o in h.owners("orders")} == {"other"}


def test_a_kip848_member_that_keeps_leaving_is_a_storm_with_its_resolved_partitions() -> None:
    h = GroupHealth()
    h.learn_topic_ids({TID: "orders"})
    _kip848(h, T0, "steady", (0, 1), 1)
    t, epoch = T0, 1
    for n in range(2):  # a crash-looping member: joins (epoch bump), leaves (epoch bump)
        t += 3 * S
        epoch += 1
        _kip848(h, t, f"loop-{n}", (2, 3), epoch, client="looper")  # a new member id each run
        t += 3 * S
        epoch += 1
        h.apply(ConsumerGroupTombstone("k", "member_assignment", f"loop-{n}"), t)
        h.apply(ConsumerGroupTombstone("k", "member_metadata", f"loop-{n}"), t)
        h.apply(ConsumerGroupEpoch("k", epoch), t)
    ev = h.event("k", t)
    assert ev is not None
    validate(ev)
    assert ev["status"] == "STORM" and ev["protocol"] == "consumer"
    storm = ev["storm"]
    assert (storm["identity"], storm["member_id"], storm["leaves"]) == (
        "looper@/10.1.1.1",
        "loop-1",
        2,
    )
    assert storm["partitions"] == [{"topic": "orders", "topic_id": TID, "partitions": [2, 3]}]
    assert [m["member_id"] for m in ev["members"]] == ["steady"]


def _poisoned(h: GroupHealth, cycles: int, every_ms: int = 3 * S) -> int:
    """Whoever takes partition 3 dies on it; partitions 0..2 keep committing all along."""
    t, gen, off = T0, 1, 0
    members = ["a", "b", "c"]
    h.apply(_gm(gen, _member("a-0", "a", (0, 3)), _member("b-0", "b", (1,)),
                _member("c-0", "c", (2,))), t)  # fmt: skip
    for p in range(4):
        h.apply(OffsetCommit("g", "orders", p, 10, t), t)
    for n in range(cycles):
        dead = members[n % 3]
        alive = [m for m in members if m != dead]
        t += every_ms
        gen += 1
        h.apply(_gm(gen, _member(f"{alive[0]}-{n}", alive[0], (0, 3)),
                    _member(f"{alive[1]}-{n}", alive[1], (1, 2))), t)  # fmt: skip
        off += 5
        for p in range(3):
            h.apply(OffsetCommit("g", "orders", p, 10 + off, t), t)
        h.apply(OffsetCommit("g", "orders", 3, 10, t), t)  # committed, never advancing
        members = [*alive, dead]  # restarted: joins again, last
    return t


def test_a_partition_that_kills_each_member_taking_it_is_a_storm_while_others_commit() -> None:
    h = GroupHealth(HealthConfig(storm_rebalances=3, storm_window_s=60, stall_s=10))
    t = _poisoned(h, cycles=3)
    assert h.status("g", t) == "REBALANCING"  # partition 3 stuck for 9 s only
    h = GroupHealth(HealthConfig(stall_s=10))
    t = _poisoned(h, cycles=4)  # stuck for 12 s
    ev = h.event("g", t)
    assert ev is not None
    validate(ev)
    assert ev["status"] == "STORM" and ev["commits_stalled"] is False
    assert ev["storm"]["partitions"] == [{"topic": "orders", "topic_id": None, "partitions": [3]}]


def test_members_leaving_with_partitions_that_keep_advancing_are_no_storm() -> None:
    h = GroupHealth(HealthConfig(stall_s=10))
    t, gen = T0, 1
    h.apply(_gm(gen, _member("a-0", "a", (0,)), _member("b-0", "b", (1,))), t)
    for i in range(1, 9):  # a rolling restart: each member leaves in turn, all commit on
        t += 3 * S
        gen += 1
        h.apply(_gm(gen, _member(f"a-{i}", "a", (0,)) if i % 2 else _member("a-0", "a", (0,)),
                    _member(f"b-{i}", "b", (1,))), t)  # fmt: skip
        for p in range(2):
            h.apply(OffsetCommit("g", "orders", p, 100 * i, t), t)
    assert h.status("g", t) == "REBALANCING"
