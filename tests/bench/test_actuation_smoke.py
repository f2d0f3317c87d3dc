"""The actuation benchmark runs end to end on the real broker and writes its figures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]


def test_actuation_bench_smoke(kafka_bootstrap: str, tmp_path: Path) -> None:
    out = tmp_path / "actuation.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.perf.actuation", "--smoke",
         "--bootstrap", kafka_bootstrap, "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = orjson.loads(out.read_bytes())
    assert result["n"] == 5
    assert 0 < result["p50_ms"] <= result["p99_ms"] <= result["max_ms"]
