"""``lagpilot status``: the table and the JSON drawn from the latest events (pure parts)."""

from __future__ import annotations

from typing import Any

import orjson

from pipeline.commands.status import as_json, render, shown
from pipeline.read.backlog import input_state


def _summary(group: str, topic: str, tl: float, status: str = "WARN") -> dict[str, Any]:
    return {"group": group, "topic": topic, "status": status, "total_lag_offsets": 120,
            "max_time_lag_s": tl, "lag_rate_per_s": 3.25, "partitions": 4}  # fmt: skip


def _partition(group: str, p: int, eta: float | None, owner: bool) -> dict[str, Any]:
    return {"group": group, "topic": "docs", "partition": p, "status": "OK",
            "committed_offset": 10, "high_watermark": 15, "lag_offsets": 5, "time_lag_s": 0.5,
            "lag_rate_per_s": 0.0, "eta_drain_s": eta,
            "owner": {"client_id": "w", "client_host": "/10.0.0.7", "member_id": "m-1"}
            if owner else None}  # fmt: skip


def test_groups_are_listed_worst_time_lag_first() -> None:
    summaries = {("a", "t"): _summary("a", "t", 1.0), ("b", "t"): _summary("b", "t", 9.5, "ERR")}
    lines = render(summaries, {}).splitlines()
    assert lines[0].split()[:4] == ["GROUP", "TYPE", "TOPIC", "STATUS"]
    assert [line.split()[0] for line in lines[1:3]] == ["b", "a"]
    assert lines[1].split()[1:6] == ["consumer", "t", "ERR", "120", "9.50"]


def test_a_share_group_says_so() -> None:
    share = _summary("tasks", "t", 3.0) | {"group_type": "share"}
    lines = render({("tasks", "t"): share}, {}).splitlines()
    assert lines[1].split()[:3] == ["tasks", "share", "t"]


def test_partitions_show_eta_and_owner_or_a_dash() -> None:
    parts = {
        ("g", 1): _partition("g", 1, None, owner=False),
        ("g", 0): _partition("g", 0, 2.25, True),
    }
    text = render({}, parts)
    rows = [line for line in text.splitlines() if line.startswith("g ")]
    assert [r.split()[2] for r in rows] == ["0", "1"]  # sorted by partition
    assert rows[0].endswith(" 2.2 w@/10.0.0.7 (m-1)")  # ETA, then client@host (member)
    assert rows[1].split()[-2:] == ["-", "-"]  # no ETA (not draining), no owner known


def test_an_empty_window_says_what_to_check() -> None:
    assert "is the pipeline running?" in render({}, {}, {})


def test_json_holds_the_events_as_they_are_sorted() -> None:
    summaries = {1: _summary("b", "t", 1.0), 2: _summary("a", "t", 2.0)}
    doc = orjson.loads(as_json(summaries, {}, None))
    assert [g["group"] for g in doc["groups"]] == ["a", "b"]
    assert doc["groups"][0] == summaries[2]
    assert doc["partitions"] == [] and doc["group_health"] == []


def _health(group: str, status: str = "OK", members: int = 1) -> dict[str, Any]:
    return {"event": "group_health", "group": group, "status": status, "protocol": "classic",
            "state": "Stable", "generation": 4, "members": [f"m{i}" for i in range(members)],
            "rebalances_per_min": -0.0001, "commits_stalled": False, "storm": None}  # fmt: skip


def test_no_value_prints_as_negative_zero() -> None:
    s = {**_summary("a", "t", 1.0), "lag_rate_per_s": -0.0001}
    p = {**_partition("a", 0, None, True), "lag_rate_per_s": -0.04}
    text = render({1: s}, {2: p}, {"a": _health("a")})
    assert "-0.0" not in text
    assert "-0" not in text.replace("m-1", "")


def test_own_groups_and_groups_that_never_commit_are_hidden_unless_all() -> None:
    summaries = {1: _summary("docs", "t", 1.0), 2: _summary("lagpilot-pipeline", "t", 0.1)}
    health = {g: _health(g) for g in ("docs", "lagpilot-pipeline", "__lagpilot_ready",
                                      "console-reader")}  # fmt: skip
    s, p, h, hidden = shown(summaries, {}, health)
    assert [e["group"] for e in s.values()] == ["docs"] and sorted(h) == ["docs"]
    assert hidden == 3  # two of lagpilot's own, one plain reader that never committed
    assert "3 groups hidden" in render(s, p, h, hidden)
    s, p, h, hidden = shown(summaries, {}, health, everything=True)
    assert len(s) == 2 and len(h) == 4 and hidden == 0


def test_a_healthy_group_that_consumes_nothing_says_so() -> None:
    """Members still in the group (health OK) while nobody takes a record (STOP): the health
    row's CONSUMING column says none, the legend says how the two relate."""
    summaries = {
        1: _summary("stopped", "t", 30.0, "STOP"),
        2: _summary("fine", "t", 0.1, "OK"),
        3: _summary("half", "t", 9.0, "STOP"),
        4: _summary("half", "u", 0.1, "OK"),
    }
    health = {g: _health(g) for g in ("stopped", "fine", "half")}
    rows = {line.split()[0]: line.split() for line in render(summaries, {}, health).splitlines()
            if line.split() and line.split()[-1] == "-" and line.split()[1] == "OK"}  # fmt: skip
    assert rows["stopped"][2] == "none" and rows["fine"][2] == "all" and rows["half"][2] == "some"
    assert "consume nothing: CONSUMING says so" in render(summaries, {}, health)
    doc = orjson.loads(as_json(summaries, {}, health))
    assert {h["group"]: h["consuming"] for h in doc["group_health"]} == {
        "fine": "all", "half": "some", "stopped": "none"}  # fmt: skip


def test_a_replica_behind_is_named_first_and_one_caught_up_is_not() -> None:
    inputs = {
        "r0": input_state("r0", 1, 0.0, 0, False, 256 << 20),
        "r1": input_state("r1", 1, 12.5, 950_000, True, 256 << 20),
    }
    text = render({}, {}, None, 0, inputs)
    first = text.splitlines()[0]
    assert first.startswith("pipeline replica r1 is BEHIND: 12.5 s, 950,000")
    assert "paused" in first and "r0" not in text
    assert [ev["replica"] for ev in orjson.loads(as_json({}, {}, None, inputs))["inputs"]] == [
        "r0",
        "r1",
    ]
