"""How the incident suite reads a run and writes its results (no broker): a run of some
scenarios keeps the others' entries and records the host's load; what group health says
about rebalances and the partitions dead members held."""

from __future__ import annotations

from pathlib import Path

import orjson

from bench.support.verdicts import merge_results, remedy_of


def test_the_remedy_is_each_action_type_once_in_the_order_first_issued() -> None:
    actions = [
        {"at_ms": t, "type": kind}
        for t, kind in ((120, "spread_partition"), (100, "spread_partition"),
                        (900, "restore_partition"), (50, "scale_consumers"))
    ]  # fmt: skip
    assert remedy_of(actions) == ["scale_consumers", "spread_partition", "restore_partition"]
    assert remedy_of([]) == []


def test_a_run_merges_its_scenarios_and_keeps_the_others(tmp_path: Path) -> None:
    out = tmp_path / "incidents.json"
    out.write_bytes(orjson.dumps({"scenarios": {"storm": {"ratio": 7.0, "commit": "abc"},
                                                "avalanche": {"ratio": 1.0}},
                                  "took_s": 3.0}))  # fmt: skip
    merge_results(out, {"avalanche": {"ratio": 120.0}, "flood": {"ratio": 6.0}}, commit="def",
                  loads={"avalanche": (1.5, 2.25)})  # fmt: skip
    got = orjson.loads(out.read_bytes())
    assert got["scenarios"]["avalanche"]["load_avg_1m"] == {"start": 1.5, "end": 2.25}
    flood_load = got["scenarios"]["flood"]["load_avg_1m"]  # no start known: its end is now
    assert flood_load["start"] is None and flood_load["end"] >= 0
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


def test_rebalances_and_the_partitions_dead_members_held() -> None:
    from bench.support.health_reads import held_at_death, rebalances

    def health(at_ms: int, gen: int, members: dict[str, list[int]]) -> dict[str, object]:
        return {"observed_at_ms": at_ms, "generation": gen,
                "members": [{"client_id": c, "assignment": [{"topic": "t", "partitions": ps},
                                                            {"topic": "u", "partitions": [9]}]}
                            for c, ps in members.items()]}  # fmt: skip

    events = [
        health(100, 3, {"m0": [0, 1], "m1": [2, 3]}),
        health(200, 4, {"m0": [0, 1, 2], "m1": []}),  # m1 died holding 2, 3: its are moved
        health(300, 6, {"m0": [0], "m1": [1, 2]}),
    ]
    assert rebalances(events, 150, 400) == 3  # from generation 3 to 6
    assert rebalances(events, 300, 400) == 0
    # m1 died at 150 (its last snapshot: 2, 3), m0 at 250 (0, 1, 2); topic u is not ours
    assert held_at_death(events, "t", [(150, "m1"), (250, "m0")]) == {0, 1, 2, 3}
    assert held_at_death(events, "t", [(50, "m1")]) == set()  # no snapshot before it died
