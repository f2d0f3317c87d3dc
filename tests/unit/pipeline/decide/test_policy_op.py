"""The policy operator folds outcomes, group health and producer rates, and passes the
policy's verification events on unsigned (pure: an in-memory state store)."""

from __future__ import annotations

from typing import Any

from pipeline.decide.policy_config import config_from_mapping
from pipeline.decide.policy_op import PolicyOperator
from schemas import validate, verify

KEY = b"o" * 32
T0 = 1_800_000_000_000


class Store:
    def __init__(self) -> None:
        self.d: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return self.d.get(key, default)

    def set(self, key: str, value: Any) -> None:
        self.d[key] = value


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
    op, store = PolicyOperator(config, KEY), Store()
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
