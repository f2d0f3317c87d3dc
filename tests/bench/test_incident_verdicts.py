"""How the incident suite judges a run and writes its results (no broker): every changed
target ends verified or undone, and a run of some scenarios keeps the others' entries."""

from __future__ import annotations

from pathlib import Path

import orjson

from bench.support.verdicts import merge_results, remedy_of, verdicts_by_target, verified_of

SPREAD_4 = {"at_ms": 100, "type": "spread_partition", "target": "g/t/4"}
SPREAD_11 = {"at_ms": 120, "type": "spread_partition", "target": "g/t/11"}


def test_every_changed_target_must_end_verified_or_undone() -> None:
    verified = [{"result": "verified", "target": "g/t/4"}]
    assert verified_of([SPREAD_4], verified) is True
    # partition 11 was spread and never judged: the run is not verified
    assert verified_of([SPREAD_4, SPREAD_11], verified) is False
    assert verdicts_by_target([SPREAD_4, SPREAD_11], verified) == {
        "g/t/11": "open", "g/t/4": "verified"
    }  # fmt: skip
    # no effect, then restored: undone
    restored = [SPREAD_11, {"at_ms": 900, "type": "restore_partition", "target": "g/t/11"}]
    no_effect = [{"result": "no_effect", "target": "g/t/11"}]
    assert verified_of(restored, no_effect) is True
    assert verified_of([], []) is None  # nothing applied: nothing to say
    assert remedy_of([SPREAD_11, SPREAD_4, restored[1]]) == [
        "spread_partition",
        "restore_partition",
    ]


def test_a_run_merges_its_scenarios_and_keeps_the_others(tmp_path: Path) -> None:
    out = tmp_path / "incidents.json"
    out.write_bytes(orjson.dumps({"scenarios": {"storm": {"ratio": 7.0, "commit": "abc"},
                                                "avalanche": {"ratio": 1.0}},
                                  "took_s": 3.0}))  # fmt: skip
    merge_results(out, {"avalanche": {"ratio": 120.0}, "flood": {"ratio": 6.0}}, commit="def")
    got = orjson.loads(out.read_bytes())
    assert set(got["scenarios"]) == {"storm", "avalanche", "flood"}
    assert got["scenarios"]["storm"] == {"ratio": 7.0, "commit": "abc"}  # untouched
    assert got["scenarios"]["avalanche"]["ratio"] == 120.0
    assert got["scenarios"]["avalanche"]["commit"] == "def"
    assert got["scenarios"]["flood"]["measured_at"].endswith("Z")
    assert "took_s" not in got  # each scenario carries its own
    garbage = tmp_path / "garbage.json"
    garbage.write_text("not json")
    merge_results(garbage, {"flood": {"ratio": 6.0}}, commit=None)
    assert set(orjson.loads(garbage.read_bytes())["scenarios"]) == {"flood"}


def test_the_p99_tail_says_where_the_slow_messages_were() -> None:
    from bench.support.verdicts import p99_tail

    fast = [(f"f{i}", i % 16, 0, 1000 + i, 1100 + i) for i in range(970)]  # 100 ms each
    before = [(f"b{i}", 4, 1, 2000, 5000 + i) for i in range(20)]  # hot p4, before its spread
    after = [(f"a{i}", 4, 1, 9000, 9900) for i in range(5)]  # hot p4, after it
    other = [(f"o{i}", 7, 0, 3000, 4000) for i in range(5)]  # collateral
    tail = p99_tail(fast + before + after + other, {4, 11}, {4: 8000})
    assert 8 <= tail["slower_than_p99"] <= 10  # ~1% of 1,000 rows, the slowest
    assert tail["hot_before_spread"] == tail["heavy"] == tail["slower_than_p99"]
    assert tail["other_partitions"] == 0 and tail["hot_after_spread"] == 0


def test_storm_and_slow_group_judge_targets_not_types() -> None:
    """A restore is an undo, never judged itself; an applied spread of another partition
    whose verdict never came is open, though another spread was verified; a recommendation
    is not an applied action."""
    from bench.incident_slow_group import verified_of as run_verified_of

    def act(i: str, kind: str, target: str, mode: str = "act") -> dict[str, object]:
        return {"id": i, "type": kind, "target": target, "mode": mode}

    p2, p4 = "group:g/topic:t/2", "group:g/topic:t/4"
    run = {
        "actions": [act("a", "spread_partition", p2), act("b", "spread_partition", p4),
                    act("c", "restore_partition", p2), act("d", "add_partitions", "topic:t",
                                                            mode="recommend")],
        "outcomes": [{"action_id": i, "result": "delegated"} for i in "abcd"],
        "verdicts": [{"target": p2, "action_type": "spread_partition", "result": "verified"}],
    }  # fmt: skip
    assert run_verified_of(run) is False  # p4 never judged
    run["verdicts"].append({"target": p4, "action_type": "spread_partition", "result": "verified"})
    assert run_verified_of(run) is True  # the restore and the recommendation need none
    run["outcomes"] = [{"action_id": "d", "result": "recorded"}]
    assert run_verified_of(run) is None  # only a recommendation: nothing applied


def test_one_verdict_of_a_step_covers_every_target_it_changed() -> None:
    """A storm member's hand-off spreads its two partitions in one step; the step is judged
    once, on its first target, and its verdict names both actions: both are verified. A
    verdict for an unrelated action does not cover a target."""
    p0, p2, p5 = "group:g/topic:t/0", "group:g/topic:t/2", "group:g/topic:t/5"
    actions = [
        {"id": "h0", "type": "spread_partition", "target": p0},
        {"id": "h2", "type": "spread_partition", "target": p2},
        {"id": "s5", "type": "spread_partition", "target": p5},
    ]
    step = {"result": "verified", "target": p0, "action_ids": ["h0", "h2"]}
    assert verdicts_by_target(actions, [step]) == {p0: "verified", p2: "verified", p5: "open"}
    assert verified_of(actions[:2], [step]) is True
    assert verified_of(actions, [step]) is False
