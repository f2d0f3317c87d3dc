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
is the one socket. The ApiVersions codec is :mod:`pipeline.coordinator.api_versions`; the
framing and the TLS socket are the raw client's (:mod:`pipeline.coordinator.protocol`,
:mod:`pipeline.coordinator.connection`), shared with the share-group reader. ApiVersions
is served before authentication (clients send it before SaslHandshake), so a SASL listener
answers it without credentials; a TLS listener gets the handshake configured by
``ssl.ca.location`` / ``ssl.certificate.location`` / ``ssl.key.location`` and
``enable.ssl.certificate.verification``.

A broker without ``metadata.version`` (ZooKeeper-era Kafka; Redpanda, whose version the
doctor reads from its Admin API) is described by its API count only.
"""

from __future__ import annotations

from collections.abc import Mapping

from pipeline.coordinator import api_versions
from pipeline.coordinator.api_versions import (
    REQUEST_VERSION,
    UNSUPPORTED_VERSION,
    ApiVersions,
    DecodeError,
)
from pipeline.coordinator.connection import open_socket, recv_exact
from pipeline.coordinator.protocol import ProtocolError, read_frame

__all__ = ["ApiVersions", "DecodeError", "decode_response", "describe", "encode_request", "fetch"]

CLIENT_SOFTWARE = "lagpilot-doctor"
MAX_ANSWER_BYTES = 1 << 20  # an ApiVersions answer is a few kB: more is not one

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


def encode_request(correlation_id: int, client_id: str = "lagpilot") -> bytes:
    """ApiVersions v3 with request header v2, size-prefixed, ready for the socket."""
    return api_versions.encode(correlation_id, client_id, CLIENT_SOFTWARE)


def decode_response(body: bytes, version: int = REQUEST_VERSION) -> ApiVersions:
    """The response body after the 4-byte correlation id (ApiVersions' response header is
    always v0). A broker that does not speak ``version`` answers UNSUPPORTED_VERSION in the
    v0 layout: decode that with ``version=0``. What it cannot read is a ``DecodeError``
    naming the field."""
    return api_versions.decode(body, version)


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
    with open_socket(host or "127.0.0.1", int(port), kafka, timeout_s) as conn:
        version = REQUEST_VERSION
        for _ in range(2):
            conn.sendall(api_versions.encode(1, "lagpilot", CLIENT_SOFTWARE, version))
            try:
                body = read_frame(lambda n: recv_exact(conn, n), MAX_ANSWER_BYTES)
            except ProtocolError as exc:
                raise DecodeError(str(exc)) from None
            av = decode_response(body[4:], version)
            if av.error_code != UNSUPPORTED_VERSION or version == 0:
                return av
            version = 0  # an old broker: it still lists its APIs in v0
        return av
