"""A worker host cannot produce an action that the actuator applies or another worker obeys:
it holds public keys only (it cannot sign as the decide stage or the operator), its own role
key issues no action, and the shared key stops working once the migration removes it."""

from __future__ import annotations

from typing import Any

import orjson

from actuators.checks import check
from actuators.ledger import Ledger
from actuators.settings import AllowList, Policy
from actuators.workers.control import Command, read_command
from bench.support import actuator_harness as T
from schemas import Mode, validate
from schemas.keys import DECIDE, OPERATOR, WORKER, Keyring, SigningKey

NOW = 1_800_000_000_000
ACT = Policy(Mode.ACT, AllowList(partition_topics=("orders*",), throttle_client_ids=("agent-*",)))
SHARED = b"shared-hmac-key-0123456789abcdef"
decide, operator, worker = (SigningKey.generate(r) for r in (DECIDE, OPERATOR, WORKER))
# what the actuator and every worker hold after the migration: public keys, no shared key
RING = Keyring.of([decide.public(), operator.public(), worker.public()])


def actuator_verdict(event: dict[str, Any]) -> tuple[str, str]:
    verdict = check(orjson.dumps(event), position="c/0@1", signing_key=RING, policy=ACT,
                    ledger=Ledger(), actuator="a1", now_ms=NOW)  # fmt: skip
    if verdict.outcome is None:
        return "to_apply", ""
    validate(verdict.outcome)
    return verdict.outcome["result"], verdict.outcome.get("reason", "").split(":")[0]


def worker_attempts() -> list[dict[str, Any]]:
    """Everything a compromised worker host can sign with what it holds."""
    own = T.throttle("agent-1", 1, key=worker, now_ms=NOW)
    borrowed = T.throttle("agent-1", 1, key=worker, now_ms=NOW)
    borrowed["key_id"] = decide.key_id  # claims to be the decide stage
    legacy = T.throttle("agent-1", 1, key=SHARED, now_ms=NOW)  # the old shared key
    return [own, borrowed, legacy]


def test_the_actuator_applies_the_decide_stage_and_rejects_every_worker_attempt() -> None:
    assert actuator_verdict(T.throttle("agent-1", 100_000, key=decide, now_ms=NOW)) == (
        "to_apply", "")  # fmt: skip
    verdicts = [actuator_verdict(e) for e in worker_attempts()]
    assert verdicts == [("rejected", "role_forbidden"), ("rejected", "bad_signature"),
                        ("rejected", "unknown_key")]  # fmt: skip


def test_a_worker_key_cannot_halt_or_spread_other_workers() -> None:
    spread = T.action("spread_partition", "topic:orders/0",
                      {"group": "g", "topic": "orders", "partition": 0, "lanes": 8},
                      key=worker, now_ms=NOW)  # fmt: skip
    halt = T.halt(key=worker, now_ms=NOW)
    for event in (spread, halt):
        assert read_command(orjson.dumps(event), group="g", key=RING, now_ms=NOW) == (
            "role_forbidden")  # fmt: skip
    ok = T.halt(key=operator, now_ms=NOW)
    assert isinstance(read_command(orjson.dumps(ok), group="g", key=RING, now_ms=NOW), Command)
    assert read_command(orjson.dumps(T.halt(key=decide, now_ms=NOW)), group="g", key=RING,
                        now_ms=NOW) == "role_forbidden"  # fmt: skip
