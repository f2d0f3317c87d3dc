"""A tiny run of the /metrics render benchmark so it cannot rot (figures come from
make bench-metrics)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]


def test_metrics_render_bench_smoke(tmp_path: Path) -> None:
    out = tmp_path / "metrics_render.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.perf.metrics_render", "--smoke", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads(out.read_bytes())
    assert (result["topics"], result["partitions"], result["groups"]) == (3, 4, 5)
    assert result["group_partitions"] == 60 and result["series"] == 7 * 60 + 3 * 15
    assert result["identical_text"] is True
    for scrape in (result["scrape"], result["scrape_before"]):
        assert scrape["bytes"] > result["text_bytes"]  # the registry's text, then the lag text
        assert scrape["child_rss_peak_mib"] >= scrape["child_rss_idle_mib"] > 10
        assert scrape["wall_s"] > 0
    assert result["render_ratio"] > 0 and result["load_avg_1m_before"] >= 0
