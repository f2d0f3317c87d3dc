"""SASL for the raw Kafka-protocol client: PLAIN and SCRAM-SHA-256/512, pure (no sockets).

Kafka's SASL exchange, in our words: after ApiVersions, the client sends SaslHandshake (key
17, v1, never flexible) naming its mechanism; the broker answers an error code and the
mechanisms it has enabled (UNSUPPORTED_SASL_MECHANISM when ours is not among them). Then
each SASL token travels in a SaslAuthenticate request (key 36; v0-v1 carry it as int32-length
bytes, v2+ as compact bytes in a flexible body), and the answer carries an error code, an
error message, the broker's token and (v1+) the session lifetime in ms.

PLAIN is one token: ``authzid NUL username NUL password`` (authzid empty). SCRAM (RFC 5802,
with SHA-256/512 per RFC 7677) is two round trips: client-first ``n,,n=USER,r=NONCE``; the
server-first adds its nonce, a salt and an iteration count; client-final proves the password
with ``ClientKey XOR HMAC(StoredKey, AuthMessage)``; the server-final's ``v=`` is checked
against the ServerSignature, so a broker that does not know the password cannot pass as one.
Usernames escape ``=`` and ``,`` as ``=3D`` / ``=2C``; passwords are used as UTF-8 without
SASLprep (Kafka's own client does the same).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

from pipeline.coordinator.protocol import Writer
from pipeline.coordinator.wire import Malformed, Reader
from schemas.errors import LagpilotError

HANDSHAKE_VERSION = 1  # v1: the tokens then travel in SaslAuthenticate requests
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class SaslError(LagpilotError):
    """The login failed: wrong credentials, a mechanism the listener does not enable, or a
    broker that broke the exchange. Never retriable: the same settings fail the same way."""

    code = "sasl"


@dataclass(frozen=True, slots=True)
class HandshakeAnswer:
    error_code: int
    mechanisms: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AuthenticateAnswer:
    error_code: int
    error_message: str | None
    auth_bytes: bytes
    session_lifetime_ms: int  # 0 when the broker sets none (and in v0)


def encode_handshake(mechanism: str) -> bytes:
    return Writer().string(mechanism, compact=False).build()


def decode_handshake(body: bytes) -> HandshakeAnswer:
    r = Reader(body)
    try:
        error = r.int16("error_code")
        return HandshakeAnswer(error, r.string_array("mechanisms", compact=False))
    except Malformed as exc:
        raise SaslError(f"SaslHandshake answer unreadable: {exc}") from None


def encode_authenticate(token: bytes, version: int) -> bytes:
    w = Writer().bytes_field(token, compact=version >= 2)
    return (w.no_tags() if version >= 2 else w).build()


def decode_authenticate(body: bytes, version: int) -> AuthenticateAnswer:
    compact = version >= 2
    r = Reader(body)
    try:
        error = r.int16("error_code")
        message = r.nullable_string("error_message", compact)
        token = r.nullable_bytes("auth_bytes", compact) or b""
        lifetime_ms = r.int64("session_lifetime_ms") if version >= 1 else 0
    except Malformed as exc:
        raise SaslError(f"SaslAuthenticate answer unreadable: {exc}") from None
    return AuthenticateAnswer(error, message, token, lifetime_ms)


def plain_token(username: str, password: str) -> bytes:
    return b"\x00" + username.encode() + b"\x00" + password.encode()


def _escape(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


class ScramClient:
    """One SCRAM exchange: :meth:`first`, then :meth:`final` with the server-first message,
    then :meth:`verify` with the server-final one. ``nonce`` is for tests (RFC vectors)."""

    def __init__(
        self, mechanism: str, username: str, password: str, nonce: str | None = None
    ) -> None:
        if mechanism not in _HASHES:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self._hash = _HASHES[mechanism]
        self._password = password.encode()
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._first_bare = f"n={_escape(username)},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return ("n,," + self._first_bare).encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        attrs = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        nonce, salt, iterations = attrs.get("r", ""), attrs.get("s"), attrs.get("i")
        if "e" in attrs:
            raise SaslError(f"SCRAM: the broker refused the login ({attrs['e']})")
        if not nonce.startswith(self._nonce) or salt is None or iterations is None:
            raise SaslError(f"SCRAM: the broker's first message is not RFC 5802: {text!r}")
        salted = hashlib.pbkdf2_hmac(
            self._hash, self._password, base64.b64decode(salt), int(iterations)
        )
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        without_proof = f"c=biws,r={nonce}"  # biws: base64 of "n,," (no channel binding)
        auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        signature = self._hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        text = server_final.decode()
        if text.startswith("e="):
            raise SaslError(f"SCRAM: the broker refused the login ({text[2:]})")
        expected = "v=" + base64.b64encode(self._server_signature).decode()
        if not hmac.compare_digest(text.split(",")[0], expected):
            raise SaslError("SCRAM: the broker's signature does not match: not the broker "
                            "that holds this user's credentials")  # fmt: skip

    def _hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self._hash).digest()
