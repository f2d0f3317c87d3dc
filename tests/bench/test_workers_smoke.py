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
    # the SDK with a handler that returns at once: every message's prefix in, no handler work
    noop = r["sdk_noop"]
    assert noop["processed"] == 2000 and noop["lost"] == 0 and noop["records_per_s"] > 0
    assert "sdk_noop_ratio" not in r  # no ratio to the naive consumer's 1 ms handler
    for mode in ("sdk_noop", "sdk"):  # the lanes-busy probe saw the lanes run
        assert 0 < r[mode]["lanes_busy_mean"] <= r[mode]["lanes_busy_max"] <= floor["threads"]
    for mode in ("naive", "threads_floor", "sdk_noop", "sdk", "sdk_async"):
        assert r[mode]["cpu_us_per_msg"] > 0 and r[mode]["cpu_s"] > 0
    # overhead_vs_bare: the no-op SDK's CPU per message over the bare loop's; _1ms and
    # _async: the 1 ms handler's modes over the same floor
    for name, mode in (("overhead_vs_bare", "sdk_noop"), ("overhead_vs_bare_1ms", "sdk"),
                       ("overhead_vs_bare_async", "sdk_async")):  # fmt: skip
        expected = r[mode]["cpu_us_per_msg"] / bare["cpu_us_per_msg"]
        assert abs(r[name] - expected) <= 0.01 * expected + 0.01
    assert r["targets"]["overhead_vs_bare_max"] == 3.0
    assert r["overhead_met"] == (r["overhead_vs_bare"] <= 3.0)
    assert r["met"] is False or r["overhead_met"]  # met includes the overhead target
