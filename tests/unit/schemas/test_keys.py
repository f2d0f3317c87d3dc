"""Role keys (schemas/keys.py): who signed, whether that role may issue the action, rotation,
the shared key during the migration, and the key files `lagpilot keys new` writes."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from bench.support import actuator_harness as T
from pipeline.commands.keys import main as keys_main
from pipeline.commands.keys import new_pair
from schemas import ConfigError, EventError, sign, validate, verify
from schemas.keys import (
    DECIDE,
    OPERATOR,
    WORKER,
    Keyring,
    SigningKey,
    load_signer,
    load_verifier,
)

NOW = 1_800_000_000_000
SHARED_KEY = b"shared-hmac-key-0123456789abcdef"
decide, operator, worker = (SigningKey.generate(r) for r in (DECIDE, OPERATOR, WORKER))
RING = Keyring.of([decide.public(), operator.public(), worker.public()])


def throttle(key: Any) -> dict[str, Any]:
    return T.throttle("agent-1", 100_000, key=key, now_ms=NOW)


def reason(event: dict[str, Any], ring: Any = RING) -> str:
    with pytest.raises(EventError) as exc:
        verify(event, ring)
    return exc.value.reason


def test_a_decide_signed_action_names_its_key_validates_and_verifies_as_decide() -> None:
    event = throttle(decide)
    validate(event)
    assert event["key_id"] == decide.key_id and event["key_id"].startswith("decide-")
    assert len(event["signature"]) == 128
    assert verify(event, RING) == DECIDE


def test_the_decide_role_may_act_but_not_halt_or_resume() -> None:
    assert reason(T.halt(key=decide, now_ms=NOW)) == "role_forbidden"
    assert reason(T.resume(key=decide, now_ms=NOW)) == "role_forbidden"


def test_the_operator_may_halt_resume_and_issue_manual_actions() -> None:
    for event in (T.halt(key=operator, now_ms=NOW), T.resume(key=operator, now_ms=NOW),
                  throttle(operator)):  # fmt: skip
        validate(event)
        assert verify(event, RING) == OPERATOR


@pytest.mark.parametrize(
    "make",
    [throttle, lambda k: T.halt(key=k, now_ms=NOW), lambda k: T.action(
        "spread_partition", "topic:t/0", {"group": "g", "topic": "t", "partition": 0, "lanes": 4},
        key=k, now_ms=NOW)],
)  # fmt: skip
def test_a_worker_key_issues_no_action_even_when_trusted(make: Any) -> None:
    assert reason(make(worker)) == "role_forbidden"


def test_an_unknown_key_id_is_rejected_as_unknown() -> None:
    stranger = SigningKey.generate(DECIDE)
    assert reason(throttle(stranger)) == "unknown_key"


def test_an_altered_field_or_a_borrowed_key_id_is_a_bad_signature() -> None:
    altered = throttle(decide)
    altered["params"]["producer_byte_rate"] = 1
    assert reason(altered) == "bad_signature"
    # a worker host signs with its own private key but claims the decide key's id
    forged = throttle(worker)
    forged["key_id"] = decide.key_id
    assert reason(forged) == "bad_signature"
    # a decide signature relabelled as the operator's, to get a halt through
    halt = T.halt(key=decide, now_ms=NOW)
    halt["key_id"] = operator.key_id
    assert reason(halt) == "bad_signature"


def test_rotation_trusts_old_and_new_keys_until_the_old_one_is_removed() -> None:
    new = SigningKey.generate(DECIDE)
    during = Keyring.of([decide.public(), new.public()])
    assert verify(throttle(decide), during) == verify(throttle(new), during) == DECIDE
    after = Keyring.of([new.public()])
    assert verify(throttle(new), after) == DECIDE
    assert reason(throttle(decide), after) == "unknown_key"


def test_the_shared_key_is_accepted_only_while_the_verifier_still_holds_it() -> None:
    legacy = throttle(SHARED_KEY)
    assert "key_id" not in legacy and len(legacy["signature"]) == 64
    validate(legacy)
    assert verify(legacy, Keyring.of([decide.public()], shared_key=SHARED_KEY)) == "shared"
    assert verify(legacy, SHARED_KEY) == "shared"  # before the migration: bytes as before
    assert reason(legacy, Keyring.of([decide.public()])) == "unknown_key"
    assert reason(throttle(b"another-shared-key-0123456789"),
                  Keyring.of([], shared_key=SHARED_KEY)) == "bad_signature"  # fmt: skip


def test_keys_new_writes_a_private_file_for_one_process_and_a_public_file_for_all(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert keys_main(["new", "--role", "decide", "--out", str(tmp_path)]) == 0
    [private] = tmp_path.glob("*.key")
    [public] = tmp_path.glob("*.pub")
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert private.stem == public.stem and private.stem in capsys.readouterr().out
    assert b"private_key" not in public.read_bytes()
    signer = load_signer({"LAGPILOT_PRIVATE_KEY_FILE": str(private)}, DECIDE)
    ring = load_verifier({"LAGPILOT_TRUSTED_KEYS": str(tmp_path)})
    assert isinstance(signer, SigningKey) and ring.shared_key is None
    assert verify(throttle(signer), ring) == DECIDE
    assert keys_main(["new", "--role", "root", "--out", str(tmp_path)]) == 64


def test_a_process_refuses_another_roles_private_key(tmp_path: Path) -> None:
    _, private, _ = new_pair(WORKER, tmp_path)
    with pytest.raises(ConfigError, match="keys new --role decide"):
        load_signer({"LAGPILOT_PRIVATE_KEY_FILE": str(private)}, DECIDE)


def test_without_a_private_key_the_signer_is_the_shared_key_and_config_errors_name_the_fix(
    tmp_path: Path,
) -> None:
    assert load_signer({"LAGPILOT_SIGNING_KEY": SHARED_KEY.decode()}, DECIDE) == SHARED_KEY
    with pytest.raises(ConfigError, match="LAGPILOT_TRUSTED_KEYS"):
        load_verifier({})
    with pytest.raises(ConfigError, match=r"no \.pub file"):
        load_verifier({"LAGPILOT_TRUSTED_KEYS": str(tmp_path)})
    (tmp_path / "x.pub").write_text("{}")
    with pytest.raises(ConfigError, match="keys new"):
        load_verifier({"LAGPILOT_TRUSTED_KEYS": str(tmp_path)})
    new_pair(OPERATOR, tmp_path / "k")
    ring = load_verifier(
        {"LAGPILOT_TRUSTED_KEYS": str(tmp_path / "k"), "LAGPILOT_SIGNING_KEY": SHARED_KEY.decode()}
    )
    assert ring.shared_key == SHARED_KEY and len(ring.keys) == 1


def test_sign_replaces_an_old_signature_and_key_id() -> None:
    event = sign(throttle(SHARED_KEY), decide)
    assert verify(event, RING) == DECIDE
