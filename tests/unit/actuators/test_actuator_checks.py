"""The actuator's gates, in order, as pure functions: every verdict's outcome is schema-valid."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from actuators.checks import MAX_EVENT_BYTES, Verdict, check, lease_expiry_ms
from actuators.ledger import Ledger
from actuators.settings import AllowList, Policy
from bench.support import actuator_harness as T
from schemas import Mode, sign, validate

KEY = b"unit-test-signing-key-0123456789"
NOW = 1_800_000_000_000
POS = "lagpilot.control/2@41"
ACT = Policy(Mode.ACT, AllowList(partition_topics=("orders*",), throttle_client_ids=("agent-*",)))


def run(raw: bytes | dict[str, Any] | None, policy: Policy = ACT, ledger: Ledger | None = None,
        now_ms: int = NOW) -> Verdict:  # fmt: skip
    value = orjson.dumps(raw) if isinstance(raw, dict) else raw
    verdict = check(value, position=POS, signing_key=KEY, policy=policy,
                    ledger=ledger or Ledger(), actuator="a1", now_ms=now_ms)  # fmt: skip
    if verdict.outcome is not None:
        validate(verdict.outcome)
    return verdict


def good(**kw: Any) -> dict[str, Any]:
    return T.throttle("agent-1", 100_000, key=KEY, now_ms=NOW - 10, **kw)


def test_a_valid_allow_listed_action_is_to_be_applied_keyed_by_its_id() -> None:
    action = good()
    verdict = run(action)
    assert verdict.outcome is None and verdict.action == action and verdict.key == action["id"]


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (None, "malformed"),
        (b"\x00garbage", "malformed"),
        (b"[1, 2]", "malformed"),
        (b'{"event": "action", "v": 1}', "schema"),
        (b'{"event": "outcome", "v": 1, "action_id": "x", "result": "applied", "actuator": "a",'
         b' "at": 1}', "schema"),
    ],
)  # fmt: skip
def test_undecodable_or_schema_invalid_events_are_rejected_keyed_by_position(
    raw: bytes | None, reason: str
) -> None:
    verdict = run(raw)
    assert verdict.action is None and verdict.outcome is not None
    assert verdict.outcome["result"] == "rejected"
    assert verdict.outcome["reason"].startswith(reason)
    assert verdict.key == f"unverified@{POS}"


def test_an_oversized_event_is_rejected_unread_even_when_signed_and_allow_listed() -> None:
    """Found by the fault benchmark (bench/faults/rows.py, row 7): a valid signed throttle padded
    to 256 KiB was applied. Its outcome must not echo it either."""
    action = sign(good() | {"reason": {"padding": "x" * MAX_EVENT_BYTES}}, KEY)
    raw = orjson.dumps(action)
    assert len(raw) > MAX_EVENT_BYTES
    verdict = run(raw)
    assert verdict.action is None and verdict.outcome is not None
    assert verdict.outcome["result"] == "rejected"
    assert verdict.outcome["reason"].startswith("oversized")
    assert verdict.key == f"unverified@{POS}"
    assert len(orjson.dumps(verdict.outcome)) < 1024
    small = sign(good() | {"reason": {"padding": "x" * 1000}}, KEY)
    assert run(small).action == small


def test_unsigned_and_forged_events_are_rejected_and_never_keyed_by_the_claimed_id() -> None:
    unsigned = good()
    unsigned["signature"] = "0" * 64
    forged = T.throttle("agent-1", 1, key=b"another-key-entirely-0123456789", now_ms=NOW)
    altered = good()
    altered["params"]["producer_byte_rate"] = 1  # signed at 100000: the HMAC no longer matches
    for event in (unsigned, forged, altered):
        verdict = run(event)
        assert verdict.outcome is not None and verdict.outcome["result"] == "rejected"
        assert verdict.outcome["reason"].startswith("bad_signature")
        assert verdict.key == f"unverified@{POS}" and verdict.outcome["action_id"] == event["id"]
    no_sig = {k: v for k, v in good().items() if k != "signature"}
    assert run(no_sig).outcome["reason"].startswith("schema")  # type: ignore[index]


def test_expired_actions_are_not_applied() -> None:
    verdict = run(good(ttl_ms=5), now_ms=NOW + 1000)
    assert verdict.outcome is not None and verdict.outcome["result"] == "expired"
    assert verdict.key == verdict.outcome["action_id"]


def test_an_applied_id_is_a_duplicate_before_any_other_gate_keyed_apart_from_its_id() -> None:
    action = good(ttl_ms=5)
    ledger = Ledger(applied={action["id"]}, kill_switch=(1, True))
    verdict = run(action, ledger=ledger, now_ms=NOW + 1000)  # expired and halted, too
    assert verdict.outcome is not None and verdict.outcome["result"] == "duplicate"
    assert verdict.key != action["id"]  # compaction must keep the applied outcome


@pytest.mark.parametrize("event_mode", ["recommend", "act"])
@pytest.mark.parametrize("file_mode", [Mode.OBSERVE, Mode.RECOMMEND, Mode.ACT])
def test_only_act_in_both_the_event_and_the_policy_file_applies(
    event_mode: str, file_mode: Mode
) -> None:
    verdict = run(good(mode=event_mode), policy=Policy(file_mode, ACT.allow))
    if event_mode == "act" and file_mode is Mode.ACT:
        assert verdict.action is not None
    else:
        assert verdict.outcome is not None and verdict.outcome["result"] == "recorded"


def test_worker_actions_are_delegated_and_hints_recorded() -> None:
    spread = T.action("spread_partition", "group:w", {"group": "w", "topic": "orders",
                      "partition": 3, "lanes": 4}, key=KEY, now_ms=NOW)  # fmt: skip
    scale = T.action("scale_consumers", "group:w", {"group": "w", "replicas": 4,
                     "partitions": 8}, key=KEY, now_ms=NOW)  # fmt: skip
    group_halt = T.halt(key=KEY, now_ms=NOW, scope="workers")
    for event, result in ((spread, "delegated"), (scale, "recorded"), (group_halt, "delegated")):
        verdict = run(event)
        assert verdict.outcome is not None and verdict.outcome["result"] == result
    recommended = run(T.halt(key=KEY, now_ms=NOW, scope="workers", mode="recommend"))
    assert recommended.outcome is not None and recommended.outcome["result"] == "recorded"


def test_kill_switch_is_applied_in_any_mode_and_while_halted() -> None:
    halted = Ledger(kill_switch=(1, True))
    for event in (T.halt(key=KEY, now_ms=NOW, mode="recommend"), T.resume(key=KEY, now_ms=NOW)):
        verdict = run(event, policy=Policy(Mode.RECOMMEND), ledger=halted)
        assert verdict.action == event


def test_while_halted_actions_are_rejected() -> None:
    verdict = run(good(), ledger=Ledger(kill_switch=(1, True)))
    assert verdict.outcome is not None and verdict.outcome["result"] == "rejected"
    assert verdict.outcome["reason"].startswith("halted")


def test_off_allow_list_targets_are_rejected_naming_the_allow_key() -> None:
    cases = [
        (T.throttle("mallory", 1000, key=KEY, now_ms=NOW), "throttle_client_ids"),
        (T.release("mallory", key=KEY, now_ms=NOW), "throttle_client_ids"),
        (T.throttle("a", 1000, key=KEY, now_ms=NOW, entity="client-id-prefix"),
         "throttle_client_ids"),
        (T.action("add_partitions", "topic:payments", {"topic": "payments", "total": 12},
                  key=KEY, now_ms=NOW), "partition_topics"),
    ]  # fmt: skip
    for event, allow_key in cases:
        verdict = run(event)
        assert verdict.outcome is not None and verdict.outcome["result"] == "rejected"
        assert "not allow-listed" in verdict.outcome["reason"]
        assert allow_key in verdict.outcome["reason"]
    grow = T.action("add_partitions", "topic:orders", {"topic": "orders", "total": 12},
                    key=KEY, now_ms=NOW)  # fmt: skip
    assert run(grow).action == grow


def test_lease_expiry_is_now_plus_lease() -> None:
    assert lease_expiry_ms(good(lease_s=2.5), NOW) == NOW + 2500
