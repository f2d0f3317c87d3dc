"""A tiny run of bench/perf/keda.py so it cannot rot (figures come from make bench-keda)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

from bench.perf.keda import POLL_INTERVAL_MS, poll_delays

ROOT = Path(__file__).resolve().parents[2]


def test_poll_delays_wait_for_the_next_tick() -> None:
    assert poll_delays([1_000, 29_000, 30_000, 61_000], first_tick_ms=0) == [
        29_000, 1_000, POLL_INTERVAL_MS, 29_000
    ]  # fmt: skip


def test_keda_bench_smoke(kafka_bootstrap: str, tmp_path: Path) -> None:
    out = tmp_path / "keda.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.perf.keda", "--smoke", "--out", str(out),
         "--bootstrap", kafka_bootstrap],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    r = orjson.loads(out.read_bytes())
    assert r["trials"] == 2
    assert 0 < r["activation_p50_ms"] <= r["activation_p99_ms"] < 15_000
    assert 0 < r["poll_30s_p50_ms"] <= POLL_INTERVAL_MS
