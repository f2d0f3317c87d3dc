"""ApiVersions (key 18): the request every raw client sends first, and its answer, pure.

Facts, in our words: v3 is the first flexible version; its request carries the client
software's name and version (compact strings). The answer starts with an error code and
the api keys with their (min, max) versions; v3 adds the throttle time and tagged fields,
among them tag 0 SupportedFeatures (name, min, max) and tag 2 FinalizedFeatures (name, max
level, min level: that order on the wire). Its header is always v0. A broker that does not
speak the version asked answers UNSUPPORTED_VERSION (35) in the v0 layout, still listing
its APIs. ApiVersions is served before authentication, so a SASL listener answers it.

Moved here from ``pipeline.commands.broker_version`` (which re-exports it) so that the
connection below the stages (:mod:`pipeline.coordinator.connection`) negotiates with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.coordinator.protocol import API_VERSIONS, Writer, encode_request
from pipeline.coordinator.wire import Malformed, Reader
from schemas.errors import LagpilotError

REQUEST_VERSION = 3  # the first flexible version: the one that carries features
UNSUPPORTED_VERSION = 35


class DecodeError(LagpilotError, ValueError):
    """The answer is not an ApiVersions response lagpilot can read (names the field)."""

    code = "malformed"


@dataclass(frozen=True)
class ApiVersions:
    error_code: int
    api_keys: dict[int, tuple[int, int]]  # api key -> (min, max)
    supported: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (min, max)
    finalized: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (min, max)


def encode(
    correlation_id: int, client_id: str, software: str, version: int = REQUEST_VERSION
) -> bytes:
    """ApiVersions ``version`` (3, or 0 for an old broker), size-prefixed. v3 names the
    client software (version "1"); v0 has an empty body."""
    body = b""
    if version >= 3:
        w = Writer().string(software, compact=True).string("1", compact=True)
        body = w.no_tags().build()
    return encode_request(API_VERSIONS, version, correlation_id, client_id, body)


def decode(body: bytes, version: int = REQUEST_VERSION) -> ApiVersions:
    """The response body after the 4-byte correlation id. What it cannot read is a
    ``DecodeError`` naming the field."""
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


def pick_version(av: ApiVersions, api_key: int, lowest: int, highest: int) -> int | None:
    """The highest version both sides speak in ``lowest..highest``; None when none is."""
    if api_key not in av.api_keys:
        return None
    low, high = av.api_keys[api_key]
    best = min(high, highest)
    return best if best >= max(low, lowest) else None
