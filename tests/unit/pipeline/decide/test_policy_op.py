"""The policy operator folds outcomes, group health and producer rates, and passes the
policy's verification events on unsigned (pure: an in-memory state store)."""

from __future__ import annotations

from typing import Any

from pipeline.decide.policy_config import config_from_mapping
from pipeline.decide.policy_op import PolicyOperator
from schemas import validate, verify
from tests.support.state import MemoryState

KEY = b"o" * 32
T0 = 1_800_000_000_000


def summary(at: int, hot_lag_s: float) -> dict[str, Any]:
    worst = [{"partition": 3, "lag_offsets": 500, "time_lag_s": hot_lag_s, "lag_rate_per_s": 0.0,
              "lag_accel_per_s2": 0.0, "produce_rate_per_s": 10.0, "consume_rate_per_s": 0.0,
              "status": "WARN", "leader": -1}]  # fmt: skip
    worst += [{**worst[0], "partition": p, "time_lag_s": 0.5, "consume_rate_per_s": 10.0}
              for p in (0, 1)]  # fmt: skip
    return {"event": "group_lag", "v": 1, "group": "workers", "topic": "docs",
            "observed_at_ms": at, "status": "WARN", "total_lag_offsets": 1500,
            "max_time_lag_s": hot_lag_s, "lag_rate_per_s": 0.0, "partitions": 8,
            "topic_partitions": 8, "worst": worst}  # fmt: skip


def test_an_applied_outcome_starts_the_watch_and_the_verdict_leaves_unsigned() -> None:
    config = config_from_mapping({
        "mode": "act", "cooldowns": {"default_s": 2},
        "thresholds": {"default": {"time_lag_s": 10, "enter_windows": 2}},
        "ladders": {"default": {"hotspot": ["spread_partition:2"]}},
    })  # fmt: skip
    op, store = PolicyOperator(config, KEY), MemoryState()
    out: list[dict[str, Any]] = []
    for i in range(2):
        out += op(summary(T0 + i * 250, 40.0), "policy", T0, None, store)
    [spread] = out
    verify(spread, KEY)
    assert spread["reason"]["cause"] == "hotspot"
    bad_rates = {"event": "producer_rates", "v": 1, "client_id": "x"}  # no topic, no rates
    assert op(bad_rates, "policy", T0, None, store) == [] and op.skipped_rates == 1
    outcome = {"event": "outcome", "v": 1, "action_id": spread["id"], "result": "recorded",
               "actuator": "a", "at": T0 + 300}  # fmt: skip
    assert op(outcome, "policy", T0, None, store) == []
    assert store.get("state")["ladders"]  # the watch is saved at once: it survives a restart
    verdict = op(summary(T0 + 1_000, 4.0), "policy", T0, None, store)
    assert [v["event"] for v in verdict] == ["verification"]
    validate(verdict[0])
    assert verdict[0]["result"] == "verified" and "signature" not in verdict[0]
    assert verdict[0]["time_lag_at_apply_s"] == 40.0 and verdict[0]["time_lag_now_s"] == 4.0


HOT = {"mode": "act", "cooldowns": {"default_s": 2},
       "thresholds": {"default": {"time_lag_s": 10, "enter_windows": 2}},
       "ladders": {"default": {"hotspot": ["spread_partition:2"]}}}  # fmt: skip


def _hot(op: PolicyOperator, store: MemoryState, start: int, n: int = 2) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(n):
        out += op(summary(start + i * 250, 40.0), "policy", start, None, store)
    return out


def test_a_signed_halt_stops_actions_until_resumed_and_a_forged_one_is_ignored() -> None:
    from pipeline.decide.control import control_action
    from schemas import ActionType, sign

    op, store = PolicyOperator(config_from_mapping(HOT), KEY), MemoryState()
    forged = sign(control_action(ActionType.HALT, "actions", now_ms=T0, reason="x"), b"f" * 32)
    assert op(forged, "policy", T0, None, store) == [] and op.rejected_control == 1
    halt = sign(control_action(ActionType.HALT, "actions", now_ms=T0, reason="INC-1"), KEY)
    assert op(halt, "policy", T0, None, store) == []
    assert store.get("state")["halted"]  # saved at once: a restart stays halted
    assert _hot(op, store, T0 + 1_000) == []
    resume = sign(control_action(ActionType.RESUME, "actions", now_ms=T0 + 2_000, reason="ok"),
                  KEY)  # fmt: skip
    op(resume, "policy", T0 + 2_000, None, store)
    acted = _hot(op, store, T0 + 3_000)
    assert [a["type"] for a in acted] == ["spread_partition"]


def test_a_restarted_operator_keeps_the_cooldown_it_spent() -> None:
    config = config_from_mapping(HOT)
    store = MemoryState()
    first = _hot(PolicyOperator(config, KEY), store, T0)
    assert [a["type"] for a in first] == ["spread_partition"]
    again = PolicyOperator(config, KEY)  # the process restarted on the same state store
    assert _hot(again, store, T0 + 600) == []  # inside the 2 s cooldown
    assert store.get("state")["cooldowns"]


def test_the_state_of_quiet_summaries_is_written_at_most_every_persist_interval() -> None:
    op, store = (
        PolicyOperator(config_from_mapping(HOT), KEY, persist_interval_ms=1000),
        MemoryState(),
    )
    calm = {**summary(T0 + 1_000, 1.0), "status": "OK"}
    op(calm, "policy", T0, None, store)
    gen = store.get("gen")
    op({**calm, "observed_at_ms": T0 + 1_500}, "policy", T0, None, store)
    assert store.get("gen") == gen  # half a second later: not written
    op({**calm, "observed_at_ms": T0 + 2_100}, "policy", T0, None, store)
    assert store.get("gen") == gen + 1


def test_what_is_not_the_policys_passes_by() -> None:
    op, store = PolicyOperator(config_from_mapping(HOT), KEY), MemoryState()
    for value in (b"raw", None, {"event": "partition_lag"}, {"no": "event"}):
        assert op(value, "policy", T0, None, store) == []
    assert store.data == {}  # nothing decided, nothing written
