"""A tiny run of bench/perf/workers.py so it cannot rot (figures come from make bench-workers)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]


def test_workers_bench_smoke(kafka_bootstrap: str, tmp_path: Path) -> None:
    out = tmp_path / "workers.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.perf.workers", "--smoke", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "KAFKA_BOOTSTRAP": kafka_bootstrap},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    r = orjson.loads(out.read_bytes())
    assert r["naive"]["processed"] >= 300 and r["sdk"]["processed"] == 2000
    assert r["lost"] == 0 and r["duplicates"] == 0 and r["order_violations"] == 0
    assert r["sdk"]["records_per_s"] > r["naive"]["records_per_s"]  # lanes run side by side
    # an async def handler's lanes, tasks on one event loop: every message once, in key order
    assert r["sdk_async"]["processed"] == 2000 and r["sdk_async"]["order_violations"] == 0
    assert r["sdk_async"]["records_per_s"] > r["naive"]["records_per_s"]
    assert set(r["met_by_mode"]) == {"sdk", "sdk_async"}
    # the client alone and the handler alone, beside the SDK: rates, CPU per message, and the
    # overhead ratios computed from them (the targets are the full run's, not checked here)
    bare, floor = r["bare"], r["threads_floor"]
    assert bare["processed"] == 2000 and bare["records_per_s"] > 0 and bare["cpu_us_per_msg"] > 0
    assert floor["processed"] == 2000 and floor["threads"] == 8 * r["setup"]["settings"]["lanes"]
    for mode in ("naive", "threads_floor", "sdk", "sdk_async"):
        assert r[mode]["cpu_us_per_msg"] > 0 and r[mode]["cpu_s"] > 0
    for name, mode in (("overhead_vs_bare", "sdk"), ("overhead_vs_bare_async", "sdk_async")):
        expected = r[mode]["cpu_us_per_msg"] / bare["cpu_us_per_msg"]
        assert abs(r[name] - expected) <= 0.01 * expected + 0.01
    assert r["targets"]["overhead_vs_bare_max"] == 3.0
    assert r["overhead_met"] == (r["overhead_vs_bare"] <= 3.0)
    assert r["met"] is False or r["overhead_met"]  # met includes the overhead target
