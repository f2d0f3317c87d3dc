"""Fault row 4b: the actuator SIGKILLed between apply and outcome, on a real broker.

``lagpilot actuate`` (``python -m actuators``, dry-run backend whose every call is fsynced
to a record file) reads ``n`` leased throttles; once a third of them reached the backend it
is killed with SIGKILL: the batch in flight was applied and its outcomes were not committed.
A replacement with the same actuator id starts. Counted:

- ``duplicate_actions``: ids with more than one committed ``applied`` outcome (target 0);
- ``reapplied`` (and ``released_twice``): backend calls made again on replay. The actions of
  the batch in flight have an intent and no outcome: the replacement reads the quota and
  records those already set as applied (``reconciled``) without calling again;
- ``stuck_throttles``: throttles with no release after their lease (every lease is a few
  seconds, and the replacement must end the leases its predecessor started);
- ``recover_s``: from the replacement's start to its first backend call.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from actuators.backends import DryRunBackend
from bench.support.actuator_harness import KEY, Harness, throttle

MAX_BATCH = 32
LEASE_S = 5.0


def _spawn(h: Harness, record: Path, policy: Path, log: Path) -> subprocess.Popen[bytes]:
    env = os.environ | {
        "KAFKA_BOOTSTRAP": h.bootstrap,
        "LAGPILOT_SIGNING_KEY": KEY.decode(),
        "LAGPILOT_CONTROL_TOPIC": h.control,
        "LAGPILOT_OUTCOMES_TOPIC": h.outcomes,
        "LAGPILOT_ACTUATOR_GROUP": f"{h.name}-actuator",
    }
    cmd = [sys.executable, "-m", "actuators", "--backend", "dry-run", "--dry-run-log",
           str(record), "--policy", str(policy), "--actuator-id", f"{h.name}-a",
           "--metrics-port", "0", "--max-batch", str(MAX_BATCH)]  # fmt: skip
    with log.open("ab") as sink:  # a file: a full pipe would block the actuator
        return subprocess.Popen(cmd, env=env, stdout=sink, stderr=sink)


def _calls(record: Path) -> list[list[Any]]:
    return DryRunBackend.read_record(record) if record.exists() else []


def actuator_kill(bootstrap: str, tmp: Path, n: int) -> dict[str, Any]:
    h = Harness(bootstrap, f"faults-kill-{uuid.uuid4().hex[:8]}")
    policy = tmp / f"{h.name}.toml"
    policy.write_text('mode = "act"\n[allow]\nthrottle_client_ids = ["ok-*"]\n')
    record, log = tmp / f"{h.name}.calls", tmp / f"{h.name}.log"
    now = int(time.time() * 1000)
    events = [throttle(f"ok-{i}", 1000 + i, key=KEY, now_ms=now, ttl_ms=600_000, lease_s=LEASE_S)
              for i in range(n)]  # fmt: skip
    first = _spawn(h, record, policy, log)
    replacement: subprocess.Popen[bytes] | None = None
    try:
        h.send(*events)
        deadline = time.monotonic() + 60
        while len(_calls(record)) < n // 3 and time.monotonic() < deadline:
            if first.poll() is not None:
                raise RuntimeError(f"the actuator exited early: {log.read_text()[-2000:]}")
            time.sleep(0.005)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        before_kill = len(_calls(record))
        started = time.monotonic()
        replacement = _spawn(h, record, policy, log)
        recover_s = None
        while time.monotonic() - started < 60:
            if len(_calls(record)) > before_kill:
                recover_s = time.monotonic() - started
                break
            time.sleep(0.01)
        # every id ends with two outcomes (applied, then released at its lease end): reading
        # only n stopped early when releases came before the last applies (76 "lost")
        outcomes = h.read_outcomes(until=2 * n, timeout_s=150)
        # Every lease ends LEASE_S after its apply: wait for the releases, then count.
        deadline = time.monotonic() + LEASE_S + 20
        while time.monotonic() < deadline:
            released = {c[2] for c in _calls(record) if c[0] == "release"}
            if len(released) >= n:
                break
            time.sleep(0.5)
    finally:
        for proc in (first, replacement):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(20)
    calls = _calls(record)
    throttled = Counter(c[2] for c in calls if c[0] == "throttle")
    last_throttle = {c[2]: i for i, c in enumerate(calls) if c[0] == "throttle"}
    last_release = {c[2]: i for i, c in enumerate(calls) if c[0] == "release"}
    stuck = [k for k, i in last_throttle.items() if last_release.get(k, -1) < i]
    applied = Counter(o["action_id"] for o in outcomes if o["result"] == "applied")
    ids = {e["id"] for e in events}
    return {
        "events": n,
        "applied_before_kill": before_kill,
        "outcomes_applied": sum(1 for i in ids if applied.get(i)),
        "lost": len(ids - set(applied)),
        "duplicate_actions": sum(1 for v in applied.values() if v > 1),
        "reapplied": sum(v - 1 for v in throttled.values()),
        "released_twice": sum(
            v - 1 for v in Counter(c[2] for c in calls if c[0] == "release").values()
        ),
        "reconciled": sum(1 for o in outcomes if str(o.get("reason", "")).startswith("reconciled")),
        "max_batch": MAX_BATCH,
        "stuck_throttles": len(stuck),
        "lease_s": LEASE_S,
        "recover_s": None if recover_s is None else round(recover_s, 2),
    }


def pipeline_kill(bootstrap: str, tmp: Path, run_s: float = 50.0) -> dict[str, Any]:
    """Row 4a: ``lagpilot run`` (act) SIGKILLed mid-incident, a replacement started on the
    same state folder and consumer group. The load is row 1's (``bench.support.fault_load``)
    with one hot partition (heavy documents from 8 s in: the shipped policy spreads it); the
    pipeline is killed as soon as its first action is on the control topic. Counted:
    ``published_again`` (action ids the replacement published again: its input since the
    last checkpoint is replayed, and the ids are stable), ``duplicate_actions`` (ids applied
    or delegated more than once: target 0), and row 1's figures, recovery measured from the
    replacement's start."""
    from confluent_kafka import Consumer, TopicPartition

    from bench.support.fault_load import Scene, under_load

    info: dict[str, Any] = {}

    def fault(scene: Scene) -> None:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"pk-{uuid.uuid4().hex[:6]}",
                      "enable.auto.commit": False})  # fmt: skip
        c.assign([TopicPartition(scene.control, 0, 0)])
        deadline = time.monotonic() + run_s
        try:
            while time.monotonic() < deadline:
                msg = c.poll(0.2)
                if msg is not None and msg.error() is None and b'"action"' in msg.value():
                    info["actions_before_kill"] = msg.offset() + 1
                    break
        finally:
            c.close()
        info["killed_mid_incident"] = "actions_before_kill" in info
        scene.replace_pipeline()
        scene.cleared("the pipeline's replacement started")

    return under_load(bootstrap, tmp, fault, run_s=run_s, hot_partition=3) | info
