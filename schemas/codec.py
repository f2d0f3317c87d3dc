"""Encode, sign, verify and validate lagpilot events.

Every event that crosses a lagpilot topic is a JSON object with two envelope fields:
``event`` (its kind, e.g. ``"action"``) and ``v`` (its schema version). Its JSON Schema is
``schemas/<event>.v<v>.json``. Payloads are encoded with orjson; signatures are made over
the canonical JSON (sorted keys, no whitespace) of the event without its ``signature``
field: Ed25519 with a role key (``schemas/keys.py``, the event names its ``key_id``), or
HMAC-SHA256 with the shared key (no ``key_id``; kept for the migration to role keys).

Signing and verifying go through one interface: anything with ``sign_event`` signs
(``EventSigner``: ``SharedKey`` here, a role's ``SigningKey`` in ``schemas/keys.py``) and
anything with ``verify_event`` verifies (``EventVerifier``: ``SharedKey``, a ``Keyring``).
The key module imports this one, never the reverse.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import hmac
import os
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import orjson

from schemas.errors import ConfigError, LagpilotError

SIGNATURE_FIELD = "signature"
SIGNING_KEY_ENV = "LAGPILOT_SIGNING_KEY"
SIGNING_KEY_FILE_ENV = "LAGPILOT_SIGNING_KEY_FILE"


class EventError(LagpilotError, ValueError):
    """An event is malformed, fails its schema, or is not signed correctly.

    Never retriable: the same bytes fail the same way. ``reason`` is a short machine
    word for outcomes and metrics (``malformed``, ``schema``, ``unsigned``, ``bad_signature``).
    """

    retriable = False

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message, code=reason)
        self.reason = reason


def to_dict(event: Any) -> dict[str, Any]:
    """A dataclass event (or a mapping) as a plain JSON-ready dict."""
    if dataclasses.is_dataclass(event) and not isinstance(event, type):
        return orjson.loads(orjson.dumps(event))
    return dict(event)


def encode(event: Any) -> bytes:
    """orjson bytes of a dataclass event or a mapping (enums as their values)."""
    return orjson.dumps(event, option=orjson.OPT_SERIALIZE_NUMPY)


def decode(payload: bytes | str) -> dict[str, Any]:
    try:
        value = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise EventError("malformed", f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise EventError("malformed", f"an event is a JSON object, got {type(value).__name__}")
    return value


def canonical(event: Mapping[str, Any]) -> bytes:
    """The bytes that are signed: sorted keys, no whitespace, without ``signature``."""
    body = {k: v for k, v in event.items() if k != SIGNATURE_FIELD}
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY)


#: the role of an event signed with the shared HMAC key (it names no key id)
SHARED_ROLE = "shared"


class EventSigner(Protocol):
    def sign_event(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of ``event`` with its signature (and the fields the signature covers)."""
        ...


class EventVerifier(Protocol):
    def verify_event(self, event: Mapping[str, Any]) -> str:
        """The signer's role; raises ``EventError`` unless ``event`` may be obeyed."""
        ...


class SharedKey:
    """The shared HMAC-SHA256 key: ``signature`` = hex HMAC of the canonical JSON. Whoever
    holds it can both check and make signatures (why role keys replace it)."""

    def __init__(self, key: bytes) -> None:
        self._key = bytes(key)

    def digest(self, event: Mapping[str, Any]) -> str:
        return hmac.new(self._key, canonical(event), hashlib.sha256).hexdigest()

    def matches(self, event: Mapping[str, Any], signature: str) -> bool:
        return hmac.compare_digest(signature, self.digest(event))

    def sign_event(self, event: Mapping[str, Any]) -> dict[str, Any]:
        if not self._key:
            raise ConfigError(f"empty signing key: set {SIGNING_KEY_ENV} or {SIGNING_KEY_FILE_ENV}")
        signed = {k: v for k, v in event.items() if k != SIGNATURE_FIELD}
        signed[SIGNATURE_FIELD] = self.digest(signed)
        return signed

    def verify_event(self, event: Mapping[str, Any]) -> str:
        got = event.get(SIGNATURE_FIELD)
        if not got or not isinstance(got, str):
            raise EventError("unsigned", "event has no signature")
        if not self.matches(event, got):
            raise EventError(
                "bad_signature", "signature does not match (forged, altered, or another key)"
            )
        return SHARED_ROLE


#: what a signing process holds: a signer, or the shared HMAC key's bytes (migration)
Signer = bytes | EventSigner
#: what a verifying process holds: a verifier (a ``Keyring``), or the shared key's bytes
Verifier = bytes | EventVerifier


def sign(event: Mapping[str, Any], key: Signer) -> dict[str, Any]:
    """A copy of ``event``, signed: with a role key (``key_id`` + hex Ed25519), or with the
    shared key (``signature`` = hex HMAC-SHA256 of its canonical JSON)."""
    signer = SharedKey(key) if isinstance(key, bytes | bytearray) else key
    return signer.sign_event(event)


def verify(event: Mapping[str, Any], key: Verifier) -> str:
    """The signer's role; raise ``EventError`` unless ``event`` is validly signed by a key
    that ``key`` trusts (a ``Keyring``; bytes: the shared HMAC key, role ``shared``) and
    that key's role may issue it (reasons: unsigned, unknown_key, bad_signature,
    role_forbidden)."""
    verifier = SharedKey(key) if isinstance(key, bytes | bytearray) else key
    return verifier.verify_event(event)


def read_secret(env: Mapping[str, str], var: str, file_var: str, file_is: str) -> bytes:
    """A secret from the file ``file_var`` names (stripped) when it is set, else ``var``'s
    value (``b""`` when neither is set). ``file_is`` says what the file should be, for the
    error when it cannot be read; the secret is never put in an error message."""
    path = env.get(file_var)
    if not path:
        return env.get(var, "").encode()
    try:
        return Path(path).read_bytes().strip()
    except OSError as exc:
        raise ConfigError(
            f"{file_var}={path} cannot be read ({exc.strerror}); point it at a {file_is}"
        ) from None


def load_signing_key(env: Mapping[str, str] | None = None) -> bytes:
    """The HMAC key: ``LAGPILOT_SIGNING_KEY`` (the key itself) or ``LAGPILOT_SIGNING_KEY_FILE``.

    The key is never logged or put in an error message.
    """
    env = os.environ if env is None else env
    key = read_secret(
        env, SIGNING_KEY_ENV, SIGNING_KEY_FILE_ENV, "readable file holding the signing key"
    )
    if len(key) < 16:
        raise ConfigError(
            f"signing key missing or shorter than 16 bytes: set {SIGNING_KEY_ENV} to a random "
            f"secret (e.g. `openssl rand -hex 32`) or {SIGNING_KEY_FILE_ENV} to a file holding one"
        )
    return key


@functools.cache
def schema(event: str, version: int) -> dict[str, Any]:
    """The JSON Schema of one event kind and version, from this package's files."""
    name = f"{event}.v{version}.json"
    try:
        text = resources.files(__package__).joinpath(name).read_bytes()
    except FileNotFoundError:
        raise EventError("schema", f"unknown event kind/version: {event!r} v{version}") from None
    return orjson.loads(text)


@functools.cache
def _validator(event: str, version: int) -> Any:
    import jsonschema

    s = schema(event, version)
    cls = jsonschema.validators.validator_for(s)
    cls.check_schema(s)
    return cls(s, format_checker=cls.FORMAT_CHECKER)


def validate(event: Mapping[str, Any]) -> None:
    """Raise ``EventError('schema', ...)`` naming the first field that fails its schema."""
    kind, version = event.get("event"), event.get("v")
    if not isinstance(kind, str) or not isinstance(version, int):
        raise EventError("schema", "event lacks its envelope: 'event' (str) and 'v' (int)")
    errors = sorted(_validator(kind, version).iter_errors(dict(event)), key=lambda e: list(e.path))
    if errors:
        err = errors[0]
        where = "/".join(str(p) for p in err.path) or "(root)"
        raise EventError("schema", f"{kind} v{version}: {where}: {err.message}")


def stable_id(*parts: object) -> str:
    """A stable 32-hex-digit id from its parts: the same decision always gets the same id."""
    h = hashlib.sha256(orjson.dumps(parts, option=orjson.OPT_SERIALIZE_NUMPY))
    return h.hexdigest()[:32]
