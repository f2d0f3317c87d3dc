"""The ``mixed`` and ``calm`` scenarios, smoke-sized, on the real broker: their mechanics, not
their figures (those come from `make bench-incidents`). Checked: each ran under the shipped
policy file byte for byte, every group got its traffic and processed all of it (nothing
dropped, lost or applied twice), the loop's actions were judged, the calm group went through
its rollout, join and leave. What the loop chose is not checked (the policy's business)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "deploy" / "policy.default.toml"
KEYS = ("policy_sha256", "actions", "wrong_actions", "applied_actions", "verified", "dropped",
        "lost", "duplicates", "remedy", "detection_ms", "shape")  # fmt: skip


def _run(name: str, bootstrap: str, out: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", f"bench.incidents.{name}", "--smoke", "--out", str(out),
         "--bootstrap", bootstrap],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert out.with_suffix(".png").stat().st_size > 10_000
    summary: dict[str, Any] = orjson.loads(out.read_bytes())
    assert all(k in summary for k in KEYS), sorted(set(KEYS) - set(summary))
    assert summary["policy_sha256"] == hashlib.sha256(POLICY.read_bytes()).hexdigest()
    assert summary["dropped"] == summary["lost"] == summary["duplicates"] == 0
    rows = summary["actions"]
    assert summary["applied_actions"] == sum(r["applied"] for r in rows)
    return summary


def test_mixed_smoke(kafka_bootstrap: str, tmp_path: Path) -> None:
    s = _run("mixed", kafka_bootstrap, tmp_path / "mixed.json")
    for arm in ("off", "on"):
        run = s[arm]
        assert run["drained"] and run["stable_at_start"], arm
        assert run["lost"] == run["dropped"] == run["duplicates"] == 0, arm
        groups = run["groups"] if arm == "off" else s["groups"]
        assert set(groups) == {"hotspot", "flood", "healthy"}
        for name, g in groups.items():
            assert g["intended"] > 0 and g["processed"] == g["intended"], (arm, name)
            assert g["lost"] == g["duplicates"] == 0 and g["p99_ms"] > 0, (arm, name)
    assert s["off"]["actions"] == []  # the loop is off in the off arm
    # every action of the on arm is on one of the three groups (or named as not)
    per_group = sum(len(g["actions"]) for g in s["groups"].values())
    assert per_group + len(s["unattributed_actions"]) == len(s["actions"])
    assert s["healthy_applied_actions"] == s["groups"]["healthy"]["applied_actions"]


def test_calm_smoke(kafka_bootstrap: str, tmp_path: Path) -> None:
    s = _run("calm", kafka_bootstrap, tmp_path / "calm.json")
    on = s["on"]
    assert on["drained"] and on["stable_at_start"] and on["intended"] > 0
    steps = [(st["step"], st["member"]) for st in s["steps"]]
    members = [m for step, m in steps if step == "stop"]
    assert len(members) == s["shape"]["members"]  # every member restarted, in turn
    assert [step for step, _ in steps] == ["stop", "started"] * len(members) + ["join", "leave"]
    assert "group_health" in s["statuses"] and on["generation_moves"] >= 2  # join, leave
