"""Kill the actuator (SIGKILL) in the middle of 1,000 control events, restart it, and count.

Guarantee under test: every event gets exactly one committed ``applied`` outcome, although
the process died mid-transaction, and the backend is called once per event: the events
applied after the last commit and before the kill have an intent and no outcome, and the
replacement, reading the backend's state (the dry-run record), records them ``reconciled``
without calling again (``actuators/reconcile.py``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from actuators.backends import DryRunBackend
from bench.support import actuator_harness as T
from bench.support.actuator_harness import KEY, Harness

N = 1000
MAX_BATCH = 32


def _spawn(harness: Harness, record: Path, policy: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP": harness.bootstrap,
        "LAGPILOT_SIGNING_KEY": KEY.decode(),
        "LAGPILOT_CONTROL_TOPIC": harness.control,
        "LAGPILOT_OUTCOMES_TOPIC": harness.outcomes,
        "LAGPILOT_ACTUATOR_GROUP": f"{harness.name}-actuator",
    }
    cmd = [sys.executable, "-m", "actuators", "--backend", "dry-run", "--dry-run-log",
           str(record), "--policy", str(policy), "--actuator-id", f"{harness.name}-replay",
           "--metrics-port", "0", "--max-batch", str(MAX_BATCH)]  # fmt: skip
    with log.open("ab") as sink:  # a file, not a pipe: a full pipe would block the actuator
        return subprocess.Popen(cmd, env=env, stdout=sink, stderr=sink)


def _lines(path: Path) -> int:
    return len(DryRunBackend.read_record(path)) if path.exists() else 0


def test_replay_after_sigkill_applies_each_event_once(harness: Harness, tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('mode = "act"\n[allow]\nthrottle_client_ids = ["ok-*"]\n')
    record = tmp_path / "record.jsonl"
    now = int(time.time() * 1000)
    events = [
        T.throttle(f"ok-{i}", 1000 + i, key=KEY, now_ms=now, ttl_ms=600_000) for i in range(N)
    ]
    ids = {e["id"] for e in events}

    log = tmp_path / "actuator.log"
    first = _spawn(harness, record, policy, log)
    harness.send(*events)
    deadline = time.monotonic() + 60
    while _lines(record) < N // 3 and time.monotonic() < deadline:
        assert first.poll() is None, log.read_text()
        time.sleep(0.005)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    applied_before_kill = _lines(record)
    assert N // 3 <= applied_before_kill < N, "the kill did not land mid-stream"

    second = _spawn(harness, record, policy, log)
    try:
        outcomes = harness.read_outcomes(until=N, timeout_s=60)
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(20) == 0
    applied = Counter(o["action_id"] for o in outcomes if o["result"] == "applied")
    assert set(applied) == ids
    assert max(applied.values()) == 1  # committed exactly once each
    assert Counter(o["result"] for o in outcomes) == {"applied": N}, Counter(
        (o["result"], o.get("reason")) for o in outcomes
    )
    calls = Counter(name for _, _, name, _ in DryRunBackend.read_record(record))
    assert set(calls) == {e["params"]["name"] for e in events}  # every event was applied
    assert max(calls.values()) == 1, [n for n, c in calls.items() if c > 1]  # and called once
