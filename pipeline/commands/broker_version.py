"""Which Kafka the broker runs, from one ApiVersions request (what ``lagpilot doctor`` shows).

The Kafka protocol has no "version string" request; librdkafka keeps its ApiVersions answer
to itself, and confluent-kafka has no DescribeFeatures. Kafka's own Admin client answers
``describeFeatures`` from ApiVersions (v3+), whose tagged fields carry the features the
broker supports and the cluster's finalized ones. ``metadata.version`` is the one that
names a release: a KRaft broker supports levels up to its release's latest production
level (Apache Kafka 4.4.x: 33, ``4.4-IV2``; 4.1.x: 27, ``4.1-IV1``), and the cluster runs
at its finalized level.

Two halves: :func:`encode_request` / :func:`decode_response` / :func:`describe` are pure
(byte-literal tests in tests/unit/pipeline/commands/test_broker_version.py), :func:`fetch`
is the one socket. ApiVersions is served before authentication (clients send it before
SaslHandshake), so a SASL listener answers it without credentials; a TLS listener gets the
handshake configured by ``ssl.ca.location`` / ``ssl.certificate.location`` /
``ssl.key.location`` and ``enable.ssl.certificate.verification``.

A broker without ``metadata.version`` (ZooKeeper-era Kafka; Redpanda, whose version the
doctor reads from its Admin API) is described by its API count only.
"""

from __future__ import annotations

import socket
import ssl
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

from pipeline.coordinator.wire import Malformed, Reader
from runtime.env import FALSE
from schemas.errors import LagpilotError

API_VERSIONS = 18
REQUEST_VERSION = 3  # the first flexible version: the one that carries features
UNSUPPORTED_VERSION = 35
CLIENT_SOFTWARE = "lagpilot-doctor"

#: metadata.version levels -> (release, IV name), as Kafka's MetadataVersion enum numbers
#: them. Levels 7 (3.3-IV3) to 33 (4.4-IV2, 4.4.0's latest production level) are read from
#: kafka-server-common 4.4.0, and 4.1.1's enum agrees up to its own 27 (4.1-IV1); both
#: start at 7, so 1-6 name the 3.x releases that wrote them. The table stops at the newest
#: tested release's last production level: a level not yet in production (4.4.0 lists 34
#: as 4.5-IV0) may be renumbered before its release ships, so naming it would guess.
_LEVELS: dict[int, tuple[str, str]] = {
    1: ("3.0", "IV1"), 2: ("3.1", "IV0"), 3: ("3.2", "IV0"), 4: ("3.3", "IV0"),
    5: ("3.3", "IV1"), 6: ("3.3", "IV2"), 7: ("3.3", "IV3"), 8: ("3.4", "IV0"),
    9: ("3.5", "IV0"), 10: ("3.5", "IV1"), 11: ("3.5", "IV2"), 12: ("3.6", "IV0"),
    13: ("3.6", "IV1"), 14: ("3.6", "IV2"), 15: ("3.7", "IV0"), 16: ("3.7", "IV1"),
    17: ("3.7", "IV2"), 18: ("3.7", "IV3"), 19: ("3.7", "IV4"), 20: ("3.8", "IV0"),
    21: ("3.9", "IV0"), 22: ("4.0", "IV0"), 23: ("4.0", "IV1"), 24: ("4.0", "IV2"),
    25: ("4.0", "IV3"), 26: ("4.1", "IV0"), 27: ("4.1", "IV1"), 28: ("4.2", "IV0"),
    29: ("4.2", "IV1"), 30: ("4.3", "IV0"), 31: ("4.4", "IV0"), 32: ("4.4", "IV1"),
    33: ("4.4", "IV2"),
}  # fmt: skip
NEWEST = max(_LEVELS)  # a broker that supports more runs a release newer than the table's


class DecodeError(LagpilotError, ValueError):
    """The answer is not an ApiVersions response lagpilot can read (names the field)."""

    code = "malformed"


@dataclass(frozen=True)
class ApiVersions:
    error_code: int
    api_keys: dict[int, tuple[int, int]]  # api key -> (min, max)
    supported: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (min, max)
    finalized: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (min, max)


def encode_request(correlation_id: int, client_id: str = "lagpilot") -> bytes:
    """ApiVersions v3 with request header v2, size-prefixed, ready for the socket."""
    cid = client_id.encode()
    header = struct.pack(">hhih", API_VERSIONS, REQUEST_VERSION, correlation_id, len(cid))
    header += cid + b"\x00"  # no tagged fields
    body = _compact_string(CLIENT_SOFTWARE) + _compact_string("1") + b"\x00"
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def _compact_string(text: str) -> bytes:
    raw = text.encode()
    return _uvarint(len(raw) + 1) + raw


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def decode_response(body: bytes, version: int = REQUEST_VERSION) -> ApiVersions:
    """The response body after the 4-byte correlation id (ApiVersions' response header is
    always v0). A broker that does not speak ``version`` answers UNSUPPORTED_VERSION in the
    v0 layout: decode that with ``version=0``. Read with the decoder's own wire reader
    (``pipeline.coordinator.wire``); what it cannot read is a ``DecodeError`` naming the field."""
    try:
        return _decode(body, version)
    except Malformed as exc:
        raise DecodeError(f"{exc}: the answer is truncated or not ApiVersions") from None


def _decode(body: bytes, version: int) -> ApiVersions:
    r = Reader(body)
    error = r.int16("error_code")
    keys: dict[int, tuple[int, int]] = {}
    count = r.uvarint("api_keys length") - 1 if version >= 3 else r.int32("api_keys length")
    for _ in range(max(count, 0)):
        key = r.int16("api_key")
        keys[key] = (r.int16("min_version"), r.int16("max_version"))
        if version >= 3:
            r.skip_tagged_fields("api_key")
    if version < 3:
        return ApiVersions(error, keys)
    r.int32("throttle_time_ms")
    supported: dict[str, tuple[int, int]] = {}
    finalized: dict[str, tuple[int, int]] = {}
    for _ in range(r.uvarint("tag count")):
        tag = r.uvarint("tag")
        data = Reader(r.take(r.uvarint("tag size"), f"tag {tag}"))
        if tag == 0:  # SupportedFeatures: name, min, max
            for _ in range(data.uvarint("supported_features length") - 1):
                name = data.string("supported feature name", compact=True)
                low, high = data.int16("min_version"), data.int16("max_version")
                supported[name] = (low, high)
                data.skip_tagged_fields("supported feature")
        elif tag == 2:  # FinalizedFeatures: name, max level, min level
            for _ in range(data.uvarint("finalized_features length") - 1):
                name = data.string("finalized feature name", compact=True)
                high, low = data.int16("max_version_level"), data.int16("min_version_level")
                finalized[name] = (low, high)
                data.skip_tagged_fields("finalized feature")
    return ApiVersions(error, keys, supported, finalized)


def metadata_version_name(level: int) -> str:
    release, iv = _LEVELS.get(level, ("", ""))
    return f"{release}-{iv}" if release else f"level {level}"


def describe(av: ApiVersions) -> str:
    """What the doctor prints: the release, and the cluster's metadata.version if it lags.

    >>> describe(ApiVersions(0, {}, {"metadata.version": (7, 33)}, {"metadata.version": (33, 33)}))
    'Apache Kafka 4.4 (metadata.version 4.4-IV2)'
    """
    supported = av.supported.get("metadata.version")
    if supported is None:
        return f"Kafka protocol, {len(av.api_keys)} APIs (no metadata.version: not KRaft Kafka)"
    top = supported[1]
    release = _LEVELS.get(top, (None, ""))[0]
    newest = _LEVELS[NEWEST][0]
    name = (
        f"Apache Kafka {release}" if release else f"Apache Kafka newer than {newest} (level {top})"
    )
    finalized = av.finalized.get("metadata.version")
    if finalized is None:
        return f"{name} (metadata.version not finalized)"
    running = metadata_version_name(finalized[1])
    if finalized[1] < top:
        return f"{name} (cluster still at metadata.version {running}: finish the upgrade)"
    return f"{name} (metadata.version {running})"


# --------------------------------------------------------------------------- the socket


def fetch(
    bootstrap: str, kafka: Mapping[str, str], timeout_s: float
) -> ApiVersions:  # pragma: no cover - exercised on the real broker
    """Ask the first bootstrap address. Raises ``OSError`` / ``DecodeError`` on failure."""
    host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
    protocol = kafka.get("security.protocol", "plaintext").lower()
    with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s) as raw:
        conn: socket.socket = raw
        if protocol in ("ssl", "sasl_ssl"):
            conn = _tls(kafka).wrap_socket(raw, server_hostname=host)
        version = REQUEST_VERSION
        for _ in range(2):
            conn.sendall(_request(version))
            body = _read_frame(conn)
            av = decode_response(body[4:], version)
            if av.error_code != UNSUPPORTED_VERSION or version == 0:
                return av
            version = 0  # an old broker: it still lists its APIs in v0
        return av


def _request(version: int) -> bytes:
    if version == REQUEST_VERSION:
        return encode_request(1)
    payload = struct.pack(">hhih", API_VERSIONS, 0, 1, 8) + b"lagpilot"
    return struct.pack(">i", len(payload)) + payload


def _read_frame(conn: socket.socket) -> bytes:
    size = struct.unpack(">i", _read_exact(conn, 4))[0]
    if not 4 <= size <= 1 << 20:
        raise DecodeError(f"response size {size}: not a Kafka ApiVersions answer")
    return _read_exact(conn, size)


def _read_exact(conn: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = conn.recv(n - len(out))
        if not chunk:
            raise DecodeError("the broker closed the connection mid-answer")
        out += chunk
    return bytes(out)


def _tls(kafka: Mapping[str, str]) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=kafka.get("ssl.ca.location") or None)
    verify = kafka.get("enable.ssl.certificate.verification", "true").strip().lower()
    if verify in FALSE:  # read as every lagpilot process reads booleans (anything else: on)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if kafka.get("ssl.certificate.location"):
        ctx.load_cert_chain(
            kafka["ssl.certificate.location"],
            kafka.get("ssl.key.location") or None,
            kafka.get("ssl.key.password") or None,
        )
    return ctx
