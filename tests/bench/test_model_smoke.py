"""A tiny run of the model benchmark so it cannot rot (figures come from make bench-model)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]


def test_model_bench_smoke(tmp_path: Path) -> None:
    out = tmp_path / "model.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.perf.model", "--smoke", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads(out.read_bytes())
    assert result["groups"] == 4 and result["partitions"] == 6
    assert result["columnar_ms_per_tick"] > 0 and result["per_group_ms_per_tick"] > 0
    per_group, columnar = result["per_group_ms_per_tick"], result["columnar_ms_per_tick"]
    assert abs(result["ratio"] - per_group / columnar) <= 0.01 * max(1.0, result["ratio"])
    rebuilt = result["rebuilt_ms_per_tick"]
    assert rebuilt > 0
    assert abs(result["ratio_vs_rebuilt"] - rebuilt / columnar) <= 0.01 * max(
        1.0, rebuilt / columnar
    )
    assert result["load_avg_1m_before"] >= 0 and result["blas_threads"]
