"""Fault row 8b: the actuator cut from the broker for 20 s while actions are due.

``lagpilot actuate`` (Kafka backend: its quotas go to the same broker) bootstraps through a
proxy (``bench/support/netproxy.py``) on a broker of the benchmark's own that advertises
the proxy's port to it (``ACTUATOR`` listener); the benchmark sends control events and reads
outcomes and quotas on the broker's own listener, which is never cut. Every byte of the
actuator's is held for ``CUT_S`` (its consumer, its transactional producer, its quota
client), then let through. The events, all leased throttles:

- ``ends-in-cut``: applied before the cut, its lease ends during it: released after the
  heal (the release cannot reach the broker before), no later than ``RELEASE_LATE_S``
  after it;
- ``ends-after``: applied before the cut, its lease ends after the heal: released on time;
- ``due``: sent during the cut (twice, the same event), long-lived: applied once after
  the heal (recovery: from the heal to its ``applied`` outcome), then released at its lease;
- ``expires``: sent during the cut, its ``expires_at`` passes before the heal: never applied.

Counted: ids applied twice (duplicate actions), outcomes ``applied`` after the action's
``expires_at``, quotas left on the broker at the end (stuck throttles), and each release's
lateness past ``max(lease end, heal)``.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from actuators.quotas import QuotaClient
from bench.support.actuator_harness import throttle
from bench.support.broker import own_broker
from bench.support.control_loop import DEMO_KEY, read_topic
from bench.support.fault_load import start_actuator
from bench.support.netproxy import Proxy
from bench.support.swarm import ensure_topic
from schemas import encode

PORT = 27392  # the broker: 27392 (clients), 27393 (controller)
ACTUATOR = (27394, 27396)  # its ACTUATOR listener, and the proxy in front of it
EXTRA_LISTENERS = f"ACTUATOR:{ACTUATOR[0]}:{ACTUATOR[1]}"
CUT_S = 20.0
#: a lease that ended while the actuator was cut is released at most this long after the
#: heal; one that ends later, at most this long after its end
RELEASE_LATE_S = 10.0
RATE = 1_000_000


def _send(bootstrap: str, topic: str, *events: dict[str, Any]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for e in events:
        p.produce(topic, key=str(e["target"]).encode(), value=encode(e))
    if p.flush(20):
        raise RuntimeError(f"could not send {len(events)} event(s) to {topic}")


def _outcomes(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    return [o for o in read_topic(bootstrap, topic) if o.get("event") == "outcome"]


def _wait(bootstrap: str, topic: str, want: dict[str, str], timeout_s: float) -> list[Any]:
    """Outcomes until each id in ``want`` has an outcome of its result (or time is up)."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = _outcomes(bootstrap, topic)
        seen = {(o["action_id"], o["result"]) for o in got}
        if all((i, r) in seen for i, r in want.items()) or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


def cut_actuator(workdir: Path, cut_s: float = CUT_S) -> dict[str, Any]:
    env = {"LAGPILOT_BROKER_EXTRA_LISTENERS": EXTRA_LISTENERS}
    with own_broker(PORT, **env) as broker:
        return _run(broker.bootstrap, workdir, cut_s)


def _run(bootstrap: str, workdir: Path, cut_s: float) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:6]
    control, outcomes = f"lagpilot.control.cut-{run_id}", f"lagpilot.outcomes.cut-{run_id}"
    ensure_topic(bootstrap, control, 1, 1)
    policy = workdir / f"actuator-cut-{run_id}.toml"
    policy.write_text('mode = "act"\n[allow]\nthrottle_client_ids = ["cut-*"]\n')
    log = workdir / f"actuator-cut-{run_id}.log"
    proxy = Proxy(ACTUATOR[1], ACTUATOR[0]).start()
    key = DEMO_KEY.encode()

    def leased(name: str, lease_s: float, ttl_ms: int = 600_000) -> dict[str, Any]:
        now = int(time.time() * 1000)
        return throttle(f"cut-{name}-{run_id}", RATE, key=key, now_ms=now, lease_s=lease_s,
                        ttl_ms=ttl_ms)  # fmt: skip

    actuator = start_actuator(f"127.0.0.1:{ACTUATOR[1]}", control, outcomes, policy, log)
    try:
        warm = leased("warm", 2.0)
        _send(bootstrap, control, warm)
        _wait(bootstrap, outcomes, {warm["id"]: "applied"}, 90)
        in_cut, after = leased("ends-in-cut", 6.0), leased("ends-after", cut_s + 12.0)
        _send(bootstrap, control, in_cut, after)
        _wait(bootstrap, outcomes, {in_cut["id"]: "applied", after["id"]: "applied"}, 60)
        proxy.cut()
        cut_ms = int(time.time() * 1000)
        time.sleep(2.0)
        due, expires = leased("due", 5.0), leased("expires", 5.0, ttl_ms=int(cut_s * 1000 / 2))
        _send(bootstrap, control, due, expires, due)  # ``due`` twice: the same event again
        time.sleep(max(0.0, cut_s - (time.time() * 1000 - cut_ms) / 1000))
        proxy.heal()
        heal_ms = int(time.time() * 1000)
        want = {in_cut["id"]: "released", after["id"]: "released", due["id"]: "released"}
        got = _wait(bootstrap, outcomes, want, 90)
        time.sleep(2.0)  # anything the actuator did about ``expires`` has been committed
        got = _outcomes(bootstrap, outcomes)
        alive = actuator.poll() is None
    finally:
        actuator.terminate()
        try:
            actuator.wait(30)
        except Exception:
            actuator.kill()
        proxy.stop()
    events = {"warm": warm, "ends-in-cut": in_cut, "ends-after": after, "due": due,
              "expires": expires}  # fmt: skip
    quotas = QuotaClient(bootstrap, client_id="lagpilot-faults-check")
    try:
        left = {
            k: quotas.producer_rate("client-id", e["params"]["name"]) for k, e in events.items()
        }
    finally:
        quotas.close()
    by_id: dict[str, list[dict[str, Any]]] = {}
    for o in got:
        by_id.setdefault(o["action_id"], []).append(o)

    def at(e: dict[str, Any], result: str) -> int | None:
        return min((o["at"] for o in by_id.get(e["id"], []) if o["result"] == result), default=None)

    applied = Counter(o["action_id"] for o in got if o["result"] == "applied")
    expiry = {e["id"]: e["expires_at"] for e in events.values()}
    late_applies = [
        o["action_id"]
        for o in got
        if o["result"] == "applied" and o["at"] > expiry.get(o["action_id"], 2**62)
    ]
    releases: dict[str, float | None] = {}
    for name in ("ends-in-cut", "ends-after", "due"):
        e, applied_at, released_at = events[name], at(events[name], "applied"), None
        released_at = at(e, "released")
        if applied_at is None or released_at is None:
            releases[name] = None
            continue
        lease_end = applied_at + int(e["params"]["lease_s"] * 1000)
        releases[name] = round((released_at - max(lease_end, heal_ms)) / 1000, 2)
    due_at = at(due, "applied")
    warnings = [ln[:300] for ln in log.read_text(errors="replace").splitlines() if "WARNING" in ln]
    return {
        "cut_s": round((heal_ms - cut_ms) / 1000, 2),
        "recover_s": None if due_at is None else round((due_at - heal_ms) / 1000, 2),
        "release_late_s": releases,
        "release_late_target_s": RELEASE_LATE_S,
        "results": {k: [o["result"] for o in by_id.get(e["id"], [])] for k, e in events.items()},
        "duplicate_actions": sum(1 for n in applied.values() if n > 1),
        "applied_after_expiry": len(late_applies),
        "expired_applied": applied.get(expires["id"], 0),
        "quotas_left": left,
        "stuck_throttles": sum(1 for v in left.values() if v is not None),
        "actuator_alive": alive,
        "proxied": {"connections": proxy.connections, "bytes": proxy.bytes_forwarded},
        "actuator_warnings": warnings[-12:],
    }
