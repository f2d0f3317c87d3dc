"""Act by the ladder and verify: scenarios through ``decide`` (pure, time passed in), with
``Loop`` playing the actuator. The diagnosis alone is test_diagnosis.py, the ladders'
configuration test_ladder.py."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pipeline.decide import inputs
from pipeline.decide.diagnosis import DiagnosisConfig, diagnose
from pipeline.decide.policy_config import config_from_mapping
from tests.support.decide import CALM, EXIT_S, HOT, T0, Loop, cfg, gl, kinds, wp

# -- the ladders ----------------------------------------------------------------------------


def test_hotspot_spread_without_effect_is_handed_off_then_verified() -> None:
    loop = Loop(cfg())
    first = loop.feed(gl(HOT), 3)
    assert kinds(first) == ["spread_partition"]
    spread = first[0]
    assert spread["reason"]["cause"] == "hotspot"
    assert spread["reason"]["evidence"]["partitions"] == [3]
    assert spread["params"]["pool"] is None
    # the hot partition stays as far behind: no effect by the deadline (5 s = 20 ticks)
    second = loop.feed(gl(HOT), 20)
    assert [(a["type"], a["params"]["pool"]) for a in second] == [("spread_partition", "dedicated")]
    assert second[0]["target"] == spread["target"] and second[0]["id"] != spread["id"]
    no_effect = loop.verdicts[0]
    assert no_effect["result"] == "no_effect" and no_effect["action_id"] == spread["id"]
    assert no_effect["time_lag_at_apply_s"] == 40.0 and no_effect["time_lag_now_s"] == 40.0
    # the pool drains it: verified at once, and restored once the incident clears
    loop.feed(gl([wp(3, 20.0), *HOT[1:]]))
    assert [v["result"] for v in loop.verdicts] == ["no_effect", "verified"]
    assert loop.verdicts[1]["action_id"] == second[0]["id"]
    last = loop.feed(gl(CALM), 30)
    assert kinds(last) == ["restore_partition"]
    assert last[0]["reason"]["cause"] == "hotspot"


TWO_HOT = [wp(3, 40.0, consume=0.0), wp(5, 30.0, consume=0.0), wp(1, 2.0), wp(2, 1.0)]


def test_every_hot_partition_climbs_its_own_ladder() -> None:
    loop = Loop(cfg())
    first = loop.feed(gl(TWO_HOT), 3)
    assert [(a["type"], a["params"]["partition"]) for a in first] == [
        ("spread_partition", 3), ("spread_partition", 5)
    ]  # fmt: skip
    assert [a["reason"]["evidence"]["partitions"] for a in first] == [[3], [5]]
    assert [a["reason"]["partition_time_lag_s"] for a in first] == [40.0, 30.0]
    assert all(a["reason"]["cause"] == "hotspot" for a in first)
    # partition 3 drains (verified), partition 5 does not: only 5 is handed off, at its deadline
    drained = [wp(3, 8.0), wp(5, 30.0, consume=0.0), wp(1, 2.0), wp(2, 1.0)]
    loop.feed(gl(drained))
    assert [(v["result"], v["target"]) for v in loop.verdicts] == [("verified", first[0]["target"])]
    later = loop.feed(gl(drained), 20)
    assert [(a["params"]["partition"], a["params"]["pool"]) for a in later] == [(5, "dedicated")]
    assert [(v["result"], v["target"]) for v in loop.verdicts[1:]] == [
        ("no_effect", first[1]["target"])
    ]
    assert loop.verdicts[1]["time_lag_at_apply_s"] == 30.0
    # the pool drains 5; then the incident clears and both are restored
    loop.feed(gl([wp(3, 2.0), wp(5, 4.0), wp(1, 2.0), wp(2, 1.0)]))
    assert [v["result"] for v in loop.verdicts] == ["verified", "no_effect", "verified"]
    last = loop.feed(gl(CALM), 30)
    assert sorted((a["type"], a["params"]["partition"]) for a in last) == [
        ("restore_partition", 3), ("restore_partition", 5)
    ]  # fmt: skip
    assert loop.state.ladders == {}


def test_a_partition_that_turns_hot_later_does_not_wait_for_the_first_verdict() -> None:
    loop = Loop(cfg())
    loop.feed(gl(HOT), 3)
    loop.feed(gl(HOT), 4)  # partition 3 is spread and watched (deadline 5 s: 20 ticks)
    second = loop.feed(gl(TWO_HOT), 1)
    assert [(a["type"], a["params"]["partition"]) for a in second] == [("spread_partition", 5)]
    assert loop.verdicts == []


def test_the_budget_holds_back_the_next_hot_partition_until_it_frees() -> None:
    loop = Loop(cfg(budget={"actions_per_minute": 1}))
    loop.feed(gl(TWO_HOT), 3)
    assert [a["params"]["partition"] for a in loop.actions] == [3]
    loop.feed(gl([wp(3, 4.0), *TWO_HOT[1:]]), 260)  # 3 drains; 5 waits out the minute
    spreads = [(a["params"]["partition"], a["issued_at"]) for a in loop.actions]
    assert [p for p, _ in spreads][:2] == [3, 5]
    assert spreads[1][1] - spreads[0][1] >= 60_000


def test_until_it_acts_the_diagnosis_follows_the_evidence() -> None:
    """A group still joining (nothing consumed yet) opens the incident as stalled; a second
    later it is a hotspot, and the hotspot's ladder acts (the alert does not stick)."""
    loop = Loop(cfg())
    joining = [wp(p, lag, consume=0.0) for p, lag in [(3, 40.0), (1, 2.0), (2, 1.0), (0, 0.5)]]
    loop.feed(gl(joining), 4)
    assert loop.actions == [] and next(iter(loop.state.ladders.values()))["cause"] == "stalled"
    assert kinds(loop.feed(gl(HOT), 1)) == ["spread_partition"]
    assert loop.actions[0]["reason"]["cause"] == "hotspot"
    # once it acted, one summary with every worker busy (no consumption) changes nothing:
    # the spread is still watched and verified
    loop.feed(gl(joining), 2)
    loop.feed(gl([wp(3, 20.0), *HOT[1:]]))
    assert [v["result"] for v in loop.verdicts] == ["verified"]
    assert loop.state.ladders[next(iter(loop.state.ladders))]["cause"] == "hotspot"


def test_without_a_pool_the_hand_off_is_skipped_and_the_spread_kept() -> None:
    ladder = {"hotspot": ["spread_partition:5", "handoff_partition:5"]}
    config = config_from_mapping(
        {
            "mode": "act",
            "cooldowns": {"default_s": 5},
            "thresholds": {"default": {"time_lag_s": 10}},
            "ladders": {"default": ladder},
        }
    )
    loop = Loop(config)
    loop.feed(gl(HOT), 3)
    loop.feed(gl(HOT), 40)
    assert kinds(loop.actions) == ["spread_partition"]  # the spread is kept: no undo here
    assert [a["params"]["pool"] for a in loop.actions] == [None]
    assert [v["result"] for v in loop.verdicts] == ["no_effect"]
    [rung] = [lad for lad in loop.state.ladders.values() if lad.get("of") == 3]
    assert rung["skipped"] == ["handoff_partition: no hotspot.pool"]


def test_a_share_groups_hotspot_skips_the_consumer_group_steps() -> None:
    """A share group's members share every partition: spreading one over lanes, handing
    it off or adding partitions is for consumer groups. Its ladder skips those steps and
    goes on to the next (here, scaling its consumers)."""
    ladder = {"hotspot": ["spread_partition:5", "handoff_partition:5", "scale_consumers:5"]}
    config = config_from_mapping(
        {
            "mode": "act",
            "cooldowns": {"default_s": 5},
            "thresholds": {"default": {"time_lag_s": 10}},
            "hotspot": {"pool": "dedicated"},
            "scale": {"lag_per_replica": 100},
            "ladders": {"default": ladder},
        }
    )
    loop = Loop(config)
    share = replace(gl(HOT), group_type="share")
    loop.feed(share, 5)  # a skipped step takes its tick, as the hand-off without a pool does
    assert kinds(loop.actions) == ["scale_consumers"]
    [rung] = [lad for lad in loop.state.ladders.values() if lad.get("of") == 3]
    assert rung["skipped"] == [
        f"{step}: a share group" for step in ("spread_partition", "handoff_partition")
    ]
    consumer = Loop(config)  # the same summary of a consumer group spreads first
    consumer.feed(gl(HOT), 5)
    assert kinds(consumer.actions) == ["spread_partition"]


def test_no_outcome_by_the_deadline_is_no_effect_and_a_failure_escalates_at_once() -> None:
    loop = Loop(cfg())
    loop.feed(gl(HOT), 3, apply=False)
    loop.feed(gl(HOT), 39, apply=False)  # twice the deadline waiting for an outcome
    assert kinds(loop.actions) == ["spread_partition"]
    loop.feed(gl(HOT), 1, apply=False)
    assert loop.verdicts[0]["why"] == "no outcome by the deadline"
    assert loop.verdicts[0]["time_lag_at_apply_s"] is None
    assert kinds(loop.actions) == ["spread_partition", "spread_partition"]
    failing = Loop(cfg())
    [spread] = failing.feed(gl(HOT), 3, apply=False)
    failing.outcome(spread, "failed")
    nxt = failing.feed(gl(HOT))
    assert [a["params"]["pool"] for a in nxt] == ["dedicated"]


def test_inflow_burst_throttles_only_the_flooding_client_then_releases_it() -> None:
    loop = Loop(cfg())
    for _ in range(20):  # both producers at their usual rate while the group keeps up
        loop.rates(**{"ingest-a": 100_000.0, "ingest-b": 100_000.0})
        loop.feed(gl(CALM))
    flood = [wp(p, 20.0, produce=400.0, consume=100.0) for p in range(4)]
    for _ in range(3):
        loop.rates(**{"ingest-a": 900_000.0, "ingest-b": 101_000.0})
        new = loop.feed(gl(flood))
    assert [(a["type"], a["target"]) for a in loop.actions] == [
        ("throttle_producer", "client-id:ingest-a")
    ]
    throttle = loop.actions[0]
    assert throttle["params"]["producer_byte_rate"] == 100_000  # its usual rate
    assert throttle["reason"]["cause"] == "inflow_burst"
    assert throttle["reason"]["evidence"]["culprits"] == ["ingest-a"]
    assert new == [throttle]
    # the group drains while the incident lasts: verified once the time lag is 0.8 of what
    # it was at apply; the lease is renewed (lease 20 s: after 10 s, 40 ticks)
    for i in range(44):
        loop.rates(**{"ingest-a": 100_000.0, "ingest-b": 101_000.0})
        loop.feed(gl([wp(p, 20.0 - 0.25 * i, produce=100.0) for p in range(4)]))
    assert [v["result"] for v in loop.verdicts] == ["verified"]
    assert loop.verdicts[0]["time_lag_at_apply_s"] == 20.0
    renewals = [a for a in loop.actions[1:] if a["type"] == "throttle_producer"]
    assert renewals and all(a["target"] == "client-id:ingest-a" for a in renewals)
    # lag falls below exit: verified, then released once the incident has cleared
    loop.feed(gl(CALM), 30)
    assert kinds(loop.actions)[-1] == "release_producer"
    assert loop.actions[-1]["target"] == "client-id:ingest-a"
    assert loop.state.throttles == {}


def test_a_partial_first_second_is_not_a_producers_usual_rate() -> None:
    """Producers that just started report a partial first second; their full rate after it
    is no burst (the first five reports are the warm-up), and a later flood names only the
    producer that floods."""
    loop = Loop(cfg())
    lagging = [wp(p, 20.0, produce=400.0, consume=100.0) for p in range(4)]
    loop.rates(**{"ingest-a": 15_000.0, "ingest-b": 22_000.0, "ingest-c": 9_000.0})
    for _ in range(20):  # the group lags from the start (a loaded machine): no culprit
        loop.rates(**{"ingest-a": 100_000.0, "ingest-b": 100_000.0, "ingest-c": 100_000.0})
        loop.feed(gl(lagging))
    assert not [a for a in loop.actions if a["target"].startswith("client-id:ingest-")]
    loop.feed(gl(CALM), 10)
    for _ in range(3):
        loop.rates(**{"ingest-a": 1_000_000.0, "ingest-b": 100_000.0, "ingest-c": 100_000.0})
        loop.feed(gl(lagging))
    throttled = {a["target"] for a in loop.actions if a["type"] == "throttle_producer"}
    assert throttled == {"client-id:ingest-a"}


def test_producers_that_report_rates_are_never_throttled_from_the_map() -> None:
    """After a flood the producers stop (their reports go stale) while the group still
    lags: no culprit among the reports, and the map's producers that report are not
    throttled in their place (the flood bench once throttled all three then)."""
    config = cfg(producers={"ingest-a": ["docs"], "ingest-b": ["docs"], "crawler": ["docs"]})
    loop = Loop(config)
    for _ in range(20):
        loop.rates(**{"ingest-a": 100_000.0, "ingest-b": 100_000.0})
        loop.feed(gl(CALM))
    loop.now += 10_000  # the reports are stale now
    loop.feed(gl(CALM), 80)  # the partitions' usual rates are learnt
    loop.feed(gl([wp(p, 20.0, produce=400.0, consume=100.0) for p in range(4)]), 3)
    targets = {a["target"] for a in loop.actions if a["type"] == "throttle_producer"}
    assert targets == {"client-id:crawler"}  # the one that never reported: the map's


def test_without_producer_rates_the_policy_file_map_is_throttled() -> None:
    flood = [wp(p, 20.0, produce=400.0, consume=100.0) for p in range(4)]
    early = Loop(cfg())
    early.feed(gl(CALM), 20)  # too few summaries to know the usual rate: a slow group
    assert kinds(early.feed(gl(flood), 3)) == ["scale_consumers"]
    loop = Loop(cfg())
    loop.feed(gl(CALM), 80)
    loop.feed(gl(flood), 3)
    assert [(a["type"], a["target"]) for a in loop.actions] == [
        ("throttle_producer", "client-id-prefix:ingest-")
    ]


def test_a_throttle_another_group_let_go_is_released_never_adopted() -> None:
    loop = Loop(cfg())
    for _ in range(20):
        loop.rates(**{"ingest-a": 100_000.0})
        loop.feed(gl(CALM))
    loop.rates(**{"ingest-a": 900_000.0})
    loop.rates(**{"ingest-a": 900_000.0})  # sustained: two reports
    loop.feed(gl([wp(p, 20.0, produce=400.0) for p in range(4)]), 3)
    assert kinds(loop.actions) == ["throttle_producer"]
    loop.feed(gl(CALM), 8)  # the burst's incident clears; the throttle is 3 s old
    hot_elsewhere = gl(HOT, group="indexers", topic="pages")  # another group lags elsewhere
    loop.feed(hot_elsewhere, 60)
    throttle_actions = [a for a in loop.actions if a["type"].endswith("_producer")]
    assert kinds(throttle_actions) == ["throttle_producer", "release_producer"]
    assert loop.state.throttles == {}


def test_slow_group_scales_then_recommends_partitions() -> None:
    loop = Loop(cfg())
    slow = [wp(p, 20.0, produce=100.0, consume=60.0) for p in range(5)]
    loop.feed(gl(slow, parts=2, rate=5.0), 3)
    assert kinds(loop.actions) == ["scale_consumers"]
    assert loop.actions[0]["params"]["replicas"] == 2  # capped at the partition count
    loop.feed(gl(slow, parts=2, rate=5.0), 21)
    assert kinds(loop.actions) == ["scale_consumers", "add_partitions"]
    assert loop.actions[1]["mode"] == "recommend"
    assert loop.verdicts[0]["result"] == "no_effect"


def storm_of_member_w1(partitions: list[int]) -> dict[str, Any]:
    """A ``group_health`` STORM: member w-1 on host-a keeps leaving, holding ``partitions``."""
    return {"event": "group_health", "group": "workers", "status": "STORM", "observed_at_ms": T0,
            "members": [{"member_id": "m-1", "client_id": "w-2", "client_host": "h2"}],
            "rebalances_per_min": 6.0, "commits_stalled": True,
            "storm": {"identity": "w-1@host-a", "member_id": "m-9", "client_id": "w-1",
                      "client_host": "host-a", "instance_id": None, "leaves": 4,
                      "partitions": [{"topic": "docs", "topic_id": None,
                                      "partitions": partitions}]}}  # fmt: skip


def test_a_storm_hands_off_the_partitions_of_the_member_that_keeps_leaving() -> None:
    loop = Loop(cfg())
    loop.state = inputs.fold_health(loop.state, storm_of_member_w1([3]))
    loop.feed(gl(HOT), 3)
    [a] = loop.actions
    assert a["type"] == "spread_partition" and a["params"]["pool"] == "dedicated"
    assert a["reason"]["cause"] == "rebalance_storm"
    assert "w-1" in a["reason"]["recommendation"] and "host-a" in a["reason"]["recommendation"]


def test_a_storm_hand_off_of_two_partitions_is_judged_on_the_worse_of_them() -> None:
    """One step spreads the member's p3 and p5 to the pool; its verdict names both actions
    and waits until both drain: p3 recovering alone is not enough."""
    loop = Loop(cfg())
    loop.state = inputs.fold_health(loop.state, storm_of_member_w1([3, 5]))
    loop.feed(gl(TWO_HOT), 3)
    assert sorted(a["params"]["partition"] for a in loop.actions) == [3, 5]
    # p3 drains in the pool, p5 does not (35 s > 0.8 x 40 s, the worse at apply)
    loop.feed(gl([wp(3, 1.0), wp(5, 35.0, consume=0.0), wp(1, 2.0), wp(2, 1.0)]), 4)
    assert loop.verdicts == []
    loop.feed(gl([wp(3, 1.0), wp(5, 12.0), wp(1, 2.0), wp(2, 1.0)]))
    [v] = loop.verdicts
    assert v["result"] == "verified" and v["time_lag_now_s"] == 12.0
    assert sorted(v["action_ids"]) == sorted(a["id"] for a in loop.actions)


def test_broker_skew_transfers_leadership_and_stalled_only_alerts() -> None:
    loop = Loop(cfg(brokers={"ids": [1, 2, 3]}))
    skew = [wp(0, 20.0, leader=1), wp(1, 18.0, leader=1), wp(2, 0.5, leader=2)]
    loop.feed(gl(skew), 3)
    assert kinds(loop.actions) == ["transfer_leadership"]
    assert loop.actions[0]["params"]["from_broker"] == 1
    stalled = Loop(cfg())
    stalled.feed(gl([wp(p, 20.0, consume=0.0) for p in range(5)]), 40)
    assert stalled.actions == [] and stalled.state.ladders
    assert next(iter(stalled.state.ladders.values()))["phase"] == "alert"


def test_recommend_mode_recommends_the_first_step_and_verifies_nothing() -> None:
    loop = Loop(cfg(mode="recommend"))
    loop.feed(gl(HOT), 40)
    assert kinds(loop.actions) == ["spread_partition"] and loop.verdicts == []


def test_a_slow_groups_rising_inflow_does_not_turn_into_an_unattributed_burst() -> None:
    loop = Loop(cfg())
    calm = [wp(p, 0.5, produce=100.0, consume=100.0) for p in range(4)]
    loop.feed(gl(calm, parts=4), 70)  # the usual rates: 100/s in, 100/s out
    slow = [wp(p, 20.0, produce=150.0, consume=100.0) for p in range(4)]
    loop.feed(gl(slow, parts=4, rate=5.0), 3)
    assert [lad["cause"] for lad in loop.state.ladders.values()] == ["slow_group"]
    rising = [wp(p, 30.0, produce=400.0, consume=100.0) for p in range(4)]
    d = diagnose(gl(rising, parts=4, rate=5.0), EXIT_S, [], DiagnosisConfig(),
                 baseline=next(iter(loop.state.baselines.values())))  # fmt: skip
    assert d.cause == "inflow_burst" and d.evidence["source"] == "partition_rates"
    loop.feed(gl(rising, parts=4, rate=5.0), 3)  # 4x the usual inflow, no producer named
    assert [lad["cause"] for lad in loop.state.ladders.values()] == ["slow_group"]
    assert "throttle_producer" not in kinds(loop.actions)
    for _ in range(5):  # the producer's warm-up: its usual rate
        loop.rates(**{"ingest-1": 1000.0})
    loop.rates(**{"ingest-1": 9000.0})  # a named producer's burst (two reports: sustained)
    loop.rates(**{"ingest-1": 9000.0})  # still takes over
    loop.feed(gl(rising, parts=4, rate=5.0), 3)
    assert [lad["cause"] for lad in loop.state.ladders.values()] == ["inflow_burst"]


def test_a_storms_hand_off_is_kept_when_the_incident_clears_a_hotspots_spread_is_not() -> None:
    storm = {"event": "group_health", "group": "workers", "status": "STORM", "observed_at_ms": T0,
             "members": [], "rebalances_per_min": 6.0, "commits_stalled": False,
             "storm": {"identity": "w-1@host-a", "member_id": "m-9", "client_id": "w-1",
                       "client_host": "host-a", "instance_id": None, "leaves": 3,
                       "partitions": [{"topic": "docs", "topic_id": None,
                                       "partitions": [3]}]}}  # fmt: skip
    ok = {**storm, "status": "OK", "storm": None}
    kept = Loop(cfg())
    kept.state = inputs.fold_health(kept.state, storm)
    kept.feed(gl(HOT), 3)
    assert kinds(kept.actions) == ["spread_partition"]
    kept.state = inputs.fold_health(kept.state, ok)  # the storm ended: it is in the pool
    kept.feed(gl(CALM), 80)
    assert kinds(kept.actions) == ["spread_partition"]  # never given back to the members
    assert kept.verdicts and kept.verdicts[0]["result"] == "verified"
    spread = Loop(cfg(ladders={"default": {"hotspot": ["spread_partition:5"]}}))
    spread.feed(gl(HOT), 3)
    spread.feed(gl(CALM), 80)
    assert kinds(spread.actions) == ["spread_partition", "restore_partition"]
