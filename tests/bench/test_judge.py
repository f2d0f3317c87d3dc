"""How the incident suite judges the loop's actions against what a scenario injected (no
broker): wrong remedies and wrong targets are counted, undos of right actions are not, and
only the product's own verdicts say verified."""

from __future__ import annotations

from typing import Any

from bench.support.judge import Injected, judge_run, ledger, partition_targets, summary

HOT = Injected("hotspot", ("group:g/topic:t/4",))
FLOOD = Injected("inflow_burst", ("client-id:agent-0",))


def _a(i: int, kind: str, target: str, mode: str = "act", cause: str = "x") -> dict[str, Any]:
    return {"id": f"a{i}", "issued_at": i, "type": kind, "target": target, "mode": mode,
            "reason": {"cause": cause}}  # fmt: skip


def test_a_remedy_of_another_cause_or_another_target_is_wrong_once_per_target() -> None:
    actions = [
        _a(1, "spread_partition", "group:g/topic:t/4", cause="hotspot"),  # right
        _a(2, "scale_consumers", "group:g", cause="slow_group"),  # wrong remedy
        _a(3, "spread_partition", "group:g/topic:t/7", cause="hotspot"),  # wrong partition
        _a(4, "throttle_producer", "client-id:agent-1"),  # wrong producer ...
        _a(5, "throttle_producer", "client-id:agent-1"),  # ... renewed: one decision
        _a(6, "throttle_producer", "client-id:agent-0"),  # right
        _a(7, "release_producer", "client-id:agent-0"),  # undoes a right one
        _a(8, "restore_partition", "group:g/topic:t/9"),  # undoes nothing we did
    ]
    outcomes = [{"action_id": f"a{i}", "result": "applied"} for i in range(1, 9)]
    rows = ledger(actions, outcomes, [], [HOT, FLOOD])
    assert [r["fits"] for r in rows] == [True, False, False, False, False, True, True, False]
    s = summary(rows)
    assert s["wrong_actions"] == 3  # scale, spread p7, throttle agent-1
    assert s["wrong_undos"] == 1
    assert s["applied_actions"] == 8


def test_in_calm_every_intervention_is_wrong_and_recommendations_are_not_applied() -> None:
    actions = [_a(1, "add_partitions", "topic:t", mode="recommend"),
               _a(2, "spread_partition", "group:g/topic:t/1")]  # fmt: skip
    outcomes = [{"action_id": "a1", "result": "recorded"}]
    s = summary(ledger(actions, outcomes, [], []))
    assert s["wrong_actions"] == 2
    assert s["applied_actions"] == 0  # a recommendation, and an action with no outcome
    assert s["verified"] is None


def test_verified_only_by_the_products_verdict_and_undone_is_not_verified() -> None:
    spread = _a(1, "spread_partition", "group:g/topic:t/4")
    applied = [{"action_id": "a1", "result": "delegated"},
               {"event": "worker_outcome", "action_id": "a1", "instance": "w1"}]  # fmt: skip
    rows = ledger([spread], applied, [{"action_ids": ["a1"], "result": "verified"}], [HOT])
    assert rows[0]["verdict"] == "verified" and summary(rows)["verified"] is True
    restore = _a(2, "restore_partition", "group:g/topic:t/4")
    rows = ledger([spread, restore], applied, [{"action_id": "a1", "result": "no_effect"}],
                  [HOT])  # fmt: skip
    assert rows[0]["verdict"] == "undone"
    assert summary(rows)["verified"] is False
    assert summary(ledger([spread], applied, [], [HOT]))["verified"] is False  # never judged


def test_a_delegated_action_is_applied_only_once_a_worker_says_it_did_it() -> None:
    spread = _a(1, "spread_partition", "group:g/topic:t/4")
    delegated = {"action_id": "a1", "result": "delegated"}
    rows = ledger([spread], [delegated], [], [HOT])
    assert rows[0]["outcome"] == "delegated" and not rows[0]["applied"]
    did = [{"event": "worker_outcome", "action_id": "a1", "instance": i} for i in ("w1", "w2")]
    rows = ledger([spread], [delegated, *did, did[0]], [], [HOT])
    assert rows[0]["applied"] and rows[0]["applied_by"] == 2  # instances, not reports
    # the actuator's own outcomes need no worker
    rows = ledger(
        [_a(2, "scale_consumers", "group:g")], [{"action_id": "a2", "result": "recorded"}], [], []
    )
    assert rows[0]["applied"]


def test_a_run_is_judged_from_its_topics_and_a_pool_target_fits_its_partition() -> None:
    targets = partition_targets("g", "t", [2], pool="big")
    assert targets == ("group:g/topic:t/2", "group:g.pool.big/topic:t/2")
    storm = Injected("rebalance_storm", targets)
    actions = [
        {**_a(1000, "spread_partition", "group:g/topic:t/2"), "id": "h"},  # the hand-off
        {**_a(1500, "spread_partition", "group:g.pool.big/topic:t/2"), "id": "p"},
        {**_a(1600, "spread_partition", "group:g.pool.big/topic:t/3"), "id": "q"},
    ]
    reported: list[dict[str, Any]] = [
        {"event": "outcome", "action_id": "h", "result": "delegated"},
        {"event": "worker_outcome", "action_id": "h", "instance": "w"},
        # an outcome carries a result too: never read as the product's verdict
        {"event": "outcome", "action_id": "p", "result": "delegated"},
        {"event": "verification", "action_ids": ["h"], "result": "verified"},
    ]
    s = judge_run(actions, reported, [storm], start_ms=1000)
    assert [r["at_ms"] for r in s["actions"]] == [0, 500, 600]
    assert [r["fits"] for r in s["actions"]] == [True, True, False]
    assert [r["verdict"] for r in s["actions"]] == ["verified", None, None]
    assert s["wrong_actions"] == 1 and s["applied_actions"] == 1 and s["verified"] is True
