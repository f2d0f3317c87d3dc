"""A tiny run of the sampler's ListOffsets benchmark (figures come from make bench-list-offsets)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]


def test_list_offsets_smoke(kafka_bootstrap: str, tmp_path: Path) -> None:
    out = tmp_path / "list_offsets.json"
    argv = ["--topics", "2", "--partitions", "3", "--ticks", "3", "--sampler-s", "1"]
    argv += ["--out", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "bench.perf.list_offsets", "--bootstrap", kafka_bootstrap, *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    r = orjson.loads(out.read_bytes())
    assert r["partitions"] == 6 and r["same_answers"] is True
    for way in ("admin_client_per_partition", "kafka_python_end_offsets", "per_broker_requests"):
        assert r[way]["cpu_ms_per_tick_median"] >= 0 and r[way]["wall_ms_per_tick_median"] > 0
    assert r["tick_after_list_offsets"]["messages_per_tick"] == 2
    sampler = r["sampler"]
    assert sampler["ticks"] >= 2 and sampler["samples"] >= 2, sampler
    assert not any(k.startswith("list_offsets") for k in sampler["errors"]), sampler
