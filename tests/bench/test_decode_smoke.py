"""``bench/perf/decode.py --smoke``: the benchmark runs, writes its figures, and both decoders
agree on every record (a benchmark of a decoder that disagrees would measure nothing).

The baseline is kafka-python fed Kafka's own schemas, read from the reference folder: where
that folder is absent this test reports it could not run (under CI, it fails)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support.reference import require

ROOT = Path(__file__).resolve().parents[2]


def test_decode_bench_smoke(tmp_path: Path) -> None:
    require("kafka-coordinator-records")
    out = tmp_path / "decode.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.perf.decode", "--smoke", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert {"lagpilot_rps", "baseline_rps", "ratio"} <= result.keys()
    assert result["agreed"] is True and result["mismatches"] == 0
    assert result["records"] == 2_000
    assert set(result["value_versions"]) == {"v1", "v3"}
    assert result["lagpilot_rps"] > 0 and result["baseline_rps"] > 0
    assert abs(result["ratio"] - result["lagpilot_rps"] / result["baseline_rps"]) < 0.01
