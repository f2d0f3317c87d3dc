"""Tiny runs of the pipeline benchmarks so they cannot rot (figures come from make bench-*)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str, out: Path, bootstrap: str) -> dict:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            f"bench.perf.{script}",
            "--smoke",
            "--out",
            str(out),
            "--bootstrap",
            bootstrap,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return orjson.loads(out.read_bytes())


def test_ingest_smoke(kafka_bootstrap: str, tmp_path: Path) -> None:
    r = _run("ingest", tmp_path / "ingest.json", kafka_bootstrap)
    assert r["records"] == 5_000
    assert r["pipeline_rps"] > 0 and r["raw_rps"] > 0
    assert r["ratio"] > 0


def test_detection_smoke(kafka_bootstrap: str, tmp_path: Path) -> None:
    r = _run("detection", tmp_path / "detection.json", kafka_bootstrap)
    assert r["trials"] == 2
    assert 0 < r["p50_ms"] <= r["p99_ms"] < 15_000
    assert isinstance(r["false_alarms"], int) and len(r["false_alarm_examples"]) <= 3
    cells = {(c["commit_interval_ms"], c["worker_progress"]): c for c in r["matrix"]}
    assert set(cells) == {(100, False), (1000, True)}
    with_progress = cells[(1000, True)]
    # a stall seen from the worker's reports, not from its commits (1.5 s away at least)
    assert 0 < with_progress["p99_ms"] < 1500
    assert with_progress["first_error_statuses"] == ["STALL"]  # it kept reporting
