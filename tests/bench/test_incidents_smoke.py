"""A tiny incident suite (seconds-long shapes) so the suite cannot rot; the figures come from
`make bench-incidents`. The flood, the storm and the slow group run here, at once (232 s
one after the other on a loaded machine); the avalanche's lagpilot and sdk runs are the war
story's (tests/bench/test_war_story_smoke.py), and its three baselines one after the other
took two minutes of a 17-minute suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]
KEYS = ("remedy", "detection_ms", "first_action_ms", "verified", "off_p99_ms", "on_p99_ms",
        "ratio", "lost", "duplicates", "shape")  # fmt: skip


def test_incident_suite_smoke_merges_into_the_results(kafka_bootstrap: str, tmp_path: Path) -> None:
    """The flood, the storm and the slow group, tiny, in one run (every scenario and both
    of its arms at once: the suite's wall time; the figures come from `make
    bench-incidents`); a run of some scenarios keeps the others' entries."""
    out = tmp_path / "incidents.json"
    out.write_bytes(orjson.dumps({"scenarios": {"avalanche": {"kept": True}}}))
    proc = subprocess.run(
        [sys.executable, "-m", "bench.incidents", "--smoke", "--out", str(out),
         "--bootstrap", kafka_bootstrap, "--scenarios", "flood,storm,slow_group"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    scenarios = orjson.loads(out.read_bytes())["scenarios"]
    assert scenarios["avalanche"] == {"kept": True}
    for name in ("flood", "storm", "slow_group"):
        s = scenarios[name]
        assert all(k in s for k in KEYS), (name, sorted(s))
        assert s["duplicates"] == 0, name  # the SDK runs in every arm
        assert out.with_name(f"incidents_{name}.png").stat().st_size > 10_000
    f = scenarios["flood"]
    assert f["lost"] == 0
    assert f["flooder"] in f["on"]["client_ids"]
    assert f["on"]["reported_rates_events"] > 0  # the producer wrapper reported its rates
    # a 16 s storm is too short to detect (3 rebalances at a 6 s session timeout): the smoke
    # checks the mechanics, the hand-off is measured by `make bench-incidents`
    storm = scenarios["storm"]
    assert storm["off_deaths"] >= 1  # the heavy document kills whoever takes it
    assert storm["off"]["rebalances"] >= 1 and storm["off"]["lost_by_partition"].get("2")
    slow = scenarios["slow_group"]
    assert slow["lost"] == 0
    assert slow["detection_ms"] is not None  # the inflow outgrew the one worker
    if slow["remedy"]:  # on a loaded machine the short peak may end before the policy acts
        assert slow["remedy"][0] == "scale_consumers"
        assert slow["workers_on"] > slow["workers_off"] == 1  # the autoscaler obeyed
