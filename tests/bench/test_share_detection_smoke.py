"""The share-group detection benchmark runs (two trials, a real share consumer) and writes
what it reports: a stalled share group seen, as the target wants, with no false alarm."""

from __future__ import annotations

from pathlib import Path

import orjson

from bench.perf import share_detection


def test_share_detection_smoke(kafka_bootstrap: str, share_group_lag: None, tmp_path: Path) -> None:
    out = tmp_path / "share_detection.json"
    assert share_detection.main(["--smoke", "--bootstrap", kafka_bootstrap, "--out", str(out)]) == 0
    got = orjson.loads(out.read_bytes())
    assert got["trials"] == 2
    assert got["first_error_statuses"]
    assert set(got["first_error_statuses"]) <= {"STALL", "STOP", "ERR"}
    # the smoke's bound: every stall seen. The targets (p99 < 2 s, no false alarm) are the
    # full run's, on a host not also running the suite: beside the integration tests the
    # JVM consumer is starved now and then, a pause the model rightly calls a stall
    assert 0 < got["max_ms"] < 15_000
    assert got["meets_target"] == (got["p99_ms"] < 2000 and got["false_alarms"] == 0)
    assert got["commit"] and got["measured_at"]
