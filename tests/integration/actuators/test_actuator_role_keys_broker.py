"""On the real broker: an actuator holding public keys applies the decide stage's action and
rejects, with an outcome, what a worker host's keys produce."""

from __future__ import annotations

import time

from actuators.backends import DryRunBackend
from bench.support import actuator_harness as T
from bench.support.actuator_harness import Harness
from schemas import validate
from schemas.keys import DECIDE, WORKER, Keyring, SigningKey


def test_worker_signed_actions_are_rejected_and_the_decide_stages_applied(
    harness: Harness,
) -> None:
    decide, worker = SigningKey.generate(DECIDE), SigningKey.generate(WORKER)
    backend = DryRunBackend()
    harness.start(backend, verifier=Keyring.of([decide.public(), worker.public()]))
    now = int(time.time() * 1000)
    own = T.throttle("ok-1", 1, key=worker, now_ms=now)
    borrowed = T.throttle("ok-2", 1, key=worker, now_ms=now)
    borrowed["key_id"] = decide.key_id
    fine = T.throttle("ok-3", 5000, key=decide, now_ms=now)
    harness.send(own, borrowed, fine, key=b"one-partition")
    outcomes = harness.read_outcomes(until=3)
    for o in outcomes:
        validate(o)
    got = {o["action_id"]: (o["result"], o.get("reason", "").split(":")[0]) for o in outcomes}
    assert got == {
        own["id"]: ("rejected", "role_forbidden"),
        borrowed["id"]: ("rejected", "bad_signature"),
        fine["id"]: ("applied", "dry-run"),
    }
    assert backend.calls == [("throttle", "client-id", "ok-3", 5000)]
