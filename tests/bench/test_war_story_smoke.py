"""A tiny war story (both runs, 4 partitions, a 5 s avalanche) so the benchmark cannot rot;
the figures come from `make bench-war-story`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]


def test_war_story_smoke(kafka_bootstrap: str, tmp_path: Path) -> None:
    out = tmp_path / "war_story.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.war_story", "--smoke", "--out", str(out),
         "--bootstrap", kafka_bootstrap],
        cwd=ROOT, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    r = orjson.loads(out.read_bytes())
    for key in ("off_p99_ms", "on_p99_ms", "ratio", "lost", "duplicates", "detection_ms"):
        assert key in r
    # what detected the hot partition: its first non-OK event, at the detection time
    first = r["on"]["first_non_ok"]
    assert first and {f["partition"] for f in first} <= {1}  # the smoke's one hot partition
    assert min(f["received_ms"] for f in first) == r["on"]["detection_ms"]
    assert all(f["status"] != "OK" and f["observed_ms"] >= 0 for f in first)
    # nothing lost or repeated, whatever the balancer did
    assert r["lost"] == 0 and r["duplicates"] == 0
    assert r["off"]["drained"] and r["on"]["drained"]
    assert r["off"]["processed"] == r["off"]["produced"] > 0
    # the balancer acted on the hot partition, and the workers obeyed
    assert any(a["type"] == "spread_partition" for a in r["on"]["actions"])
    assert r["on"]["worker"].get("obeyed_spread_partition", 0) >= 1
    # ... and said so: the actuator delegated the spread, the worker reported applying it
    assert any(o["result"] == "delegated" and o["type"] == "spread_partition"
               for o in r["on"]["outcomes"])  # fmt: skip
    # ... and the policy judged the spread from its own partition's time lag (diagnosis on)
    assert r["on"]["verifications"]
    assert {v["cause"] for v in r["on"]["verifications"]} == {"hotspot"}
    assert all(v["result"] in ("verified", "no_effect") for v in r["on"]["verifications"])
    spread = [w for w in r["on"]["worker_outcomes"] if w["action_type"] == "spread_partition"]
    assert spread and all(w["did"] == "spread" and w["lanes"] > 1 for w in spread)
    assert out.with_suffix(".png").stat().st_size > 10_000
