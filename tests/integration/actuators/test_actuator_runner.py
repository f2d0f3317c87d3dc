"""The runner on the real broker with the dry-run backend: gates, kill switch, dedupe across
restarts, lease ends after a restart, and that bad input never stops it."""

from __future__ import annotations

import time
import urllib.request

from actuators.backends import DryRunBackend
from bench.support import actuator_harness as T
from bench.support.actuator_harness import KEY, Harness, by_id
from schemas import validate


def now_ms() -> int:
    return int(time.time() * 1000)


def test_bad_events_are_rejected_with_an_outcome_and_the_actuator_keeps_running(
    harness: Harness,
) -> None:
    backend = DryRunBackend()
    harness.start(backend)
    forged = T.throttle("ok-1", 1000, key=b"not-the-key-0123456789abcdef", now_ms=now_ms())
    unsigned = T.throttle("ok-1", 1000, key=KEY, now_ms=now_ms())
    unsigned["signature"] = "f" * 64
    expired = T.throttle("ok-1", 1000, key=KEY, now_ms=now_ms() - 10_000, ttl_ms=1000)
    off_list = T.throttle("mallory", 1000, key=KEY, now_ms=now_ms())
    fine = T.throttle("ok-2", 2000, key=KEY, now_ms=now_ms())
    harness.send(b"{not json", forged, unsigned, expired, off_list, key=b"same-partition")
    harness.send(fine, key=b"same-partition")  # after the bad ones, on the same partition
    outcomes = harness.read_outcomes(until=6)
    for o in outcomes:
        validate(o)
    results = {o.get("reason", "").split(":")[0]: o["result"] for o in outcomes}
    assert results["malformed"] == "rejected"
    assert results["bad_signature"] == "rejected"
    assert [o["result"] for o in outcomes if o["action_id"] == expired["id"]] == ["expired"]
    assert [o["result"] for o in outcomes if o["action_id"] == off_list["id"]] == ["rejected"]
    assert [o["result"] for o in outcomes if o["action_id"] == fine["id"]] == ["applied"]
    assert sum(o["result"] == "rejected" for o in outcomes) == 4
    assert backend.calls == [("throttle", "client-id", "ok-2", 2000)]


def test_halt_reaches_every_actuator_within_a_second_and_resume_restarts(
    harness: Harness,
) -> None:
    backend = DryRunBackend()
    runners = [harness.start(backend, actuator_id="a"), harness.start(backend, actuator_id="b")]
    time.sleep(1.0)  # let the group settle: each actuator owns some control partitions
    sent = time.monotonic()
    harness.send(T.halt(key=KEY, now_ms=now_ms()))
    while not all(r.ledger.halted for r in runners) and time.monotonic() - sent < 5:
        time.sleep(0.01)
    halted_after_s = time.monotonic() - sent
    assert all(r.ledger.halted for r in runners)
    assert halted_after_s < 1.0  # the one that read it, and the other through the outcomes
    blocked = T.throttle("ok-1", 1000, key=KEY, now_ms=now_ms())
    harness.send(blocked)
    assert len(harness.read_outcomes(until=2)) == 2  # halt applied, blocked rejected
    harness.send(T.resume(key=KEY, now_ms=now_ms()))
    while any(r.ledger.halted for r in runners) and time.monotonic() - sent < 10:
        time.sleep(0.01)
    later = T.throttle("ok-1", 1000, key=KEY, now_ms=now_ms())
    harness.send(later)
    got = by_id(harness.read_outcomes(until=4))
    assert got[blocked["id"]][0]["result"] == "rejected"
    assert got[blocked["id"]][0]["reason"].startswith("halted")
    assert got[later["id"]][0]["result"] == "applied"
    assert backend.calls == [("throttle", "client-id", "ok-1", 1000)]


def test_a_restarted_actuator_rebuilds_its_ledger_and_ends_leases_it_did_not_see_begin(
    harness: Harness,
) -> None:
    first = DryRunBackend()
    runner = harness.start(first)
    # 3 s: the restart (fencing, the ledger rebuild, the kept halts) must end inside the lease
    short = T.throttle("ok-lease", 5000, key=KEY, now_ms=now_ms(), lease_s=3.0)
    harness.send(short)
    harness.read_outcomes(until=1)
    harness.stop(runner)  # stopped before the lease ends
    assert first.calls == [("throttle", "client-id", "ok-lease", 5000)]

    second = DryRunBackend()
    restarted = harness.start(second)
    assert short["id"] in restarted.ledger.applied
    assert list(restarted.ledger.leases) == [("client-id", "ok-lease")]
    harness.send(short)  # a replay of the same event: not applied again
    got = by_id(harness.read_outcomes(until=3, timeout_s=10))
    results = sorted(o["result"] for o in got[short["id"]])
    assert results == ["applied", "duplicate", "released"]
    assert second.calls == [("release", "client-id", "ok-lease")]
    assert restarted.ledger.leases == {}
    port = restarted.metrics_port
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'lagpilot_actuator_events_total{result="duplicate",type="throttle_producer"} 1.0' in text
    assert "lagpilot_actuator_throttles_active 0.0" in text
    assert urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5).status == 200


def test_two_actuators_in_one_group_apply_each_event_once(harness: Harness) -> None:
    a, b = DryRunBackend(), DryRunBackend()
    harness.start(a, actuator_id="a")
    harness.start(b, actuator_id="b")
    events = [T.throttle(f"ok-{i}", 1000 + i, key=KEY, now_ms=now_ms()) for i in range(60)]
    harness.send(*events[:30])
    time.sleep(0.5)
    harness.send(*events[30:], *events[:10])  # ten replays
    got = by_id(harness.read_outcomes(until=70))
    for e in events:
        assert [o["result"] for o in got[e["id"]]].count("applied") == 1
    applied = [c for c in a.calls + b.calls]
    assert len(applied) == 60 and len(set(applied)) == 60
