"""The diagnosis (pipeline/decide/diagnosis.py): each cause with its evidence, what a burst
needs, and who the culprits are."""

from __future__ import annotations

from typing import Any

from pipeline.decide.diagnosis import DiagnosisConfig, culprits_of, diagnose
from pipeline.decide.policy import hot_partitions
from pipeline.decide.policy_config import Thresholds
from schemas import GroupLag
from tests.support.decide import EXIT_S, HOT, gl, wp

D = DiagnosisConfig()
T = Thresholds(time_lag_s=10, exit_ratio=0.5)


def cause_of(s: GroupLag, **kw: Any) -> tuple[str, dict[str, Any]]:
    d = diagnose(s, EXIT_S, hot_partitions(s, T, 4.0), D, **kw)
    return d.cause, d.evidence


def test_each_cause_with_its_evidence() -> None:
    cause, ev = cause_of(gl(HOT))
    assert cause == "hotspot" and ev["partitions"] == [3] and ev["next_worst_time_lag_s"] == 2.0
    slow = [wp(p, 20.0, produce=100.0, consume=60.0) for p in range(5)]
    cause, ev = cause_of(gl(slow))
    assert cause == "slow_group" and ev["consume_rate_per_s"] < ev["produce_rate_per_s"]
    burst = [wp(p, 20.0, produce=300.0, consume=95.0) for p in range(5)]
    cause, ev = cause_of(gl(burst), baseline=[100.0, 100.0, 100])
    assert cause == "inflow_burst" and ev["ratio"] == 3.0 and ev["source"] == "partition_rates"
    stuck = [wp(p, 20.0, consume=0.0) for p in range(5)]
    assert cause_of(gl(stuck))[0] == "stalled"
    empty = {"status": "EMPTY", "members": []}
    assert cause_of(gl(stuck), health=empty) == (
        "stalled", {"members": 0, "health": "EMPTY", "lagging_partitions": 5,
                    "consume_rate_per_s": 0.0})  # fmt: skip
    assert cause_of(gl(HOT), health=empty)[0] == "hotspot"  # committed by assign(): consumed
    skew = [
        wp(0, 20.0, leader=1),
        wp(1, 18.0, leader=1),
        wp(2, 0.5, leader=2),
        wp(3, 0.2, leader=3),
    ]
    cause, ev = cause_of(gl(skew))
    assert cause == "broker_skew" and ev["broker"] == 1 and ev["lagging_partitions_led"] == 2
    storm = {"status": "STORM", "members": [{}], "rebalances_per_min": 6.0,
             "commits_stalled": True,
             "storm": {"identity": "w-1@host-a", "member_id": "m-9", "client_id": "w-1",
                       "client_host": "host-a", "leaves": 4,
                       "partitions": [{"topic": "docs", "partitions": [3, 5]},
                                      {"topic": "other", "partitions": [0]}]}}  # fmt: skip
    cause, ev = cause_of(gl(HOT), health=storm)
    assert cause == "rebalance_storm" and ev["partitions"] == [3, 5] and ev["client_id"] == "w-1"


def test_a_burst_needs_the_consumers_at_their_usual_rate_and_a_real_rise() -> None:
    slower = [wp(p, 20.0, produce=300.0, consume=40.0) for p in range(5)]  # consumers fell
    assert cause_of(gl(slower), baseline=[100.0, 100.0, 100])[0] != "inflow_burst"
    same = [wp(p, 20.0, produce=150.0, consume=95.0) for p in range(5)]  # 1.5x < 2x
    assert cause_of(gl(same), baseline=[100.0, 100.0, 100])[0] != "inflow_burst"


def test_culprits_are_the_clients_whose_rate_rose() -> None:
    rates = {"flood": [900.0, 100.0], "steady": [105.0, 100.0], "idle": [0.0, 50.0]}
    assert culprits_of(rates) == ["flood"]
    two = {"a": [500.0, 100.0], "b": [480.0, 100.0], "c": [100.0, 100.0]}
    assert culprits_of(two) == ["a", "b"]
    assert culprits_of({"x": [10.0, 100.0]}) == []
