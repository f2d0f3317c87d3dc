"""A tiny soak (~1.5 minutes, 8 partitions x 2 groups, one stall) so it cannot rot: it
asserts the fields and that the incident is seen, not the targets (``make bench-soak``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]
FIELDS = {
    "rss_growth_pct",
    "false_alarms",
    "missed_incidents",
    "detection_p99_s",
    "detection_p99_first_s",
    "detection_p99_last_s",
    "incidents",
    "targets_met",
    "commit",
    "measured_at",
}


def test_soak_smoke(kafka_bootstrap: str, tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.perf.soak", "--smoke", "--out", str(out),
         "--bootstrap", kafka_bootstrap],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    r = orjson.loads(out.read_bytes())
    assert r.keys() >= FIELDS
    [stall] = r["incidents"]
    assert stall["kind"] == "stall"
    assert stall["detected"] and stall["detected_after_s"] is not None, stall
    assert {"injected_at", "action", "recovered"} <= stall.keys()
    assert r["commits_per_s"] > 0 and len(r["rss_samples"]) >= 5
