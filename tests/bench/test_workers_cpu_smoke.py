"""A tiny run of bench/perf/workers_cpu.py so it cannot rot (the figures come from a full run:
bench/results/workers_cpu.json)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]


def test_workers_cpu_bench_smoke(kafka_bootstrap: str, tmp_path: Path) -> None:
    out = tmp_path / "workers_cpu.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.perf.workers_cpu", "--smoke", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "KAFKA_BOOTSTRAP": kafka_bootstrap},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    r = orjson.loads(out.read_bytes())
    for field in ("cpu_bound_naive_per_s", "cpu_bound_threads_per_s", "cpu_bound_process_per_s",
                  "cpu_bound_process_ratio", "cpu_bound_threads_ratio", "cpus", "commit",
                  "measured_at", "load_avg_1m_start"):  # fmt: skip
        assert field in r, field
    assert r["cpu_bound_target"] == {"cpu_bound_process_ratio": round(0.8 * r["cpus_usable"], 2)}
    runs = r["cpu_bound_runs"]
    assert runs["process"]["handled"] == 200 and runs["threads"]["handled"] == 60
    # every mode: nothing lost, nothing handled twice, each key in order (not the target:
    # a run of seconds says nothing of the rates)
    for field in ("lost", "duplicates", "order_violations"):
        assert set(r[f"cpu_bound_{field}"].values()) == {0}, (field, r[f"cpu_bound_{field}"])
    assert runs["process"]["error"] is None and runs["threads"]["error"] is None
