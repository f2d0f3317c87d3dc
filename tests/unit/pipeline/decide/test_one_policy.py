"""The rules that let one policy serve every incident (pure, no broker): lag counts only where
the model judges a partition late, a rebalance's own lag and a few partitions not yet far
behind change nothing, a cause must hold before it acts, a verdict needs a lasting effect,
scale hints follow the rates, and a throttle follows its producer's pressure."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from pipeline.decide import inputs, rules
from pipeline.decide.policy import level
from pipeline.decide.policy_config import load_policy_config
from pipeline.decide.policy_types import Thresholds
from schemas import LagStatus, validate
from tests.support.decide import CALM, T0, Loop, cfg, gl, kinds, wp

ROOT = Path(__file__).resolve().parents[4]

GATED = {"default": {"time_lag_s": 1.0, "offset_lag": 10**9, "accel_per_s2": 10**9,
                     "exit_ratio": 0.5, "enter_windows": 2, "exit_windows": 4,
                     "min_status": "WARN"}}  # fmt: skip


def ok(p: int, lag_s: float, **kw: Any) -> Any:
    return replace(wp(p, lag_s, **kw), status=LagStatus.OK)


def health(loop: Loop, group: str = "workers", *, members: int = 2,
           moved_ms: int | None = None) -> None:  # fmt: skip
    """A group_health event as the model publishes it (the fields diagnosis reads)."""
    e = {"event": "group_health", "group": group, "observed_at_ms": loop.now, "status": "OK",
         "members": [f"m{i}" for i in range(members)], "generation": 3,
         "rebalances_per_min": 0.0, "commits_stalled": False, "storm": None,
         "last_rebalance_ms": moved_ms}  # fmt: skip
    loop.state = inputs.fold_health(loop.state, e)


def pressure(loop: Loop, cid: str, rate: float, *, throttle_ms: float, queued: int = 0) -> None:
    e = {"event": "producer_rates", "v": 2, "client_id": cid, "topic": "docs",
         "records_per_s": rate / 100, "bytes_per_s": rate, "window_s": 1.0,
         "at_ms": loop.now, "throttle_ms": throttle_ms, "queued": queued}  # fmt: skip
    validate(e)
    loop.state = inputs.fold_producer_rate(loop.state, e, loop.config.burst_ratio)


def test_the_shipped_policy_loads_with_every_remedy_in_act_mode() -> None:
    c = load_policy_config(ROOT / "deploy" / "policy.default.toml", env={})
    assert c.mode.value == "act" and c.diagnose
    assert {"throttle_producer", "spread_partition", "scale_consumers", "add_partitions",
            "transfer_leadership"} <= c.enabled  # fmt: skip
    assert c.default_thresholds.min_status == "WARN"


def test_a_slow_committer_within_its_cadence_is_no_incident_a_late_one_is() -> None:
    t = Thresholds(time_lag_s=1.0, exit_ratio=0.5, offset_lag=10**9, accel_per_s2=10**9,
                   min_status="WARN")  # fmt: skip
    # commits every 5 s: 4 s of time lag, judged OK by the model against its cadence
    assert level(gl([ok(0, 4.0), ok(1, 3.0)]), t) == "below"
    assert level(gl([wp(0, 4.0), ok(1, 3.0)]), t) == "above"  # late against its cadence
    assert level(gl([wp(0, 0.6), ok(1, 3.0)]), t) == "between"
    # OK counts every partition (the behaviour without the gate)
    assert level(gl([ok(0, 4.0)]), replace(t, min_status="OK")) == "above"


def test_a_few_partitions_behind_but_not_far_beyond_the_rest_change_nothing() -> None:
    loop = Loop(cfg(thresholds=GATED))
    near = [wp(3, 2.0), ok(1, 0.9), ok(2, 0.3), ok(0, 0.2), ok(4, 0.1)]  # 2.2x: not hot
    loop.feed(gl(near, parts=16), 20)
    assert loop.actions == []
    assert loop.state.ladders and all(
        lad["cause"] == "watching" for lad in loop.state.ladders.values()
    )


def test_a_rebalance_is_waited_out_then_a_lasting_slow_group_is_scaled() -> None:
    loop = Loop(cfg(thresholds=GATED, diagnosis={"settle_s": 5.0}))
    slow = [wp(p, 5.0, produce=200.0, consume=100.0) for p in range(4)]
    health(loop, members=2, moved_ms=loop.now)  # the group just rebalanced
    loop.feed(gl(slow, parts=4), 16)  # 4 s: within settle_s
    assert loop.actions == []
    assert next(iter(loop.state.ladders.values()))["cause"] == "rebalancing"
    loop.feed(gl(slow, parts=4), 8)  # settled, still slow
    assert kinds(loop.actions) == ["scale_consumers"]
    # 2 members x 200/100 x 1.5 = 6, capped at the 4 partitions
    assert loop.actions[0]["params"]["replicas"] == 4
    assert loop.actions[0]["reason"]["members"] == 2


def test_a_slow_group_waits_its_confirmation_and_a_burst_named_meanwhile_wins() -> None:
    loop = Loop(cfg(thresholds=GATED, diagnosis={"confirm_s": {"slow_group": 3.0}}))
    for _ in range(20):  # usual rates learnt while calm
        loop.rates(**{"ingest-a": 100_000.0, "ingest-b": 100_000.0})
        loop.feed(gl([ok(p, 0.1) for p in range(4)], parts=4))
    lagging = [wp(p, 5.0, produce=400.0, consume=100.0) for p in range(4)]
    loop.feed(gl(lagging, parts=4), 6)  # slow, by the summaries alone: not yet 3 s
    assert loop.actions == []
    loop.rates(**{"ingest-a": 900_000.0, "ingest-b": 100_000.0})  # the reports arrive: one
    loop.feed(gl(lagging, parts=4), 2)  # high report is no burst yet (one heavy record?)
    assert loop.actions == []
    loop.rates(**{"ingest-a": 900_000.0, "ingest-b": 100_000.0})  # two are
    loop.feed(gl(lagging, parts=4), 1)
    assert [(a["type"], a["target"]) for a in loop.actions] == [
        ("throttle_producer", "client-id:ingest-a")
    ]


def test_verified_only_once_the_effect_lasts_hold_s() -> None:
    loop = Loop(cfg(verify={"hold_s": 2.0}))
    hot = [wp(3, 40.0, consume=0.0), wp(1, 1.0), wp(2, 0.5), wp(0, 0.4)]
    loop.feed(gl(hot), 3)
    assert kinds(loop.actions) == ["spread_partition"]
    better = [wp(3, 20.0), wp(1, 1.0), wp(2, 0.5), wp(0, 0.4)]
    loop.feed(gl(better), 4)  # 1 s better, then a relapse: no verdict yet
    loop.feed(gl(hot), 1)
    loop.feed(gl(better), 6)  # 1.5 s: the hold restarted at the relapse
    assert loop.verdicts == []
    loop.feed(gl(better), 3)
    assert [v["result"] for v in loop.verdicts] == ["verified"]
    assert "for 2" in loop.verdicts[0]["why"]


def _flooded(loop: Loop) -> None:
    for _ in range(20):
        loop.rates(**{"ingest-a": 100_000.0, "ingest-b": 100_000.0})
        loop.feed(gl(CALM))
    flood = [wp(p, 20.0, produce=400.0, consume=100.0) for p in range(4)]
    for _ in range(3):
        loop.rates(**{"ingest-a": 900_000.0, "ingest-b": 101_000.0})
        loop.feed(gl(flood))
    assert kinds(loop.actions) == ["throttle_producer"]


def test_a_throttle_is_kept_while_its_producer_pushes_then_stepped_up_then_released() -> None:
    loop = Loop(cfg())  # lease 20 s, cooldown 5 s: renewals every 10 s
    _flooded(loop)
    first = loop.actions[0]["params"]["producer_byte_rate"]
    # the consumers catch up (the incident clears) while the flooder still pushes
    for _ in range(200):  # 50 s
        pressure(loop, "ingest-a", 100_000.0, throttle_ms=400.0, queued=50_000)
        loop.feed(gl(CALM))
    throttles = [a for a in loop.actions if a["type"] == "throttle_producer"]
    assert "release_producer" not in kinds(loop.actions)
    rates = [a["params"]["producer_byte_rate"] for a in throttles]
    assert rates[0] == first and rates[-1] > first  # stepped up while the consumers keep up
    assert all(b >= a for a, b in pairwise(rates))
    # it stops pushing (its queue drained): released after the quiet period
    for _ in range(20):
        pressure(loop, "ingest-a", 100_000.0, throttle_ms=0.0, queued=0)
        loop.feed(gl(CALM))
    assert kinds(loop.actions)[-1] == "release_producer"
    assert loop.actions[-1]["reason"]["why"] == "its producer no longer pushes against it"
    assert loop.state.throttles == {}


def test_a_throttle_whose_producer_stops_pushing_is_released_mid_incident() -> None:
    loop = Loop(cfg())
    _flooded(loop)
    flood = [wp(p, 20.0, produce=100.0, consume=100.0) for p in range(4)]
    for _ in range(4):
        pressure(loop, "ingest-a", 100_000.0, throttle_ms=300.0)
        loop.feed(gl(flood))
    assert "release_producer" not in kinds(loop.actions)
    for _ in range(28):  # 7 s quiet, past the cooldown: the backlog still drains
        pressure(loop, "ingest-a", 100_000.0, throttle_ms=0.0)
        loop.feed(gl(flood))
    assert kinds(loop.actions)[-1] == "release_producer"


def test_a_standing_scale_hint_is_renewed_while_the_incident_lasts_unbudgeted() -> None:
    loop = Loop(cfg(thresholds=GATED, budget={"actions_per_minute": 1}))
    health(loop, members=1)
    slow = [wp(p, 5.0, produce=200.0, consume=100.0) for p in range(4)]
    loop.feed(gl(slow, parts=4), 4 * 50)  # 50 s of a slow group
    hints = [a for a in loop.actions if a["type"] == "scale_consumers"]
    assert len(hints) == 3  # the hint at ~0.5 s, renewed every 20 s
    assert len({a["id"] for a in hints}) == 3 and {a["params"]["replicas"] for a in hints} == {4}
    assert [a["reason"]["budgeted"] for a in hints] == [True, False, False]
    loop.feed(gl([ok(p, 0.1) for p in range(4)], parts=4), 4 * 30)  # cleared: no more renewals
    assert len([a for a in loop.actions if a["type"] == "scale_consumers"]) == 3


def test_a_partition_nobody_consumes_is_not_spread() -> None:
    """A member restarting (its partitions released, no commits: STOP) is no hotspot; the
    same partition still consumed, slowly (WARN or STALL), is."""
    loop = Loop(cfg(thresholds=GATED))
    rest = [ok(p, 0.1) for p in (0, 1, 2)]
    stopped = replace(wp(3, 5.0, consume=0.0), status=LagStatus.STOP)
    loop.feed(gl([stopped, *rest], parts=16), 12)
    assert loop.actions == []
    stuck = replace(wp(3, 5.0), status=LagStatus.STALL)  # its worker reports, stuck on work
    loop.feed(gl([stuck, *rest], parts=16), 2)
    assert kinds(loop.actions) == ["spread_partition"]


def test_an_overloaded_group_falling_behind_unevenly_is_not_a_hotspot() -> None:
    """One worker for four partitions: one partition is 5x behind the next, but the next
    falls behind too (its lag grows): a slow group in the making, not a hotspot."""
    loop = Loop(cfg(thresholds=GATED, diagnosis={"confirm_s": {"slow_group": 3.0}}))
    grow = {"produce": 50.0, "consume": 30.0}
    first = [replace(wp(1, 5.0, **grow), lag_rate_per_s=20.0),
             replace(ok(0, 1.0, **grow), lag_rate_per_s=20.0),
             replace(ok(2, 0.9, **grow), lag_rate_per_s=20.0)]  # fmt: skip
    loop.feed(gl(first, parts=4), 8)
    assert "spread_partition" not in kinds(loop.actions)


def test_a_pools_own_group_is_never_acted_on() -> None:
    loop = Loop(cfg())
    hot = [wp(3, 40.0, consume=0.0), wp(1, 1.0), wp(2, 0.5), wp(0, 0.4)]
    loop.feed(gl(hot, group="workers.pool.dedicated"), 10)
    assert loop.actions == []
    loop.feed(gl(hot, group="workers"), 3)
    assert kinds(loop.actions) == ["spread_partition"]


def test_a_restarting_members_partitions_are_waited_out_until_they_drain() -> None:
    """A static member restarts (no rebalance): its partitions go unconsumed (STOP), come
    back and drain far behind the rest. Nothing acts until settle_s after the last STOP."""
    loop = Loop(cfg(thresholds=GATED, diagnosis={"settle_s": 5.0}))
    rest = [ok(p, 0.1) for p in (0, 1, 2)]
    gone = replace(wp(3, 2.0, consume=0.0), status=LagStatus.STOP)
    loop.feed(gl([gone, *rest], parts=16), 8)
    draining = wp(3, 2.5)
    loop.feed(gl([draining, *rest], parts=16), 16)  # 4 s after the last STOP
    assert loop.actions == []
    assert loop.state.ladders and next(iter(loop.state.ladders.values()))["cause"] == (
        "rebalancing"
    )
    loop.feed(gl([draining, *rest], parts=16), 8)  # past settle_s and still behind: a hotspot
    assert kinds(loop.actions) == ["spread_partition"]


def test_heavy_records_on_a_few_partitions_are_spread_not_throttled() -> None:
    """A few partitions far behind while their producers' bytes jumped (heavy documents on
    a few keys): spread those partitions; a burst is for a group lagging everywhere."""
    loop = Loop(cfg())
    for _ in range(20):
        loop.rates(**{"ingest-a": 100_000.0, "ingest-b": 100_000.0})
        loop.feed(gl(CALM))
    hot = [wp(3, 40.0, consume=50.0), wp(1, 1.0), wp(2, 0.5), wp(0, 0.4)]
    for _ in range(3):
        loop.rates(**{"ingest-a": 1_500_000.0, "ingest-b": 100_000.0})
        loop.feed(gl(hot))
    assert kinds(loop.actions) == ["spread_partition"]


def test_a_storm_needs_a_member_that_keeps_leaving() -> None:
    """A rollout moves the generation as often as a storm, each member leaving once: no
    hand-off; a member that left twice in the window keeps leaving."""
    from pipeline.decide.diagnosis import DiagnosisConfig, diagnose

    s = gl([wp(p, 20.0, consume=50.0) for p in range(4)], parts=4)
    storm = {"status": "STORM", "rebalances_per_min": 6.0, "commits_stalled": True,
             "storm": {"identity": "w-1", "leaves": 1, "partitions": []}}  # fmt: skip
    cfg_ = DiagnosisConfig(settle_s=5.0)
    assert diagnose(s, 5.0, [], cfg_, health=storm).cause == "rebalancing"
    storm["storm"] = {"identity": "w-1", "leaves": 2, "partitions": []}
    assert diagnose(s, 5.0, [], cfg_, health=storm).cause == "rebalance_storm"


def test_after_a_spread_the_heavy_records_producers_are_not_throttled() -> None:
    """The spread's lanes load the other partitions, which fall behind for a while, while the
    heavy documents' producers still write 15x their bytes: the hotspot's ladder goes on
    (judged by its partition), no burst takes it over."""
    loop = Loop(cfg())
    for _ in range(20):
        loop.rates(**{"ingest-a": 100_000.0, "ingest-b": 100_000.0})
        loop.feed(gl(CALM))
    hot = [wp(3, 40.0, consume=50.0), wp(1, 1.0), wp(2, 0.5), wp(0, 0.4)]
    loop.rates(**{"ingest-a": 1_500_000.0})
    loop.feed(gl(hot), 3)
    assert kinds(loop.actions) == ["spread_partition"]
    everywhere = [wp(p, 20.0, produce=400.0, consume=100.0) for p in range(4)]
    for _ in range(8):
        loop.rates(**{"ingest-a": 1_500_000.0, "ingest-b": 100_000.0})
        loop.feed(gl(everywhere))
    assert "throttle_producer" not in kinds(loop.actions)


def test_a_second_hot_partition_on_its_way_up_does_not_hold_back_the_first() -> None:
    """Two partitions get heavy documents; one crossed the enter level, the other is behind
    but not there yet: the first is spread at once (the second is not the "rest" it is
    judged against), the second when it crosses."""
    loop = Loop(cfg(thresholds=GATED))
    rest = [ok(p, 0.1) for p in (0, 1, 2)]
    loop.feed(gl([wp(11, 1.2), wp(4, 0.8), *rest], parts=16), 2)
    assert [a["params"]["partition"] for a in loop.actions] == [11]
    loop.feed(gl([wp(11, 1.4), wp(4, 1.1), *rest], parts=16), 1)
    assert [a["params"]["partition"] for a in loop.actions] == [11, 4]


def test_a_hot_partition_whose_status_flickers_still_opens_its_incident() -> None:
    """While the model learns a hot partition's slower pace its status flickers WARN/OK;
    the time lag stays above the level, so the windows counted so far are kept."""
    loop = Loop(cfg(thresholds=GATED))
    rest = [ok(p, 0.1) for p in (0, 1, 2)]
    for i in range(4):
        hot = wp(4, 1.2 + 0.1 * i) if i % 2 else ok(4, 1.2 + 0.1 * i)
        loop.feed(gl([hot, *rest], parts=16), 1)
    assert kinds(loop.actions) == ["spread_partition"]


def test_a_rising_inflow_raises_the_standing_scale_hint() -> None:
    loop = Loop(cfg(thresholds=GATED, scale={"lag_per_replica": 10**6}))
    health(loop, members=1)
    loop.feed(gl([wp(p, 5.0, produce=120.0, consume=100.0) for p in range(8)], parts=8), 3)
    assert [a["params"]["replicas"] for a in loop.actions] == [2]  # 1 x 1.2 x 1.5
    rising = gl([wp(p, 9.0, produce=300.0, consume=100.0) for p in range(8)], parts=8)
    loop.feed(rising, 2)
    assert [a["params"]["replicas"] for a in loop.actions] == [2]  # within the cooldown
    loop.feed(rising, 24)
    assert [a["params"]["replicas"] for a in loop.actions] == [2, 5]  # 1 x 3 x 1.5


def test_lag_on_a_topic_whose_producer_is_held_throttled_is_the_throttles_own() -> None:
    loop = Loop(cfg())
    _flooded(loop)
    for _ in range(40):  # the incident clears; the flooder still pushes: the throttle holds
        pressure(loop, "ingest-a", 100_000.0, throttle_ms=400.0, queued=50_000)
        loop.feed(gl(CALM))
    one = [wp(3, 40.0, consume=50.0), wp(1, 1.0), wp(2, 0.5), wp(0, 0.4)]
    for _ in range(8):  # the step-ups push the consumers: one partition falls behind
        pressure(loop, "ingest-a", 100_000.0, throttle_ms=400.0, queued=50_000)
        loop.feed(gl(one))
    assert "spread_partition" not in kinds(loop.actions)


def test_a_flickering_hotspot_keeps_its_confirmation_running() -> None:
    """The hotspot's 0.5 s confirmation runs through summaries where the hot partition reads
    OK (nothing to do yet is no evidence against it): spread after 0.5 s, not after 0.5 s
    of WARN in a row."""
    loop = Loop(cfg(thresholds=GATED, diagnosis={"confirm_s": {"hotspot": 0.5}}))
    rest = [ok(p, 0.1) for p in (0, 1, 2)]
    for i in range(4):  # WARN, OK, WARN, OK: the incident opens, hot every other summary
        hot = wp(4, 1.2 + 0.1 * i) if i % 2 == 0 else ok(4, 1.2 + 0.1 * i)
        loop.feed(gl([hot, *rest], parts=16), 1)
    assert loop.actions == []
    loop.feed(gl([wp(4, 1.7), *rest], parts=16), 1)  # 0.5 s since the hotspot was named
    assert kinds(loop.actions) == ["spread_partition"]


def test_the_time_lags_growth_is_read_over_the_last_seconds() -> None:
    samples: list[list[float]] = []
    for i in range(40):  # 10 s, one summary each 250 ms; the time lag grows 0.5 s/s from 5 s
        samples = rules.time_lag_samples(samples, T0 + 250 * i, 0.5 * max(0, i - 20) * 0.25)
    assert samples[-1][0] - samples[0][0] == pytest.approx(rules.GROWTH_SPAN_MS, abs=250)
    assert rules.time_lag_growth(samples) == pytest.approx(0.5)
    assert rules.time_lag_growth(samples[-3:]) is None  # 0.5 s: too short a span to read
    assert rules.time_lag_growth(None) is None


def test_a_slow_group_on_a_ramp_is_sized_by_its_time_lags_growth_not_its_trailing_rates() -> None:
    loop = Loop(cfg(thresholds=GATED, scale={"lag_per_replica": 10**6},
                    diagnosis={"confirm_s": {"slow_group": 3.0}}))  # fmt: skip
    health(loop, members=1)
    # the fitted rates trail the ramp (1.2x: 2 replicas); the time lag grows 0.7 s each
    # second: the one member consumes 30 % of the inflow, so 1 / 0.3 x 1.5 = 5 are needed
    for i in range(16):
        lag_s = 2.0 + 0.7 * 0.25 * i
        loop.feed(gl([wp(p, lag_s, produce=120.0, consume=100.0) for p in range(8)], parts=8))
    (hint,) = loop.actions
    assert hint["params"]["replicas"] == 5
    assert hint["reason"]["time_lag_growth"] == pytest.approx(0.7, abs=0.01)


def test_a_spread_stays_until_its_incident_has_been_clear_restore_after_s() -> None:
    """A spread that works clears its incident while the heavy records may still come: it is
    restored only once the incident has stayed clear ``hotspot.restore_after_s``, and an
    incident that comes back meanwhile keeps it (no restore, no second spread)."""
    loop = Loop(cfg(hotspot={"restore_after_s": 20.0}))
    hot = [wp(3, 40.0, consume=50.0), wp(1, 1.0), wp(2, 0.5), wp(0, 0.4)]
    loop.feed(gl(hot), 4)
    assert kinds(loop.actions) == ["spread_partition"]
    loop.feed(gl(CALM), 40)  # 10 s: clear (after its exit windows), not yet 20 s
    assert kinds(loop.actions) == ["spread_partition"]
    loop.feed(gl(hot), 4)  # the heavy records again: the spread holds, nothing new
    loop.feed(gl(CALM), 60)  # 15 s clear: the window starts again from this clear
    assert kinds(loop.actions) == ["spread_partition"]
    loop.feed(gl(CALM), 30)  # 22.5 s clear
    assert kinds(loop.actions) == ["spread_partition", "restore_partition"]
    assert loop.actions[-1]["reason"]["why"] == "incident cleared"


def test_the_shipped_policy_keeps_a_spread_a_minute_after_its_incident() -> None:
    c = load_policy_config(ROOT / "deploy" / "policy.default.toml", env={})
    assert c.spread_restore_after_s == 60.0


def _slow(lag_s: float) -> Any:
    return gl([wp(p, lag_s - 0.1 * p, produce=200.0, consume=100.0) for p in range(4)], parts=4)


def test_a_slow_group_acts_once_it_held_its_confirmation() -> None:
    loop = Loop(cfg(thresholds=GATED, diagnosis={"confirm_s": {"slow_group": 2.0}}))
    acted_at = None
    for i in range(20):  # growing 0.5 s each second
        loop.feed(_slow(2.0 + 0.125 * i))
        if loop.actions and acted_at is None:
            acted_at = i
    assert kinds(loop.actions) == ["scale_consumers"]
    # the incident opens on the 2nd summary (enter_windows), the cause holds 2 s from there
    assert acted_at == 1 + 8


def test_a_slow_group_whose_time_lag_falls_waits_and_acts_once_it_grows_again() -> None:
    """The fitted rates still say slow (their window holds a pause), but the worst time lag
    has fallen over the last second: the backlog drains, no consumer is added. It grows
    again: the group falls behind after all, and is scaled at once (its 2 s have held)."""
    loop = Loop(cfg(thresholds=GATED, diagnosis={"confirm_s": {"slow_group": 2.0}}))
    lags = [3.0 + 0.25 * i for i in range(4)] + [4.0 - 0.2 * i for i in range(12)]
    for lag in lags:  # 1 s rising (a pause), then 3 s draining
        loop.feed(_slow(lag))
    assert loop.actions == []
    assert next(iter(loop.state.ladders.values()))["cause"] == "slow_group"
    for i in range(5):  # falling behind again
        loop.feed(_slow(1.8 + 0.2 * i))
    assert kinds(loop.actions) == ["scale_consumers"]


def test_a_slow_group_on_a_steepening_ramp_is_sized_by_its_latest_growth() -> None:
    """The time lag grows ever faster (the inflow still rises): since the incident opened it
    grew 0.43 s/s (1 / 0.57 x 1.5: 3 replicas), over the last second 0.6 s/s (1 / 0.4 x 1.5:
    4); the hint asks for what the latest second needs."""
    loop = Loop(cfg(thresholds=GATED, scale={"lag_per_replica": 10**6},
                    diagnosis={"confirm_s": {"slow_group": 2.0}}))  # fmt: skip
    health(loop, members=1)
    growth = [0.3] * 6 + [0.6] * 6  # s/s, each for one 250 ms summary
    lag_s = 1.0
    for g in growth:
        lag_s += g * 0.25
        loop.feed(gl([wp(p, lag_s, produce=60.0, consume=50.0) for p in range(8)], parts=8))
    (hint,) = loop.actions
    assert hint["reason"]["time_lag_growth"] == pytest.approx(0.6, abs=0.01)
    assert hint["params"]["replicas"] == 4
    lags = loop.state.ladders[next(iter(loop.state.ladders))]["time_lags"]
    assert rules.time_lag_growth(lags) < 0.5  # the 3 s reading alone: 3 replicas
