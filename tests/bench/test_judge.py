"""How the incident suite judges the loop's actions against what a scenario injected (no
broker): wrong remedies and wrong targets are counted, undos of right actions are not, and
only the product's own verdicts say verified."""

from __future__ import annotations

from typing import Any

from bench.support.judge import Injected, ledger, summary

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
    applied = [{"action_id": "a1", "result": "delegated"}]
    rows = ledger([spread], applied, [{"action_ids": ["a1"], "result": "verified"}], [HOT])
    assert rows[0]["verdict"] == "verified" and summary(rows)["verified"] is True
    restore = _a(2, "restore_partition", "group:g/topic:t/4")
    rows = ledger([spread, restore], applied, [{"action_id": "a1", "result": "no_effect"}],
                  [HOT])  # fmt: skip
    assert rows[0]["verdict"] == "undone"
    assert summary(rows)["verified"] is False
    assert summary(ledger([spread], applied, [], [HOT]))["verified"] is False  # never judged
