"""Role keys: Ed25519 signatures that say who issued an action, and what that role may issue.

Why not the shared HMAC key alone: every host that can check an HMAC can also make one, so a
worker host holding the shared key could sign a throttle or a leadership move. With role
keys only the decide stage (the pipeline's policy) and the operator hold private keys; the
actuator and the workers hold public keys, which can check a signature but never make one.

An event signed with a role key carries ``key_id`` (``<role>-<12 hex of the public key's
SHA-256>``) and ``signature`` (hex Ed25519 over the canonical JSON of every field but
``signature``, ``key_id`` included, so the id cannot be swapped). A verifier trusts a set
of public keys at once (old and new during a rotation) and rejects, each with its own
reason word for outcomes and counters:

- ``unknown_key``: the key id is not among the trusted ones (or no key id and no shared key);
- ``bad_signature``: the signature does not match that key (forged or altered);
- ``role_forbidden``: the key's role may not issue this action type (e.g. a worker's key).

Key files are small JSON documents made by ``lagpilot keys new``. The private file is
written with mode 0600 and never logged.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from schemas.actions import ActionType
from schemas.codec import (
    SHARED_ROLE,
    SIGNATURE_FIELD,
    SIGNING_KEY_ENV,
    SIGNING_KEY_FILE_ENV,
    ConfigError,
    EventError,
    SharedKey,
    canonical,
    load_signing_key,
)

KEY_ID_FIELD = "key_id"
PRIVATE_KEY_FILE_ENV = "LAGPILOT_PRIVATE_KEY_FILE"
TRUSTED_KEYS_ENV = "LAGPILOT_TRUSTED_KEYS"

DECIDE, OPERATOR, WORKER = "decide", "operator", "worker"
#: the role of an event signed with the shared HMAC key (no key id): accepted only while a
#: verifier still holds that key, i.e. during the migration to role keys
SHARED = SHARED_ROLE

_AUTOMATIC = frozenset(ActionType) - {ActionType.HALT, ActionType.RESUME}
#: What each role may issue. The decide stage acts but never halts itself; the operator may
#: issue anything (halt, resume and manual actions); a worker issues no action at all (its
#: key, if it has one, signs nothing the actuator or another worker obeys).
ROLE_ACTIONS: dict[str, frozenset[ActionType]] = {
    DECIDE: _AUTOMATIC,
    OPERATOR: frozenset(ActionType),
    WORKER: frozenset(),
    SHARED: frozenset(ActionType),
}
ROLES = (DECIDE, OPERATOR, WORKER)


def key_id_for(role: str, public_raw: bytes) -> str:
    return f"{role}-{hashlib.sha256(public_raw).hexdigest()[:12]}"


def _check_role(role: str, where: str) -> str:
    if role not in ROLES:
        raise ConfigError(f"{where}: role {role!r} is not one of {', '.join(ROLES)}")
    return role


@dataclass(frozen=True)
class PublicKey:
    """A trusted public key and the role it signs for."""

    key_id: str
    role: str
    key: Ed25519PublicKey = field(repr=False, compare=False)

    @property
    def raw(self) -> bytes:
        return _public_raw(self.key)

    def to_json(self) -> bytes:
        return _key_file("public", self.key_id, self.role, self.raw)


@dataclass(frozen=True)
class SigningKey:
    """A role's private key: ``codec.sign(event, signing_key)`` stamps ``key_id`` and signs."""

    key_id: str
    role: str
    key: Ed25519PrivateKey = field(repr=False, compare=False)

    @classmethod
    def generate(cls, role: str) -> SigningKey:
        _check_role(role, "keys new --role")
        private = Ed25519PrivateKey.generate()
        return cls(key_id_for(role, _public_raw(private.public_key())), role, private)

    def public(self) -> PublicKey:
        return PublicKey(self.key_id, self.role, self.key.public_key())

    def sign_event(self, event: Mapping[str, Any]) -> dict[str, Any]:
        signed = {k: v for k, v in event.items() if k != SIGNATURE_FIELD}
        signed[KEY_ID_FIELD] = self.key_id
        signed[SIGNATURE_FIELD] = self.key.sign(canonical(signed)).hex()
        return signed

    def to_json(self) -> bytes:
        from cryptography.hazmat.primitives import serialization as ser

        raw = self.key.private_bytes(ser.Encoding.Raw, ser.PrivateFormat.Raw, ser.NoEncryption())
        return _key_file("private", self.key_id, self.role, raw)


def _public_raw(key: Ed25519PublicKey) -> bytes:
    from cryptography.hazmat.primitives import serialization as ser

    return key.public_bytes(ser.Encoding.Raw, ser.PublicFormat.Raw)


def _key_file(kind: str, key_id: str, role: str, raw: bytes) -> bytes:
    """A key file's text (``kind``: public or private): what ``_read_doc`` reads back."""
    doc = {"kind": f"lagpilot-{kind}-key", "alg": "ed25519", "key_id": key_id, "role": role,
           f"{kind}_key": base64.b64encode(raw).decode()}  # fmt: skip
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"


@dataclass
class Keyring:
    """The public keys a verifier trusts (several at once during a rotation), and the shared
    HMAC key while a migration from it is under way (``shared_key``; None once it is over)."""

    keys: dict[str, PublicKey] = field(default_factory=dict)
    shared_key: bytes | None = field(default=None, repr=False)

    @classmethod
    def of(cls, keys: Iterable[PublicKey], shared_key: bytes | None = None) -> Keyring:
        return cls({k.key_id: k for k in keys}, shared_key)

    def verify_event(self, event: Mapping[str, Any]) -> str:
        """The signing role of ``event``; raises ``EventError`` if it may not be obeyed."""
        sig = event.get(SIGNATURE_FIELD)
        if not sig or not isinstance(sig, str):
            raise EventError("unsigned", "event has no signature")
        key_id = event.get(KEY_ID_FIELD)
        if key_id is None:
            if self.shared_key is None:
                raise EventError(
                    "unknown_key",
                    "event names no key_id (signed with the shared HMAC key) and this host "
                    "trusts role keys only; sign it with a role key (lagpilot keys new)",
                )
            if not SharedKey(self.shared_key).matches(event, sig):
                raise EventError("bad_signature", "shared-key signature does not match")
            role = SHARED
        else:
            trusted = self.keys.get(str(key_id))
            if trusted is None:
                raise EventError(
                    "unknown_key",
                    f"key id {str(key_id)[:40]!r} is not trusted here; add its .pub file to "
                    f"{TRUSTED_KEYS_ENV} if it is a new key being rolled out",
                )
            try:
                trusted.key.verify(bytes.fromhex(sig), canonical(event))
            except (InvalidSignature, ValueError):
                raise EventError(
                    "bad_signature", f"signature does not match key {trusted.key_id}"
                ) from None
            role = trusted.role
        _check_may_issue(role, event)
        return role


def _check_may_issue(role: str, event: Mapping[str, Any]) -> None:
    if event.get("event") != "action":
        return
    try:
        kind = ActionType(str(event.get("type")))
    except ValueError:
        return  # the schema check names it
    if kind not in ROLE_ACTIONS.get(role, frozenset()):
        raise EventError(
            "role_forbidden",
            f"a {role} key may not issue {kind.value}; "
            + (
                "only an operator key may halt or resume"
                if role == DECIDE
                else "worker keys issue no actions"
            ),
        )


def _read_doc(path: Path, kind: str, env_name: str) -> dict[str, Any]:
    try:
        doc = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise ConfigError(
            f"{env_name}: {path} cannot be read ({exc.strerror}); point it at a file made by "
            "`lagpilot keys new`"
        ) from None
    except orjson.JSONDecodeError:
        raise ConfigError(f"{env_name}: {path} is not a lagpilot key file (not JSON)") from None
    if not isinstance(doc, dict) or doc.get("kind") != kind or doc.get("alg") != "ed25519":
        raise ConfigError(f"{env_name}: {path} is not a {kind} file (made by `lagpilot keys new`)")
    return doc


def read_private_key(path: Path, env_name: str = PRIVATE_KEY_FILE_ENV) -> SigningKey:
    doc = _read_doc(path, "lagpilot-private-key", env_name)
    try:
        private = Ed25519PrivateKey.from_private_bytes(base64.b64decode(doc["private_key"]))
        role = _check_role(str(doc["role"]), f"{env_name}: {path}")
    except (KeyError, ValueError) as exc:
        raise ConfigError(f"{env_name}: {path}: damaged key file ({exc})") from None
    return SigningKey(key_id_for(role, _public_raw(private.public_key())), role, private)


def read_public_key(path: Path, env_name: str = TRUSTED_KEYS_ENV) -> PublicKey:
    doc = _read_doc(path, "lagpilot-public-key", env_name)
    try:
        public = Ed25519PublicKey.from_public_bytes(base64.b64decode(doc["public_key"]))
        role = _check_role(str(doc["role"]), f"{env_name}: {path}")
    except (KeyError, ValueError) as exc:
        raise ConfigError(f"{env_name}: {path}: damaged key file ({exc})") from None
    return PublicKey(key_id_for(role, _public_raw(public)), role, public)


def load_signer(env: Mapping[str, str] | None, role: str) -> bytes | SigningKey:
    """What a ``role`` process signs with: its private key (``LAGPILOT_PRIVATE_KEY_FILE``), or,
    until it has one, the shared HMAC key (the migration's first step; see docs/runbook.md)."""
    env = os.environ if env is None else env
    path = env.get(PRIVATE_KEY_FILE_ENV)
    if not path:
        return load_signing_key(env)
    key = read_private_key(Path(path))
    if key.role != role:
        raise ConfigError(
            f"{PRIVATE_KEY_FILE_ENV}={path} holds a {key.role} key; this process signs as "
            f"{role}: make one with `lagpilot keys new --role {role}`"
        )
    return key


def load_verifier(env: Mapping[str, str] | None = None) -> Keyring:
    """The keys a verifier trusts: every ``.pub`` in ``LAGPILOT_TRUSTED_KEYS`` (files or
    folders, separated by ``:``), plus the shared HMAC key while one is set (migration)."""
    env = os.environ if env is None else env
    keys: list[PublicKey] = []
    for part in filter(None, env.get(TRUSTED_KEYS_ENV, "").split(os.pathsep)):
        path = Path(part)
        files = sorted(path.glob("*.pub")) if path.is_dir() else [path]
        if path.is_dir() and not files:
            raise ConfigError(f"{TRUSTED_KEYS_ENV}: folder {path} holds no .pub file")
        keys += [read_public_key(f) for f in files]
    shared: bytes | None = None
    if env.get(SIGNING_KEY_ENV) or env.get(SIGNING_KEY_FILE_ENV):
        shared = load_signing_key(env)
    if not keys and shared is None:
        raise ConfigError(
            f"no trusted keys: set {TRUSTED_KEYS_ENV} to the folder of .pub files made by "
            f"`lagpilot keys new` (or, during a migration, {SIGNING_KEY_ENV}/"
            f"{SIGNING_KEY_FILE_ENV} to the shared key)"
        )
    return Keyring.of(keys, shared)
