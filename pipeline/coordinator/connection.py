"""One connection to one Kafka broker: TCP (+TLS), ApiVersions, SASL, then requests.

The effectful edge of the raw Kafka-protocol client (framing is
:mod:`pipeline.coordinator.protocol`'s, SASL's tokens :mod:`pipeline.coordinator.sasl`'s).
Settings are librdkafka's names, as ``Settings.broker_config()`` hands them over:
``security.protocol`` (plaintext, ssl, sasl_plaintext, sasl_ssl), ``sasl.mechanism``
(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), ``sasl.username`` / ``sasl.password``, and
``ssl.ca.location`` / ``ssl.certificate.location`` / ``ssl.key.location`` /
``ssl.key.password`` / ``enable.ssl.certificate.verification``. They are checked by
:func:`security_settings` before any socket opens.

One request is in flight at a time (send, then read its answer): a reader polling a few
coordinators needs no pipelining, and a socket error then belongs to exactly one request.
Any socket failure closes the connection and raises :class:`BrokerUnreachable`
(retriable); the owner decides whether to reconnect, so retries live in one layer.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.coordinator import api_versions, sasl
from pipeline.coordinator.api_versions import UNSUPPORTED_VERSION, ApiVersions
from pipeline.coordinator.protocol import (
    API_VERSIONS,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    ProtocolError,
    encode_request,
    error_name,
    read_frame,
    split_response,
)
from runtime.env import FALSE
from schemas.errors import ConfigError, LagpilotError

PROTOCOLS = ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")


class BrokerUnreachable(LagpilotError, ConnectionError):
    """The socket failed (refused, reset, timed out, closed mid-answer): worth a retry."""

    retriable = True
    code = "broker_unreachable"


class TlsUntrusted(LagpilotError):
    """The broker's certificate does not verify: a setting to change, not a retry."""

    code = "tls_untrusted"


@dataclass(frozen=True, slots=True)
class Security:
    tls: bool
    mechanism: str | None  # None: no SASL
    username: str = ""
    password: str = ""


def security_settings(config: Mapping[str, Any]) -> Security:
    """The listener's security from librdkafka's keys; a ConfigError names the key to fix."""
    protocol = str(config.get("security.protocol") or "plaintext").strip().lower()
    if protocol not in PROTOCOLS:
        raise ConfigError(
            f"security.protocol={protocol!r}: set it to one of {', '.join(PROTOCOLS)}"
        )
    tls = protocol in ("ssl", "sasl_ssl")
    if not protocol.startswith("sasl"):
        return Security(tls, None)
    # librdkafka reads sasl.mechanisms as an alias; its default, GSSAPI, is not ours
    mechanism = str(config.get("sasl.mechanism") or config.get("sasl.mechanisms") or "GSSAPI")
    mechanism = mechanism.strip().upper()
    if mechanism not in sasl.MECHANISMS:
        raise ConfigError(
            f"sasl.mechanism={mechanism}: lagpilot's share-group reader logs in with "
            f"{', '.join(sasl.MECHANISMS)} only; set sasl.mechanism to one of them "
            "(and the listener must enable it)"
        )
    username = str(config.get("sasl.username") or "")
    if not username:
        raise ConfigError(f"sasl.mechanism={mechanism} needs sasl.username and sasl.password")
    return Security(tls, mechanism, username, str(config.get("sasl.password") or ""))


def tls_context(config: Mapping[str, Any]) -> ssl.SSLContext:
    """The TLS handshake ``ssl.*`` asks for: a CA file, a client certificate and key, and
    ``enable.ssl.certificate.verification`` read as every lagpilot process reads booleans
    (anything but a false word: on)."""
    ctx = ssl.create_default_context(cafile=config.get("ssl.ca.location") or None)
    verify = str(config.get("enable.ssl.certificate.verification", "true")).strip().lower()
    if verify in FALSE:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if config.get("ssl.certificate.location"):
        ctx.load_cert_chain(
            config["ssl.certificate.location"],
            config.get("ssl.key.location") or None,
            config.get("ssl.key.password") or None,
        )
    return ctx


def open_socket(
    host: str, port: int, config: Mapping[str, Any], timeout_s: float
) -> socket.socket:  # pragma: no cover - exercised on the real broker
    """TCP to ``host:port``, wrapped in TLS when ``security.protocol`` says ssl/sasl_ssl."""
    raw = socket.create_connection((host, port), timeout=timeout_s)
    protocol = str(config.get("security.protocol") or "plaintext").lower()
    if protocol not in ("ssl", "sasl_ssl"):
        return raw
    try:
        return tls_context(config).wrap_socket(raw, server_hostname=host)
    except BaseException:
        raw.close()
        raise


def recv_exact(conn: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = conn.recv(n - len(out))
        if not chunk:
            raise BrokerUnreachable("the broker closed the connection mid-answer")
        out += chunk
    return bytes(out)


class Connection:
    """A broker connection that negotiated its versions and logged in (``open``)."""

    def __init__(
        self,
        host: str,
        port: int,
        config: Mapping[str, Any],
        *,
        timeout_s: float,
        client_id: str = "lagpilot",
    ) -> None:
        self.host, self.port = host, port
        self._config = config
        self._security = security_settings(config)
        self._timeout_s = timeout_s
        self._client_id = client_id
        self._sock: socket.socket | None = None
        self._correlation_id = 0
        self.versions = ApiVersions(0, {})

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def is_open(self) -> bool:
        return self._sock is not None

    def open(self) -> None:  # pragma: no cover - exercised on the real broker
        try:
            self._sock = open_socket(self.host, self.port, self._config, self._timeout_s)
        except ssl.SSLCertVerificationError as exc:  # the same certificate fails every time
            raise TlsUntrusted(
                f"{self.address}: the broker's TLS certificate is not trusted "
                f"({exc.verify_message}): set ssl.ca.location to the CA that signed it, or "
                "enable.ssl.certificate.verification=false on a test cluster only"
            ) from None
        except OSError as exc:
            raise BrokerUnreachable(f"cannot connect to {self.address}: {exc}") from None
        try:
            self.versions = self._negotiate()
            if self._security.mechanism:
                self._login(self._security)
        except BaseException:
            self.close()
            raise

    def version(self, api_key: int, lowest: int, highest: int) -> int | None:
        return api_versions.pick_version(self.versions, api_key, lowest, highest)

    def request(self, api_key: int, version: int, body: bytes) -> bytes:
        """Send one request, return its response body (header removed)."""
        return self.requests(api_key, version, [body])[0]

    def requests(self, api_key: int, version: int, bodies: list[bytes]) -> list[bytes]:
        """Send several requests of one API back to back, then read their answers: a broker
        answers a connection's requests in the order it got them, so this costs one round
        trip plus the broker's work, not one round trip each."""
        first = self._correlation_id + 1
        frames = b""
        for i, body in enumerate(bodies):
            cid = (first + i) & 0x7FFFFFFF
            frames += encode_request(api_key, version, cid, self._client_id, body)
        self._correlation_id = (first + len(bodies) - 1) & 0x7FFFFFFF
        datas = self._roundtrip(frames, len(bodies))
        out = []
        for i, data in enumerate(datas):
            got, body = split_response(api_key, version, data)
            if got != (first + i) & 0x7FFFFFFF:
                self.close()
                raise ProtocolError(
                    f"{self.address} answered correlation id {got}, not {(first + i) & 0x7FFFFFFF}"
                )
            out.append(body)
        return out

    def close(self) -> None:
        if self._sock is not None:
            sock, self._sock = self._sock, None
            with contextlib.suppress(OSError):
                sock.close()

    def _roundtrip(self, payload: bytes, answers: int = 1) -> list[bytes]:  # pragma: no cover
        sock = self._sock
        if sock is None:
            raise BrokerUnreachable(f"not connected to {self.address}")
        try:
            sock.sendall(payload)
            return [read_frame(lambda n: recv_exact(sock, n)) for _ in range(answers)]
        except BrokerUnreachable as exc:
            self.close()
            raise BrokerUnreachable(f"{self.address}: {exc}") from None
        except OSError as exc:
            self.close()
            raise BrokerUnreachable(f"{self.address}: {exc}") from None
        except ProtocolError:
            self.close()
            raise

    def _negotiate(self) -> ApiVersions:  # pragma: no cover - exercised on the real broker
        version = api_versions.REQUEST_VERSION
        while True:
            self._correlation_id += 1
            cid = self._correlation_id
            frame = api_versions.encode(cid, self._client_id, "lagpilot", version)
            _, body = split_response(API_VERSIONS, version, self._roundtrip(frame)[0])
            av = api_versions.decode(body, version)
            if av.error_code == UNSUPPORTED_VERSION and version != 0:
                version = 0  # an old broker: it still lists its APIs in v0
                continue
            if av.error_code:
                raise ProtocolError(f"{self.address}: ApiVersions: {error_name(av.error_code)}")
            return av

    def _login(self, sec: Security) -> None:  # pragma: no cover - exercised on the real broker
        mechanism = sec.mechanism or ""
        if self.version(SASL_HANDSHAKE, 1, 1) is None:
            raise sasl.SaslError(f"{self.address} has no SaslHandshake v1 (Kafka < 1.0?)")
        answer = sasl.decode_handshake(
            self.request(SASL_HANDSHAKE, 1, sasl.encode_handshake(mechanism))
        )
        if answer.error_code:
            raise sasl.SaslError(
                f"{self.address} does not enable sasl.mechanism={mechanism} "
                f"({error_name(answer.error_code)}); it enables "
                f"{', '.join(answer.mechanisms) or 'none'}: set sasl.mechanism to one of them"
            )
        version = self.version(SASL_AUTHENTICATE, 0, 2)
        if version is None:
            raise sasl.SaslError(f"{self.address} has no SaslAuthenticate")
        if mechanism == "PLAIN":
            self._authenticate(version, sasl.plain_token(sec.username, sec.password))
            return
        scram = sasl.ScramClient(mechanism, sec.username, sec.password)
        server_first = self._authenticate(version, scram.first())
        scram.verify(self._authenticate(version, scram.final(server_first)))

    def _authenticate(self, version: int, token: bytes) -> bytes:  # pragma: no cover
        body = self.request(SASL_AUTHENTICATE, version, sasl.encode_authenticate(token, version))
        answer = sasl.decode_authenticate(body, version)
        if answer.error_code:
            raise sasl.SaslError(
                f"{self.address} refused the login as sasl.username="
                f"{self._security.username!r} ({error_name(answer.error_code)}: "
                f"{answer.error_message or 'no message'}): check sasl.username, "
                "sasl.password and sasl.mechanism"
            )
        return answer.auth_bytes
