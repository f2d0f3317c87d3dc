"""A tiny run of the scale benchmark so it cannot rot (figures come from make bench-scale)."""

from __future__ import annotations

import pstats
import subprocess
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]

KEYS = {
    "partitions",
    "groups",
    "sample_interval_ms",
    "steady_commit_rate",
    "one_replica",
    "two_replicas",
    "scaling_ratio",
    "replicas_for_10k_x_100",
    "per_core_commits_per_s",
    "group_partition_ticks_per_core_s",
    "false_alarms",
}


def test_scale_smoke(kafka_bootstrap: str, tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.perf.scale",
            "--smoke",
            "--out",
            str(out),
            "--bootstrap",
            kafka_bootstrap,
            "--profile",
            str(tmp_path / "prof"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    r = orjson.loads(out.read_bytes())
    assert r.keys() >= KEYS
    assert (r["partitions"], r["groups"]) == (8, 3)
    one = r["one_replica"]
    assert {"max_sustained_commits_per_s", "cpu_cores", "rss_mib", "delay_p99_s"} <= one.keys()
    assert "max_sustained_commits_per_s" in r["two_replicas"]
    [step] = one["steps"]
    # the generator really committed at the scheduled rate, and the model consumed every
    # commit it produced once committing stopped
    assert step["produced"] >= 0.8 * r["steady_commit_rate"] * r["window_s"]
    assert step["caught_up_after_s"] is not None, step
    # the window began midway between two full scrapes of the grid (5 s in a 10 s window):
    # exactly two ran in it, and the host's speed was read before it
    assert step["full_scrapes"] == 2, step
    assert step["host_probe_us_per_group_partition"] > 0, step
    assert one["host_probe_us_per_group_partition"] == step["host_probe_us_per_group_partition"]
    assert step["sustained"], step
    assert step["full_scrapes"] >= 1  # as Prometheus would: every family rendered
    assert one["max_sustained_commits_per_s"] == r["steady_commit_rate"]
    assert one["cpu_cores"] > 0 and 0 < one["rss_mib"] < 1024
    # every group of the load is healthy: a held step raised no alarm, and the per-core
    # figures come from the step's own CPU
    assert step["false_alarms"] == 0 == r["false_alarms"], step["false_alarms_by_kind"]
    assert (
        abs(r["per_core_commits_per_s"] * step["cpu_cores"] - step["consumed_per_s"])
        <= 0.05 * step["consumed_per_s"] + 1
    )
    assert r["group_partition_ticks_per_core_s"] > 0
    assert len(step["load_average"]) == 2
    # --profile: the replica's model process under cProfile, written when it stops
    assert pstats.Stats(str(tmp_path / "prof.0.prof")).total_calls > 0
    # the one replica models every topic of the load (read from its lagpilot_topics_modelled)
    assert step["topics_by_replica"] == [r["topics"]], step["topics_by_replica"]
