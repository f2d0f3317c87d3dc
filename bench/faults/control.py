"""Fault rows on the actuator's side, on a real broker.

- ``bad_control_input`` (row 7): unsigned, forged, expired, wrong-schema, oversized,
  replayed, off-allow-list and non-JSON events on a fresh control topic, read by a running
  actuator. Each must get an outcome that is not ``applied``, and the backend must see no
  call but the one real action the replay copies.
- ``admin_api_faults`` (row 5): the actuator with the Redpanda backend (built by
  ``make_backend`` as ``lagpilot actuate`` builds it) against the Admin API contract stub,
  which answers 503 to everything for a while, times out, answers slowly, or redirects to
  itself forever. Each fault gets one leadership transfer; every HTTP request is counted. The
  fault clears, and one more transfer must be applied: the time from the fault clearing to
  that ``applied`` outcome is the time to recover.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from actuators.backends import DryRunBackend, make_backend
from actuators.settings import Settings
from bench.support.actuator_harness import KEY, Harness, action, by_id, throttle
from bench.support.redpanda_admin_cluster import ClusterModel
from bench.support.redpanda_admin_stub import RedpandaAdminStub
from schemas import sign

OVERSIZED_BYTES = 256 * 1024


def _outcomes_for(h: Harness, ids: set[str], timeout_s: float) -> list[dict[str, Any]]:
    """Read outcomes until one per id in ``ids`` is there (or time is up)."""
    deadline = time.monotonic() + timeout_s
    got: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        # At least as many as last time plus the ids still missing: returns once they can be.
        missing = ids - {o["action_id"] for o in got}
        got = h.read_outcomes(
            until=len(got) + len(missing), timeout_s=max(0.5, deadline - time.monotonic())
        )
        if ids <= {o["action_id"] for o in got}:
            break
    return got


def bad_control_input(bootstrap: str, tmp: Path) -> dict[str, Any]:
    name = f"faults-ctl-{uuid.uuid4().hex[:8]}"
    h = Harness(bootstrap, name)
    record = tmp / f"{name}.calls"
    backend = DryRunBackend(str(record))
    now_ms = int(time.time() * 1000)
    real = throttle("ok-replayed", 1_000_000, key=KEY, now_ms=now_ms)
    unsigned = throttle("ok-unsigned", 1_000, key=KEY, now_ms=now_ms) | {"signature": ""}
    forged = throttle("ok-forged", 1_000, key=b"not-the-key-" * 4, now_ms=now_ms)
    altered = dict(throttle("ok-altered", 1_000_000, key=KEY, now_ms=now_ms))
    altered["params"] = dict(altered["params"], producer_byte_rate=1)  # signed, then changed
    expired = throttle("ok-expired", 1_000, key=KEY, now_ms=now_ms - 120_000, ttl_ms=1_000)
    wrong_schema = sign(
        {k: v for k, v in throttle("ok-schema", 1_000, key=KEY, now_ms=now_ms).items()
         if k != "expires_at"} | {"params": {"entity": "client-id", "name": "ok-schema",
                                             "producer_byte_rate": "fast", "lease_s": 60}},
        KEY,
    )  # fmt: skip
    oversized = sign(
        throttle("ok-oversized", 1_000, key=KEY, now_ms=now_ms)
        | {"reason": {"padding": "x" * OVERSIZED_BYTES}},
        KEY,
    )  # valid and signed, but far larger than any event the policy writes
    off_list = throttle("evil-producer", 1_000, key=KEY, now_ms=now_ms)
    bad: dict[str, dict[str, Any] | bytes] = {
        "unsigned": unsigned,
        "forged": forged,
        "altered_after_signing": altered,
        "expired": expired,
        "wrong_schema": wrong_schema,
        "oversized": oversized,
        "replayed": real,  # the same event again, after the real one was applied
        "off_allow_list": off_list,
        "not_json": b"\x00\xff{not json",
    }
    runner = h.start(backend=backend)
    try:
        h.send(real)
        first = _outcomes_for(h, {real["id"]}, 30.0)
        t0 = time.monotonic()
        for event in bad.values():
            h.send(event)
        want = {e["id"] for k, e in bad.items() if isinstance(e, dict) and k != "oversized"}
        got = _outcomes_for(h, want, 30.0)
        deadline = time.monotonic() + 10.0
        while len(got) < len(bad) + 1 and time.monotonic() < deadline:  # the unread ones too
            got = h.read_outcomes(until=len(bad) + 1, timeout_s=deadline - time.monotonic())
        handled_s = time.monotonic() - t0
    finally:
        h.stop(runner)
        backend.close()
    results = by_id(got)
    per_kind: dict[str, Any] = {}
    for kind, event in bad.items():
        if kind in ("not_json", "oversized"):  # rejected unread: known by position and reason
            word = "malformed" if kind == "not_json" else "oversized"
            outs = [o for o in got if str(o["action_id"]).startswith("unverified@")
                    and o.get("reason", "").startswith(word)]  # fmt: skip
        elif kind == "replayed":
            outs = [o for o in got if o["action_id"] == real["id"] and o["result"] != "applied"]
        else:
            outs = results.get(event["id"], [])
            outs += [o for o in got if o["action_id"].startswith("unverified@")
                     and o.get("target") == event.get("target")]  # fmt: skip
        per_kind[kind] = {
            "outcomes": [o["result"] for o in outs],
            "reason": outs[0].get("reason", "")[:160] if outs else None,
        }
    calls = DryRunBackend.read_record(record)
    applied_ids = Counter(o["action_id"] for o in got if o["result"] == "applied")
    answered = sum(1 for v in per_kind.values() if v["outcomes"])
    applied_bad = sum(1 for v in per_kind.values() if "applied" in v["outcomes"])
    return {
        "events": len(bad),
        "with_outcome": answered,
        "applied": applied_bad,
        "rejected_pct": round(100.0 * (answered - applied_bad) / len(bad), 1),
        "backend_calls": len(calls),
        "backend_calls_expected": 1,  # the real throttle, once
        "real_action_result": [o["result"] for o in first if o["action_id"] == real["id"]],
        "duplicate_actions": sum(1 for n in applied_ids.values() if n > 1),
        "handled_s": round(handled_s, 2),
        "per_kind": per_kind,
    }


# -- the Admin API faults ------------------------------------------------------------------


def admin_api_faults(
    bootstrap: str, *, outage_s: float, window_s: float = 8.0, timeout_faults: bool = True
) -> dict[str, Any]:
    name = f"faults-admin-{uuid.uuid4().hex[:8]}"
    topic = "t-hot"
    cluster = ClusterModel()
    cluster.add_topic(topic, partitions=1, replication=3)
    stub = RedpandaAdminStub(0, cluster, redirect_to_leader=False).start()
    h = Harness(bootstrap, name)
    settings = Settings(
        bootstrap=bootstrap,
        backend="redpanda",
        actuator_id=f"{name}-a1",
        redpanda_admin_urls=(stub.url,),
        metrics_port=0,
    ).validated()
    backend = make_backend(settings)
    timeout_s = float(getattr(getattr(backend, "admin", None), "timeout_s", 5.0))
    runner = h.start(backend=backend)
    faults: list[tuple[str, float, dict[str, Any]]] = [
        ("http_503", outage_s, {"status": 503}),
        ("slow_answers", window_s, {"delay_s": min(2.0, timeout_s / 2)}),
        ("redirect_loop", window_s, {"redirect_to": stub.url}),
    ]
    if timeout_faults:
        faults.insert(1, ("timeouts", 6 * timeout_s, {"delay_s": timeout_s + 1.0}))
    rows: dict[str, Any] = {}
    applied_total = 0
    all_outcomes: list[dict[str, Any]] = []
    try:
        for fault, for_s, how in faults:
            stub.requests.clear()
            scripts = [stub.script(m, None, times=0, for_s=for_s, **how) for m in ("GET", "POST")]
            clears_at = time.monotonic() + for_s
            leader = cluster.partitions[("kafka", topic, 0)]["leader_id"]
            target = (leader + 1) % 3
            sent_ms = int(time.time() * 1000)
            during = _transfer(topic, target, now_ms=sent_ms)
            h.send(during)
            out_during = _outcomes_for(h, {during["id"]}, 240.0)
            requests_during = len(stub.requests)
            time.sleep(max(0.0, clears_at - time.monotonic()))
            cleared_ms = int(time.time() * 1000)
            leader = cluster.partitions[("kafka", topic, 0)]["leader_id"]
            after = _transfer(topic, (leader + 1) % 3, now_ms=cleared_ms)
            h.send(after)
            # Both ids: outcomes are keyed by action id, so the two sit on different
            # partitions and a read that stops at the second need not have reached the first.
            out_after = _outcomes_for(h, {during["id"], after["id"]}, 60.0)
            mine = [o for o in out_after if o["action_id"] in (during["id"], after["id"])]
            # The actuator's own clock on the outcome ("at"): when it finished, not when this
            # reader happened to see it.
            took_s = max((o["at"] - sent_ms for o in mine if o["action_id"] == during["id"]),
                          default=-1) / 1000  # fmt: skip
            recover_s = max((o["at"] - cleared_ms for o in mine
                             if o["action_id"] == after["id"] and o["result"] == "applied"),
                            default=-1) / 1000  # fmt: skip
            all_outcomes += mine
            res_during = [o for o in mine if o["action_id"] == during["id"]]
            res_after = [o["result"] for o in mine if o["action_id"] == after["id"]]
            applied_total += sum(1 for o in mine if o["result"] == "applied")
            rows[fault] = {
                "fault_s": for_s,
                "action_during": [o["result"] for o in res_during],
                "reason": (res_during[0].get("error") or {}).get("message", "")[:200]
                if res_during
                else None,
                "http_requests_for_one_action": requests_during,
                "scripted_answers": sum(s.hits for s in scripts),
                "action_took_s": round(took_s, 2),
                "action_after_clear": res_after,
                "recover_s": round(recover_s, 2) if recover_s >= 0 else None,
            }
            del out_during
    finally:
        h.stop(runner)
        backend.close()
        stub.stop()
    applied_ids = Counter(o["action_id"] for o in all_outcomes if o["result"] == "applied")
    per_id = Counter(o["action_id"] for o in all_outcomes)
    return {
        "faults": rows,
        "admin_timeout_s": timeout_s,
        "leader_changes": cluster.leader_changes,
        "applied_outcomes": applied_total,
        "duplicate_side_effects": max(0, cluster.leader_changes - applied_total),
        "duplicate_actions": sum(1 for n in applied_ids.values() if n > 1),
        "outcomes_per_action_max": max(per_id.values(), default=0),
        "violations": list(stub.violations),
    }


def _transfer(topic: str, target: int, *, now_ms: int) -> dict[str, Any]:
    params = {"topic": topic, "partition": 0, "target_broker": target}
    return action("transfer_leadership", f"{topic}/0", params, key=KEY, now_ms=now_ms,
                  ttl_ms=600_000)  # fmt: skip
