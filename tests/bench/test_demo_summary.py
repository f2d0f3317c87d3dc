"""``make demo``'s summary (bench/demo.py, pure parts): each action with its cause and
evidence, its remedy, who applied it and its verification, in rows a 100-column terminal
(and the SVG picture of it) shows whole."""

from __future__ import annotations

from bench.demo import SVG_COLS, summary_lines


def test_each_action_says_cause_remedy_who_and_verdict_within_100_columns() -> None:
    spread = {"id": "a1", "at_ms": 812, "type": "spread_partition", "mode": "act",
              "target": "topic:agents.perception/4",
              "params": {"partition": 4, "lanes": 12}, "cause": "hotspot",
              "evidence": {"partitions": [4], "partition_time_lag_s": [3.1],
                           "next_worst_time_lag_s": 0.2}}  # fmt: skip
    res = {"produced": 61234, "processed": 61234, "lost": 0, "duplicates": 0, "p50_ms": 14.0,
           "p99_ms": 180.0, "max_ms": 950.0, "detection_ms": 276, "actions": [spread],
           "outcomes": [{"action_id": "a1", "result": "delegated"}],
           "worker_outcomes": [{"action_id": "a1", "instance": "w-1"},
                               {"action_id": "a1", "instance": "w-2"}],
           "verifications": [{"action_id": "a1", "result": "verified", "at_ms": 7312,
                              "time_lag_at_apply_s": 3.1, "time_lag_now_s": 0.18}]}  # fmt: skip
    lines = summary_lines(res, 118.4)
    text = "\n".join(lines)
    assert "cause hotspot: partition 4 at 3.1 s behind; the rest at most 0.2 s" in text
    assert "remedy spread_partition 4 over 12 lanes (act)" in text
    assert "-> delegated, applied by 2 workers; verified at +7.3s: time lag 3.10 s at apply " \
        "-> 0.18 s" in text  # fmt: skip
    assert "lost 0, duplicate side effects 0" in text and "took 118 s" in text
    assert max(len(line) for line in lines) <= SVG_COLS, max(lines, key=len)
