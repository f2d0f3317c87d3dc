"""``python -m bench.faults --smoke`` on the test broker: the decoder fuzz (10,000 records), bad
control input and the Admin API faults (a 3 s outage, slow answers, a 307 loop) run, and the
table says what they measured; rows not measured carry no figures. The rows under load
(1-4, 6b, 8a-8c) run in the full run only; of 8c, its cheap half (a read-only state
directory at start) runs here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from bench.faults import state_dir as fault_state_dir

ROOT = Path(__file__).resolve().parents[2]


def test_faults_bench_smoke(kafka_bootstrap: str, tmp_path: Path) -> None:
    out, doc = tmp_path / "faults.json", tmp_path / "reliability.md"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.faults", "--smoke",
         "--bootstrap", kafka_bootstrap, "--out", str(out), "--doc", str(doc)],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = orjson.loads(out.read_bytes())
    rows = {r["fault"]: r for r in result["rows"]}
    fuzz = rows["decoder_fuzz"]["details"]
    assert fuzz["records"] == 10_000 and fuzz["crashes"] == 0 and fuzz["unclassified"] == 0
    assert sum(fuzz["classes"].values()) == 10_000
    assert fuzz["classes"]["OffsetCommit"] > 0 and fuzz["classes"]["skipped:malformed_value"] > 0

    control = rows["bad_control_input"]
    assert control["targets_met"] is True, control["why"]
    assert all(v["outcomes"] and "applied" not in v["outcomes"]
               for v in control["details"]["per_kind"].values())  # fmt: skip
    assert control["details"]["per_kind"]["oversized"]["reason"].startswith("oversized")
    assert control["details"]["per_kind"]["replayed"]["outcomes"] == ["duplicate"]

    admin = rows["admin_api_faults"]["details"]
    loop = admin["faults"]["redirect_loop"]
    assert loop["action_during"] == ["failed"] and "redirects" in loop["reason"]
    assert loop["http_requests_for_one_action"] == 4 * 6  # one retry layer: 4 tries x 6
    assert admin["faults"]["slow_answers"]["action_during"] == ["applied"]
    assert all(f["action_after_clear"] == ["applied"] for f in admin["faults"].values())
    assert admin["duplicate_actions"] == 0 and admin["duplicate_side_effects"] == 0
    assert admin["violations"] == []

    new_rows = {"replica_kill", "actuator_cut", "state_dir", "replica_overload"}
    assert new_rows <= set(rows)  # the full run's rows are in the table, not measured here
    assert all("not run in this (smoke) run" in rows[f]["why"] for f in new_rows)
    for r in result["rows"]:
        if not r["measured"]:
            assert r["recovered"] is None and r["lost"] is None and r["why"]
    faults_table = doc.read_text().split("\n## Soak")[0]  # the soak's tables follow
    assert faults_table.count("\n| ") == 1 + len(result["rows"])  # a header, a line per row


def test_a_read_only_state_dir_stops_the_pipeline_in_one_line(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    try:
        got = fault_state_dir.read_only_at_start(kafka_bootstrap, tmp_path)
    except fault_state_dir.CannotMount as exc:  # the full run says so in its row too
        pytest.skip(f"row 8c mounts a tmpfs of its own: {exc}")
    assert got["exit_code"] == 73, got
    assert got["names_the_directory"] and got["names_the_fix"], got["said"]
    assert not got["traceback"]
