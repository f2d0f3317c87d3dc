"""A tiny war story (both runs, 4 partitions, a 5 s avalanche, the shipped policy) so the
benchmark cannot rot: its mechanics, not its figures (those come from `make
bench-war-story`), with the workers on each group protocol (``--group-protocol``)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_war_story_smoke(kafka_bootstrap: str, tmp_path: Path, protocol: str) -> None:
    out = tmp_path / "war_story.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.incidents.war_story", "--smoke", "--out", str(out),
         "--bootstrap", kafka_bootstrap, "--group-protocol", protocol],
        cwd=ROOT, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    r = orjson.loads(out.read_bytes())
    # which protocol ran, in the result and in each arm's workers
    assert r["group_protocol"] == r["shape"]["group_protocol"] == protocol
    assert r["off"]["group_protocol"] == r["on"]["group_protocol"] == protocol
    if protocol == "consumer":  # the broker's session and heartbeat, as it reports them
        assert all(isinstance(v, int) and v > 0 for v in r["group_settings"].values())
        assert len(r["group_settings"]) == 2
    else:
        assert r["group_settings"] == {}
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
    # the run's policy is the shipped file, byte for byte
    policy = ROOT / "deploy" / "policy.default.toml"
    assert r["policy_sha256"] == hashlib.sha256(policy.read_bytes()).hexdigest()
    assert r["off"]["policy_sha256"] == r["on"]["policy_sha256"] == r["policy_sha256"]
    # every action is judged against the injected hotspot; what the loop chose (and when)
    # is the policy's business, measured by `make bench-war-story`, not this smoke
    assert isinstance(r["wrong_actions"], int) and r["off"]["actions"] == []
    for a in r["on"]["actions"]:
        assert {"type", "target", "cause", "fits", "outcome", "applied", "verdict"} <= set(a)
        # a spread the actuator delegated is applied only once a worker says it did it
        if a["type"] == "spread_partition" and a["outcome"] == "delegated":
            said = [w for w in r["on"]["worker_outcomes"] if w["action_id"] == a["id"]]
            assert a["applied"] == bool(said) and a["applied_by"] == len(
                {w["instance"] for w in said}
            )
    # the product's verdicts, when one came within the smoke, judge the hotspot
    assert {v["cause"] for v in r["on"]["verifications"]} <= {"hotspot"}
    assert all(v["result"] in ("verified", "no_effect") for v in r["on"]["verifications"])
    spread = [w for w in r["on"]["worker_outcomes"] if w["action_type"] == "spread_partition"]
    assert all(w["did"] in ("spread", "handoff_started") for w in spread)
    assert out.with_suffix(".png").stat().st_size > 10_000
