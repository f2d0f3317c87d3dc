"""Properties of the policy over adversarial lag series (hypothesis).

Series mix oscillation around the enter and exit levels, spikes, long idle gaps, bursts of
producer rates, and many groups on shared topics; every rail must hold on every one of
them, with diagnosis and the ladders on (an actuator applying every action, so steps are
watched, verified or escalated) and off (each rule on its own).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import replace
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.decide import inputs
from pipeline.decide.policy import PolicyState, apply_control, decide
from pipeline.decide.policy_config import PolicyConfig, config_from_mapping
from schemas import GroupLag, LagStatus, WorstPartition, sign, validate

T0 = 1_800_000_000_000
KEY = b"p" * 32
GROUPS = [f"g{i}" for i in range(6)]
TOPICS = ["docs", "pages", "orders"]

CONFIG: dict[str, Any] = {
    "mode": "act",
    "thresholds": {"default": {"time_lag_s": 10, "offset_lag": 5000, "accel_per_s2": 50,
                               "exit_ratio": 0.5, "enter_windows": 2, "exit_windows": 3}},
    "cooldowns": {"default_s": 4, "throttle_producer": 3, "transfer_leadership": 6},
    "budget": {"actions_per_minute": 5},
    "throttle": {"start_bytes_per_s": 80_000, "floor_bytes_per_s": 9_000, "step_ratio": 0.5,
                 "lease_s": 8},
    "allow": {"throttle_client_ids": ["ingest-*", "crawler"], "partition_topics": ["docs"]},
    "producers": {"ingest-*": ["docs", "pages"], "crawler": ["pages"], "billing": ["orders"]},
    "scale": {"lag_per_replica": 500},
    "partitions": {"growth_ratio": 2.0, "max_total": 12},
    "hotspot": {"ratio": 3.0, "lanes": 3},
    "state": {"forget_after_s": 120},
}  # fmt: skip
CFG = config_from_mapping(CONFIG)
RULES_ONLY = config_from_mapping({**CONFIG, "diagnosis": {"enabled": False}})
CONFIGS = st.sampled_from([CFG, RULES_ONLY])
OPPOSITE = {"release_producer": "throttle_producer", "restore_partition": "spread_partition"}
NOT_BUDGETED = {"release_producer", "restore_partition"}
UNCOOLED = {"release_producer", "restore_partition"}

# a time lag drawn to sit on, just around, or far from the levels (enter 10 s, exit 5 s)
lags = st.one_of(
    st.sampled_from([0.0, 4.99, 5.0, 5.01, 9.99, 10.0, 10.01]),
    st.floats(0, 12, allow_nan=False),
    st.floats(0, 10_000, allow_nan=False),  # spikes
)
gaps_ms = st.sampled_from([250] * 8 + [1, 1_000, 5_000, 60_000, 200_000])  # and long idle


@st.composite
def summaries(draw: st.DrawFn) -> tuple[int, GroupLag]:
    lag = draw(lags)
    parts = draw(st.integers(1, 16))  # up to 4 hot partitions (a quarter of the topic)
    worst = tuple(
        WorstPartition(p, int(t * 100), t, draw(st.floats(-50, 50)), draw(st.floats(-100, 100)),
                       100.0, 90.0, LagStatus.WARN, draw(st.integers(-1, 3)))
        for p, t in enumerate(sorted(draw(st.lists(lags, max_size=min(parts, 6))), reverse=True))
    )  # fmt: skip
    offsets = draw(st.one_of(st.integers(0, 20_000), st.just(int(lag * 100))))
    summary = GroupLag(draw(st.sampled_from(GROUPS)), draw(st.sampled_from(TOPICS)), 0,
                       LagStatus.WARN, offsets, lag, draw(st.floats(-100, 100)), parts, parts,
                       worst)  # fmt: skip
    return draw(gaps_ms), summary


def _flatten(runs: list[tuple[tuple[int, GroupLag], int]]) -> list[tuple[int, GroupLag]]:
    return [step for step, repeat in runs for _ in range(repeat)]


#: runs of one summary repeated (a lasting incident, a long calm), interleaved across groups
series = st.lists(st.tuples(summaries(), st.integers(1, 30)), min_size=1, max_size=25).map(_flatten)


def play(
    config: PolicyConfig,
    steps: list[tuple[int, GroupLag]],
    *,
    via_json: bool = False,
    state: PolicyState | None = None,
    start: int = T0,
) -> tuple[list[dict[str, Any]], PolicyState]:
    """Decide on every step; an actuator applies every action (its outcome is folded in),
    and a producer on the summary's topic bursts whenever the drawn lag rate is high."""
    state, now, out = state or PolicyState(), start, []
    for gap, summary in steps:
        now += gap
        rate = 1_000_000.0 if summary.lag_rate_per_s > 50 else 100_000.0
        state = inputs.fold_producer_rate(state, {"client_id": "ingest-a", "topic": summary.topic,
                                                    "bytes_per_s": rate, "at_ms": now},
                                            config.burst_ratio)  # fmt: skip
        events, state = decide(summary, state, config, now)
        for e in events:
            validate(sign(e, KEY) if e["event"] == "action" else e)
        actions = [e for e in events if e["event"] == "action"]
        for a in actions:
            state = inputs.fold_outcome(state, {"event": "outcome", "action_id": a["id"],
                                                  "result": "applied", "at": now})  # fmt: skip
        out += actions
        if via_json:  # a restart between every two summaries
            state = PolicyState.from_dict(orjson.loads(orjson.dumps(state.to_dict())))
    return out, state


#: a hot partition that lasts (after a pause past every budget minute and cooldown): any
#: config acts on it (test_a_lasting_incident_always_acts), so the series below that end
#: with it check their rails on actions, not on silence
_HOT = tuple(WorstPartition(p, 100, t, 0.0, 0.0, 100.0, c, LagStatus.WARN)
             for p, t, c in [(0, 400.0, 0.0), (1, 1.0, 90.0), (2, 0.5, 90.0)])  # fmt: skip
_FRESH = GroupLag("fresh", "docs", 0, LagStatus.WARN, 300, 400.0, 1.0, 8, 8, _HOT)
LASTING = [(120_000, _FRESH)] + [(250, _FRESH)] * 19


#: a producer burst that lasts (after a calm baseline, past every lease, cooldown and budget
#: minute): any config throttles its producer, so the series that end with it check the
#: throttles' rails on throttles, not on silence
_CALM = GroupLag("bursty", "docs", 0, LagStatus.OK, 0, 0.0, 0.0, 8, 8, ())
_BURST = GroupLag("bursty", "docs", 0, LagStatus.WARN, 4000, 400.0, 100.0, 8, 8,
                  tuple(WorstPartition(p, 1000, 400.0, 100.0, 0.0, 100.0, 90.0, LagStatus.WARN)
                        for p in range(4)))  # fmt: skip
BURSTING = [(120_000, _CALM)] + [(250, _CALM)] * 70 + [(250, _BURST)] * 30


FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(series, CONFIGS)
def test_rails_hold(steps: list[tuple[int, GroupLag]], config: PolicyConfig) -> None:
    actions, state = play(config, steps + LASTING)
    assert any(a["type"] == "spread_partition" for a in actions)  # the rails met actions
    by_target: dict[tuple[str, str], list[int]] = defaultdict(list)
    last_throttle: dict[str, tuple[int, int]] = {}  # target: (rate, lease end)
    lease_ms = CFG.throttle_lease_s * 1000
    released_at: dict[str, int] = {}
    budgeted: list[int] = []
    for a in actions:
        kind, target, at, params = a["type"], a["target"], a["issued_at"], a["params"]
        validate(sign(a, KEY))  # every action is schema-valid once signed
        if kind == "throttle_producer":
            assert params["producer_byte_rate"] >= CFG.throttle_floor_bytes_per_s  # floor
            assert params["lease_s"] > 0
            if target in released_at:  # no flapping: a release holds off the next throttle
                assert at - released_at.pop(target) >= CFG.cooldown_s(kind) * 1000
            rate, until = last_throttle.get(target, (0, 0))
            # a renewal (same rate, lease still running) is the only unbudgeted throttle
            renewal = at < until and rate == params["producer_byte_rate"]
            assert a["reason"]["budgeted"] is not renewal
            assert at >= until or params["producer_byte_rate"] <= rate  # steps only go down
            last_throttle[target] = (params["producer_byte_rate"], at + lease_ms)
        if kind == "release_producer":
            assert at < last_throttle.pop(target)[1]  # only a live throttle is released
            released_at[target] = at
        if kind == "scale_consumers":
            assert 1 <= params["replicas"] <= params["partitions"]
        if kind == "add_partitions":
            assert params["total"] > params["current"] and params["total"] <= 12
            assert params["topic"] == "docs"  # allow-listed only
        if a["reason"]["budgeted"]:
            budgeted.append(at)
        else:
            # a throttle's renewal, or a standing scale hint published again
            renews = a["reason"].get("why") == "incident continues: renew the hint"
            assert kind in NOT_BUDGETED or kind == "throttle_producer" or renews
        if kind not in UNCOOLED:
            by_target[(kind, target)].append(at)
    for (kind, _), times in by_target.items():  # never inside a cooldown
        assert all(b - a >= CFG.cooldown_s(kind) * 1000 for a, b in itertools.pairwise(times))
    last: dict[str, dict[str, Any]] = {}
    for a in actions:  # no two opposing actions on one target inside the action's cooldown
        before = last.get(a["target"])
        pair = {a["type"], before["type"]} if before else set()
        if before and any({undo, do} == pair for undo, do in OPPOSITE.items()):
            kind = OPPOSITE.get(before["type"], before["type"])
            assert a["issued_at"] - before["issued_at"] >= CFG.cooldown_s(kind) * 1000
        last[a["target"]] = a
    for i, t in enumerate(budgeted):  # never over budget in any sliding minute
        assert sum(1 for u in budgeted[i:] if u - t < 60_000) <= CFG.actions_per_minute
    assert len(state.incidents) <= len(GROUPS) * len(TOPICS)
    assert len(state.budget_ms) <= CFG.actions_per_minute


@FAST
@given(series, CONFIGS)
def test_every_throttle_ends(steps: list[tuple[int, GroupLag]], config: PolicyConfig) -> None:
    """Once every group is calm, each throttle is released or its lease has ended."""
    steps = steps + BURSTING
    actions, state = play(config, steps)
    assert any(a["type"] == "throttle_producer" for a in actions)  # there were throttles
    end = T0 + sum(gap for gap, _ in steps)
    calm = [(250, GroupLag(g, t, 0, LagStatus.OK, 0, 0.0, 0.0, 4, 4, ()))
            for _ in range(60) for g in GROUPS for t in TOPICS]  # fmt: skip
    after, state = play(config, calm, state=state, start=end)
    calm_end = end + 250 * len(calm)
    assert state.throttles == {}
    last: dict[str, dict[str, Any]] = {}
    for a in actions + after:
        if a["type"] in ("throttle_producer", "release_producer"):
            last[a["target"]] = a
    for a in last.values():  # released, or its lease ran out (the actuator removes it)
        if a["type"] == "throttle_producer":
            assert a["issued_at"] + a["params"]["lease_s"] * 1000 <= calm_end
    assert any(a["type"] == "release_producer" for a in after) or not any(
        a["type"] == "throttle_producer" and a["issued_at"] > calm_end - 8_000 for a in after
    )


@FAST
@given(series, CONFIGS)
def test_a_lasting_incident_always_acts(
    steps: list[tuple[int, GroupLag]], config: PolicyConfig
) -> None:
    """Whatever came before, a hot partition that lasts gets an action (the rails above
    hold on series that act, not only on silent ones)."""
    _, state = play(config, steps)
    end = T0 + sum(gap for gap, _ in steps) + 120_000  # past every budget minute
    hot = tuple(WorstPartition(p, 100, t, 0.0, 0.0, 100.0, c, LagStatus.WARN)
                for p, t, c in [(0, 400.0, 0.0), (1, 1.0, 90.0), (2, 0.5, 90.0)])  # fmt: skip
    fresh = GroupLag("fresh", "docs", 0, LagStatus.WARN, 300, 400.0, 1.0, 8, 8, hot)
    actions, _ = play(config, [(250, fresh)] * 20, state=state, start=end)
    assert [a["target"] for a in actions if a["type"] == "spread_partition"] == [
        "group:fresh/topic:docs/0"
    ]


@FAST
@given(series, CONFIGS, st.integers(2, 4))
def test_every_hot_partition_of_a_lasting_incident_is_spread_within_the_budget(
    steps: list[tuple[int, GroupLag]], config: PolicyConfig, n_hot: int
) -> None:
    """Several hot partitions: each is spread (none waits for another's verdict), and the
    budget still holds: 5 a minute, so the fifth hot partition would wait (at most 4 here)."""
    _, state = play(config, steps)
    end = T0 + sum(gap for gap, _ in steps) + 120_000
    hot = tuple(WorstPartition(p, 100, 400.0 - p, 0.0, 0.0, 100.0, 0.0, LagStatus.WARN)
                for p in range(n_hot))  # fmt: skip
    cool = tuple(WorstPartition(p, 1, 1.0, 0.0, 0.0, 100.0, 90.0, LagStatus.OK)
                 for p in range(n_hot, n_hot + 2))  # fmt: skip
    fresh = GroupLag("fresh", "docs", 0, LagStatus.WARN, 300, 400.0, 1.0, 16, 16, hot + cool)
    actions, _ = play(config, [(250, fresh)] * 20, state=state, start=end)
    spreads = [a for a in actions if a["type"] == "spread_partition"]
    assert sorted(a["params"]["partition"] for a in spreads) == list(range(n_hot))
    assert all(a["issued_at"] - spreads[0]["issued_at"] < 1_000 for a in spreads)


@FAST
@given(series, CONFIGS)
def test_replay_and_restart_give_identical_actions(
    steps: list[tuple[int, GroupLag]], config: PolicyConfig
) -> None:
    steps = steps + LASTING + BURSTING
    first, state = play(config, steps)
    second, _ = play(config, steps)
    restarted, _ = play(config, steps, via_json=True)
    assert first and first == second == restarted  # the same actions, and some
    assert PolicyState.from_dict(orjson.loads(orjson.dumps(state.to_dict()))) == state


@FAST
@given(series)
def test_observe_decides_nothing_at_all(steps: list[tuple[int, GroupLag]]) -> None:
    observe = config_from_mapping({**CONFIG, "mode": "observe"})
    assert play(CFG, steps + LASTING)[0]  # in act mode the same series acts
    actions, state = play(observe, steps + LASTING)
    assert actions == [] and replace(state, producer_rates={}) == PolicyState()


@FAST
@given(series, st.integers(0, 100))
def test_nothing_while_halted(steps: list[tuple[int, GroupLag]], at: int) -> None:
    steps = steps + LASTING
    at = min(at, len(steps) - len(LASTING))  # halted before the lasting incident at the latest
    assert play(CFG, steps)[0]  # without the halt, the same series acts
    state, now, out = PolicyState(), T0, []
    for i, (gap, summary) in enumerate(steps):
        now += gap
        if i == at:
            state = apply_control(state, {"type": "halt", "params": {"scope": "all"},
                                          "issued_at": now}, now)  # fmt: skip
        actions, state = decide(summary, state, CFG, now)
        if i >= at:
            out += actions
    assert out == []
