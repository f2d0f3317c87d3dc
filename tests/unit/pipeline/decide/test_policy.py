"""The policy's rules, one table or scenario each (pure: no broker, time passed in).

These test each rule and rail on its own (``diagnosis.enabled = false``: every enabled rule
acts in any incident); diagnosis, the ladders and verification are in test_remedies.py."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import orjson
import pytest

from pipeline.decide.policy import (
    ABOVE,
    BELOW,
    BETWEEN,
    Incident,
    PolicyState,
    apply_control,
    decide,
    incident_key,
    level,
    step_hysteresis,
)
from pipeline.decide.policy_config import PolicyConfig, Thresholds, config_from_mapping
from schemas import GroupLag, LagStatus, WorstPartition, sign, validate

T0 = 1_800_000_000_000
TICK = 250
KEY = b"k" * 32
T = Thresholds(time_lag_s=10, offset_lag=1000, accel_per_s2=100, exit_ratio=0.5,
               enter_windows=3, exit_windows=4)  # fmt: skip


def cfg(**sections: Any) -> PolicyConfig:
    """A config with small thresholds and every rail reachable in a few ticks."""
    base: dict[str, Any] = {
        "thresholds": {"default": {"time_lag_s": 10, "offset_lag": 1000, "accel_per_s2": 100,
                                   "exit_ratio": 0.5, "enter_windows": 3, "exit_windows": 4}},
        "cooldowns": {"default_s": 5, "transfer_leadership": 5, "add_partitions": 5},
        "budget": {"actions_per_minute": 100},
        "throttle": {"start_bytes_per_s": 8000, "floor_bytes_per_s": 1000, "step_ratio": 0.5,
                     "lease_s": 20},
        "allow": {"throttle_client_ids": ["ingest-*"], "partition_topics": []},
        "producers": {"ingest-*": ["docs"], "billing": ["docs"]},
        "actions": {"enabled": ["throttle_producer", "release_producer"]},
        "diagnosis": {"enabled": False},
    }  # fmt: skip
    for name, value in sections.items():
        base[name] = {**base.get(name, {}), **value} if isinstance(value, dict) else value
    return config_from_mapping(base)


def wp(partition: int, time_lag_s: float, leader: int = -1, accel: float = 0.0) -> WorstPartition:
    return WorstPartition(partition, int(time_lag_s * 100), time_lag_s, 1.0, accel, 100.0,
                          90.0, LagStatus.WARN, leader)  # fmt: skip


def gl(time_lag_s: float, *, lag: int | None = None, rate: float = 5.0, group: str = "workers",
       topic: str = "docs", parts: int = 4, worst: Iterable[WorstPartition] | None = None,
       at: int = T0) -> GroupLag:  # fmt: skip
    w = tuple(worst) if worst is not None else (wp(0, time_lag_s), wp(1, time_lag_s / 2))
    offsets = lag if lag is not None else int(time_lag_s * 10)
    return GroupLag(group, topic, at, LagStatus.WARN, offsets, time_lag_s, rate, parts, parts, w)


Out = list[tuple[int, dict[str, Any]]]


def run(config: PolicyConfig, series: Iterable[GroupLag | float], state: PolicyState | None = None,
        start: int = T0, tick: int = TICK) -> tuple[Out, PolicyState]:  # fmt: skip
    """Feed summaries (or bare time lags) one tick apart; return (tick index, action) pairs."""
    state = state or PolicyState()
    out: list[tuple[int, dict[str, Any]]] = []
    for i, item in enumerate(series):
        now = start + i * tick
        s = gl(item) if isinstance(item, int | float) else item
        actions, state = decide(replace(s, observed_at_ms=now), state, config, now)
        out += [(i, a) for a in actions]
    return out, state


def types(out: list[tuple[int, dict[str, Any]]]) -> list[str]:
    return [a["type"] for _, a in out]


# -- measurement and hysteresis ------------------------------------------------------------


@pytest.mark.parametrize(
    ("summary", "want"),
    [
        (gl(10.0), ABOVE),  # time lag at the enter level
        (gl(1.0, lag=1000), ABOVE),  # offset lag at its enter level
        (gl(6.0, worst=[wp(0, 6.0, accel=100)]), ABOVE),  # accelerating above exit
        (gl(1.0, worst=[wp(0, 1.0, accel=1e6)]), BELOW),  # accelerating but tiny: not yet
        (gl(6.0), BETWEEN),  # dead band
        (gl(1.0, lag=600), BETWEEN),  # offset lag in its dead band
        (gl(4.9, lag=499), BELOW),
    ],
)
def test_level(summary: GroupLag, want: str) -> None:
    assert level(summary, T) == want


def test_hysteresis_needs_n_windows_above_and_m_below() -> None:
    inc = Incident()
    for n, lvl in enumerate([ABOVE, ABOVE, BETWEEN, ABOVE, ABOVE], start=1):
        step_hysteresis(inc, lvl, T, n)
    assert not inc.active  # the dead band reset the count
    step_hysteresis(inc, ABOVE, T, 6)
    assert inc.active and inc.since_ms == 6
    for n, lvl in enumerate([BELOW, BELOW, BELOW, BETWEEN, BELOW, BELOW, BELOW], start=7):
        step_hysteresis(inc, lvl, T, n)
        assert inc.active
    step_hysteresis(inc, BELOW, T, 14)
    assert not inc.active


def test_a_stall_the_workers_confirm_opens_the_incident_on_its_first_window() -> None:
    stalled = replace(wp(0, 10.0), status=LagStatus.STALL)
    for worst, windows in (([stalled, wp(1, 1.0)], 1), ([wp(0, 10.0), wp(1, 1.0)], 3)):
        state = PolicyState()
        opened = []
        for i in range(4):
            now = T0 + i * TICK
            _, state = decide(gl(10.0, worst=worst, at=now), state, cfg(), now)
            opened.append(state.incidents[incident_key("workers", "docs")].active)
        assert opened.index(True) == windows - 1, worst[0].status
    # below the enter level a stall opens nothing: the level still decides
    state = PolicyState()
    for i in range(4):
        now = T0 + i * TICK
        _, state = decide(gl(1.0, worst=[replace(wp(0, 1.0), status=LagStatus.STALL)], at=now),
                          state, cfg(), now)  # fmt: skip
    assert not state.incidents[incident_key("workers", "docs")].active


# -- throttles -----------------------------------------------------------------------------


def test_throttle_opens_after_enter_windows_only_for_allowed_producers_of_the_topic() -> None:
    out, _ = run(cfg(), [20.0] * 3)
    assert [(i, a["type"], a["target"]) for i, a in out] == [
        (2, "throttle_producer", "client-id-prefix:ingest-")
    ]  # billing writes docs too, but is not allow-listed
    action = out[0][1]
    assert action["params"] == {"entity": "client-id-prefix", "name": "ingest-",
                                "producer_byte_rate": 8000, "lease_s": 20.0,
                                "topics": ["docs"]}  # fmt: skip
    assert action["mode"] == "recommend" and action["issued_at"] == T0 + 2 * TICK
    assert (
        action["reason"]["time_lag_s"] == 20.0
        and action["reason"]["thresholds"]["time_lag_s"] == 10
    )
    other_topic, _ = run(cfg(), [gl(20.0, topic="orders")] * 10)
    assert other_topic == []


def test_throttle_steps_down_while_lag_grows_never_below_floor_and_renews_before_lease() -> None:
    out, _ = run(cfg(), [20.0] * 400)  # 100 s of a growing incident
    throttles = [(i, a) for i, a in out if a["type"] == "throttle_producer"]
    rates = [a["params"]["producer_byte_rate"] for _, a in throttles]
    assert rates[:4] == [8000, 4000, 2000, 1000] and set(rates[4:]) == {1000}
    gaps_ms = [(b - a) * TICK for (a, _), (b, _) in itertools.pairwise(throttles)]
    assert all(5_000 <= g < 20_000 for g in gaps_ms)  # after the cooldown, before the lease ends
    assert len({a["id"] for _, a in throttles}) == len(throttles)  # renewals are new decisions


def test_throttle_renews_at_the_same_rate_when_lag_stops_growing() -> None:
    out, _ = run(cfg(), [gl(20.0, rate=-3.0)] * 200)
    rates = {a["params"]["producer_byte_rate"] for _, a in out}
    assert rates == {8000} and len(out) > 2
    assert [a["reason"]["budgeted"] for _, a in out][:2] == [True, False]


def test_release_when_cleared_and_no_rethrottle_inside_the_cooldown() -> None:
    series = [20.0] * 10 + [1.0] * 12 + [20.0] * 3 + [20.0] * 30
    out, state = run(cfg(), series)
    # cleared at tick 13, but a release waits out the cooldown (5 s, 20 ticks) since the
    # throttle at tick 2: a throttle and its release never flap inside one cooldown
    assert [(i, a["type"]) for i, a in out][:2] == [
        (2, "throttle_producer"),
        (22, "release_producer"),
    ]
    assert out[1][1]["params"] == {"entity": "client-id-prefix", "name": "ingest-"}
    # incident reopens at tick 24, but the release at 22 holds it off for 5 s (20 ticks)
    assert out[2][0] == 42 and out[2][1]["type"] == "throttle_producer"
    assert out[2][1]["id"] != out[0][1]["id"]  # a new incident, a new id
    assert state.throttles["client-id-prefix:ingest-"].rate == 8000


def test_oscillation_in_the_dead_band_never_flaps() -> None:
    series = [20.0] * 3 + [6.0, 4.0, 6.0, 4.0, 4.0, 4.0, 6.0] * 20
    out, _ = run(cfg(), series)
    assert "release_producer" not in types(out)


def test_a_throttle_held_by_two_groups_is_released_when_both_clear() -> None:
    a, b = "workers", "indexers"
    series: list[GroupLag | float] = []
    for _ in range(4):
        series += [gl(20.0, group=a), gl(20.0, group=b)]
    for _ in range(5):
        series += [gl(1.0, group=a), gl(20.0, group=b)]
    out, _ = run(cfg(), series)
    assert types(out) == ["throttle_producer"]
    out2, _ = run(cfg(), series + [gl(1.0, group=b)] * 20)
    assert types(out2) == ["throttle_producer", "release_producer"]


def test_a_lapsed_lease_is_forgotten_and_a_new_episode_starts() -> None:
    state = run(cfg(), [20.0] * 3)[1]
    out, state = run(cfg(), [20.0], state=state, start=T0 + 60_000)
    assert [a["params"]["producer_byte_rate"] for _, a in out] == [8000]
    assert state.throttles["client-id-prefix:ingest-"].since_ms == T0 + 60_000


# -- budget and cooldowns ------------------------------------------------------------------


def test_budget_caps_new_interventions_across_targets() -> None:
    config = cfg(budget={"actions_per_minute": 2}, producers={"ingest-a": ["t1"],
                 "ingest-b": ["t2"], "ingest-c": ["t3"]})  # fmt: skip
    series = [gl(20.0, topic=t) for _ in range(3) for t in ("t1", "t2", "t3")]
    out, state = run(config, series)
    assert [a["target"] for _, a in out] == ["client-id:ingest-a", "client-id:ingest-b"]
    later, _ = run(config, [gl(20.0, topic="t3")], state=state, start=T0 + 62_000)
    assert [a["target"] for _, a in later] == ["client-id:ingest-c"]


def test_cooldowns_apply_per_target() -> None:
    config = cfg(actions={"enabled": ["scale_consumers"]}, scale={"lag_per_replica": 100})
    series = [gl(20.0, lag=100), gl(20.0, lag=100), gl(20.0, lag=100), gl(20.0, lag=250),
              gl(20.0, lag=350)] + [gl(20.0, lag=350)] * 20  # fmt: skip
    out, _ = run(config, series)
    assert [(i, a["params"]["replicas"]) for i, a in out] == [(2, 1), (22, 4)]


# -- the other rules -----------------------------------------------------------------------


def test_transfer_leadership_moves_the_worst_partition_to_a_broker_leading_none() -> None:
    worst = [wp(3, 30, leader=1), wp(1, 25, leader=1), wp(0, 20, leader=2), wp(2, 0.1, leader=3)]
    config = cfg(actions={"enabled": ["transfer_leadership"]})
    out, _ = run(config, [gl(30.0, worst=worst)] * 3)
    [(_, a)] = out
    assert a["target"] == "topic:docs/3"
    assert a["params"] == {"topic": "docs", "partition": 3, "target_broker": 3, "from_broker": 1}
    assert a["reason"]["lagging_partitions_led"] == 2
    # brokers from config: 4 leads none of them and is the lowest free id there
    out, _ = run(cfg(actions={"enabled": ["transfer_leadership"]}, brokers={"ids": [4, 2, 1]}),
                 [gl(30.0, worst=worst)] * 3)  # fmt: skip
    assert out[0][1]["params"]["target_broker"] == 4


@pytest.mark.parametrize(
    "worst",
    [
        [wp(3, 30, leader=1), wp(1, 25, leader=2), wp(2, 0.1, leader=3)],  # no broker leads 2
        [wp(3, 30, leader=1), wp(1, 25, leader=1), wp(0, 20, leader=2)],  # no broker is free
        [wp(3, 30, leader=-1), wp(1, 25, leader=-1), wp(2, 0.1, leader=3)],  # leaders unknown
    ],
)
def test_transfer_leadership_needs_a_crowded_broker_and_a_free_one(
    worst: list[WorstPartition],
) -> None:
    out, _ = run(cfg(actions={"enabled": ["transfer_leadership"]}), [gl(30.0, worst=worst)] * 5)
    assert out == []


def test_spread_a_hot_partition_and_restore_it_when_cleared() -> None:
    config = cfg(actions={"enabled": ["spread_partition", "restore_partition"]},
                 hotspot={"ratio": 4.0, "lanes": 6, "pool": "big"})  # fmt: skip
    hot = [wp(1, 2.0), wp(2, 40.0)]  # ordered by status, not time lag
    series = [gl(40.0, worst=hot)] * 10 + [gl(1.0, worst=[wp(2, 1.0), wp(1, 0.5)])] * 20
    out, _ = run(config, series)  # restored once the spread's cooldown (5 s) has passed
    assert types(out) == ["spread_partition", "restore_partition"]
    spread, restore = out[0][1], out[1][1]
    assert spread["target"] == restore["target"] == "group:workers/topic:docs/2"
    assert spread["params"] == {"group": "workers", "topic": "docs", "partition": 2, "lanes": 6,
                                "pool": "big"}  # fmt: skip
    assert restore["params"] == {"group": "workers", "topic": "docs", "partition": 2}
    even, _ = run(config, [gl(40.0, worst=[wp(1, 30.0), wp(2, 40.0)])] * 10)
    assert even == []  # every partition lags alike: not a hot partition


def test_scale_hint_never_exceeds_the_partition_count() -> None:
    config = cfg(actions={"enabled": ["scale_consumers"]}, scale={"lag_per_replica": 10})
    out, _ = run(config, [gl(20.0, lag=10_000, parts=6)] * 5)
    [(_, a)] = out
    assert a["params"] == {"group": "workers", "replicas": 6, "partitions": 6}
    assert a["reason"]["replicas_needed"] == 1000


def test_add_partitions_only_for_allow_listed_topics_and_once_per_request() -> None:
    config = cfg(actions={"enabled": ["add_partitions"]}, scale={"lag_per_replica": 10},
                 allow={"partition_topics": ["docs"]}, partitions={"growth_ratio": 1.5,
                 "max_total": 5})  # fmt: skip
    out, state = run(config, [gl(20.0, lag=10_000, parts=3)] * 60)
    assert [a["params"] for _, a in out] == [{"topic": "docs", "total": 5, "current": 3}]
    grown, _ = run(config, [gl(20.0, lag=10_000, parts=5)] * 60, state=state, start=T0 + 60_000)
    assert grown == []  # at max_total
    other, _ = run(config, [gl(20.0, lag=10_000, parts=3, topic="orders")] * 10)
    assert other == []


# -- modes, kill switch, state -------------------------------------------------------------


def test_observe_decides_nothing_and_act_marks_actions() -> None:
    state = PolicyState()
    out, after = run(cfg(mode="observe"), [20.0] * 50, state=state)
    assert out == [] and after == state
    out, _ = run(cfg(mode="act"), [20.0] * 3)
    assert [a["mode"] for _, a in out] == ["act"]


def halt(scope: str, at: int, kind: str = "halt") -> dict[str, Any]:
    return {"type": kind, "params": {"scope": scope}, "issued_at": at}


def test_halt_stops_everything_and_resume_picks_up_the_current_truth() -> None:
    state = apply_control(PolicyState(), halt("all", T0 - 1), T0)
    out, state = run(cfg(), [20.0] * 40, state=state)
    assert out == []
    assert state.incidents["workers\x00docs"].active  # still tracked while halted
    state = apply_control(state, halt("all", T0 + 10_000, "resume"), T0 + 10_000)
    out, _ = run(cfg(), [20.0], state=state, start=T0 + 10_250)
    assert types(out) == ["throttle_producer"]


def test_halt_of_one_group_leaves_the_others_alone() -> None:
    state = apply_control(PolicyState(), halt("workers", T0), T0)
    assert run(cfg(), [gl(20.0, group="workers")] * 5, state=state)[0] == []
    assert types(run(cfg(), [gl(20.0, group="other")] * 5, state=state)[0]) == ["throttle_producer"]


def test_stale_and_future_control_events_are_ignored() -> None:
    s = apply_control(PolicyState(), halt("all", T0), T0)
    assert apply_control(s, halt("all", T0 - 5, "resume"), T0).halted == {"all": T0}
    s = apply_control(s, halt("all", T0 + 5, "resume"), T0)
    assert s.halted == {}
    assert apply_control(s, halt("g", T0 + 1), T0).halted == {}  # older than resume all
    assert apply_control(s, halt("all", T0 + 10**9), T0).halted == {}  # a clock far ahead
    assert apply_control(s, {"type": "throttle_producer", "params": {}}, T0) is s


def test_malformed_summaries_are_counted_and_skipped() -> None:
    bad = replace(gl(20.0), max_time_lag_s=float("nan"))
    out, state = run(cfg(), [bad, gl(20.0, group="")])
    assert out == [] and state.skipped_inputs == 2 and state.incidents == {}


def test_state_round_trips_json_and_a_restart_does_not_reissue() -> None:
    config = cfg(actions={"enabled": ["throttle_producer", "release_producer", "scale_consumers",
                 "spread_partition", "restore_partition"]})  # fmt: skip
    _, state = run(config, [gl(20.0, worst=[wp(1, 40), wp(2, 1)])] * 8)
    restored = PolicyState.from_dict(orjson.loads(orjson.dumps(state.to_dict())))
    assert restored == state and restored.throttles and restored.spreads and restored.scale_hints
    again, _ = run(config, [gl(20.0, worst=[wp(1, 40), wp(2, 1)])], state=restored,
                   start=T0 + 8 * TICK)  # fmt: skip
    assert again == []  # nothing re-issued after a restart
    before = state.to_dict()
    for lag in (20.0, 1.0, 1.0, 1.0, 1.0):
        decide(gl(lag, worst=[wp(1, 40), wp(2, 1)]), state, config, T0 + 60_000)
    assert state.to_dict() == before  # decide never changes the state it is given


def test_groups_not_seen_for_a_while_are_forgotten_and_their_throttles_released() -> None:
    config = cfg(state={"forget_after_s": 30}, throttle={"lease_s": 600})
    _, state = run(config, [gl(20.0, group=f"g{i}") for i in range(3) for _ in range(3)])
    assert len(state.incidents) == 3 and state.throttles
    out, state = run(config, [gl(0.0, group="other")], state=state, start=T0 + 33_000)
    assert types(out) == ["release_producer"]
    assert list(state.incidents) == ["other\x00docs"] and state.throttles == {}


def test_replayed_decisions_get_identical_ids_and_every_action_validates() -> None:
    config = cfg(actions={"enabled": ["throttle_producer", "release_producer", "scale_consumers",
                 "spread_partition", "restore_partition", "transfer_leadership"]},
                 mode="act")  # fmt: skip
    worst = [wp(1, 40, leader=1), wp(2, 30, leader=1), wp(3, 1, leader=2)]
    series = [gl(40.0, worst=worst)] * 50 + [1.0] * 10
    first, _ = run(config, series)
    second, _ = run(config, series)
    assert first == second and len(types(first)) >= 5
    for _, action in first:
        assert action["signature"] == ""
        validate(sign(action, KEY))


def test_two_hot_partitions_are_both_hot_but_a_slow_group_is_not_a_hotspot() -> None:
    from pipeline.decide.policy import hot_partitions

    t = Thresholds(time_lag_s=5.0)
    two_hot = replace(
        gl(20.0), topic_partitions=16,
        worst=(wp(4, 20.0), wp(11, 19.0), wp(0, 0.3), wp(1, 0.2), wp(2, 0.1)),
    )  # fmt: skip
    assert [w.partition for w in hot_partitions(two_hot, t, 4.0)] == [4, 11]
    # only what stands `ratio` times above the rest is hot
    close = replace(two_hot, worst=(wp(4, 20.0), wp(11, 9.0), wp(0, 2.4)))
    assert [w.partition for w in hot_partitions(close, t, 4.0)] == [4]
    # the rest is behind too (above the exit level, 2.5 s): a slow group, not a hotspot
    rest_behind = replace(two_hot, worst=(wp(4, 20.0), wp(11, 19.0), wp(0, 4.9)))
    assert hot_partitions(rest_behind, t, 4.0) == []
    # everything lags: a slow group (scale it), not a hotspot to spread
    slow = replace(two_hot, topic_partitions=4, worst=tuple(wp(p, 20.0) for p in range(4)))
    assert hot_partitions(slow, t, 4.0) == []
