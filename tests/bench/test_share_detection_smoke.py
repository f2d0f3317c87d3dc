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
    assert got["trials"] == 2 and got["false_alarms"] == 0
    assert got["first_error_statuses"] and set(got["first_error_statuses"]) <= {
        "STALL",
        "STOP",
        "ERR",
    }
    # the bound of the smoke: every stall seen (the 2 s target is the full run's, on a quiet host)
    assert 0 < got["max_ms"] < 15_000
    assert got["commit"] and got["measured_at"]
