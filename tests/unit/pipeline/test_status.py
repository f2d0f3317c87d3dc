"""``lagpilot status``: the table and the JSON drawn from the latest events (pure parts)."""

from __future__ import annotations

from typing import Any

import orjson

from pipeline.status import as_json, render


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
    assert lines[0].split()[:3] == ["GROUP", "TOPIC", "STATUS"]
    assert [line.split()[0] for line in lines[1:]] == ["b", "a"]
    assert lines[1].split()[2:5] == ["ERR", "120", "9.50"]


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
