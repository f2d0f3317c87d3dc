"""Kafka's request/response framing and the writer of its wire types: pure, no sockets.

The one place lagpilot's raw Kafka-protocol clients frame what they send and split what
they get (``pipeline.commands.broker_version``, :mod:`pipeline.coordinator.connection`,
:mod:`pipeline.read.share_groups`); reading a body is :class:`pipeline.coordinator.wire.Reader`'s.

The protocol facts this relies on (Kafka's message definitions, in our words):

- Every message on the socket is an int32 size, then that many bytes.
- A request header is api key (int16), api version (int16), correlation id (int32) and
  client id (int16-length nullable string), and, when the request version is *flexible*,
  a tagged-field section after them (header v2; v1 without it). The client id stays a
  classic string even in header v2.
- A response header is the correlation id, plus a tagged-field section when the response
  version is flexible (header v1), with one exception: ApiVersions answers always carry the
  bare v0 header, because a client reads them before it knows which versions the broker has.
- Flexible versions use compact strings and arrays (uvarint length + 1, 0 meaning null) and
  end every structure with a tagged-field section (a uvarint count, 0 here: we send none).
- Which version of an API is the first flexible one differs per API (:data:`FIRST_FLEXIBLE`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable

from pipeline.coordinator.wire import Malformed, Reader
from schemas.errors import LagpilotError

# API keys (Kafka's message definitions)
FIND_COORDINATOR = 10
LIST_GROUPS = 16
SASL_HANDSHAKE = 17
API_VERSIONS = 18
SASL_AUTHENTICATE = 36
METADATA = 3
SHARE_GROUP_DESCRIBE = 77
DESCRIBE_SHARE_GROUP_OFFSETS = 90

#: api key -> its first flexible version; an API absent here is never flexible for us
#: (SaslHandshake has no flexible version at all)
FIRST_FLEXIBLE: dict[int, int] = {
    METADATA: 9,
    FIND_COORDINATOR: 3,
    LIST_GROUPS: 3,
    API_VERSIONS: 3,
    SASL_AUTHENTICATE: 2,
    SHARE_GROUP_DESCRIBE: 0,
    DESCRIBE_SHARE_GROUP_OFFSETS: 0,
}

#: a response larger than this is not an answer to anything lagpilot asks: a wrong port
#: (a TLS or HTTP server) reads as a huge size, and allocating it would be the failure
MAX_RESPONSE_BYTES = 64 << 20


class ProtocolError(LagpilotError, ValueError):
    """An answer lagpilot cannot read as the Kafka protocol: a wrong port or a broken
    broker; the same bytes fail the same way."""

    code = "malformed"


def is_flexible(api_key: int, version: int) -> bool:
    first = FIRST_FLEXIBLE.get(api_key)
    return first is not None and version >= first


class Writer:
    """Builds a request body from Kafka's wire types, in the order the definition lists
    them; each method returns the writer, so a body reads as one chain."""

    __slots__ = ("_out",)

    def __init__(self) -> None:
        self._out = bytearray()

    def build(self) -> bytes:
        return bytes(self._out)

    def raw(self, data: bytes) -> Writer:
        self._out += data
        return self

    def int8(self, n: int) -> Writer:
        self._out += struct.pack(">b", n)
        return self

    def boolean(self, flag: bool) -> Writer:
        return self.int8(1 if flag else 0)

    def int16(self, n: int) -> Writer:
        self._out += struct.pack(">h", n)
        return self

    def int32(self, n: int) -> Writer:
        self._out += struct.pack(">i", n)
        return self

    def int64(self, n: int) -> Writer:
        self._out += struct.pack(">q", n)
        return self

    def uvarint(self, n: int) -> Writer:
        self._out += uvarint(n)
        return self

    def string(self, text: str | None, *, compact: bool) -> Writer:
        """A (nullable) string: compact is uvarint(len + 1), classic is int16 len; -1/0 null."""
        if text is None:
            return self.uvarint(0) if compact else self.int16(-1)
        raw = text.encode()
        (self.uvarint(len(raw) + 1) if compact else self.int16(len(raw))).raw(raw)
        return self

    def bytes_field(self, data: bytes, *, compact: bool) -> Writer:
        (self.uvarint(len(data) + 1) if compact else self.int32(len(data))).raw(data)
        return self

    def array_len(self, n: int | None, *, compact: bool) -> Writer:
        """An array's length; None writes a null array."""
        if n is None:
            return self.uvarint(0) if compact else self.int32(-1)
        return self.uvarint(n + 1) if compact else self.int32(n)

    def strings(self, items: Iterable[str], *, compact: bool) -> Writer:
        items = list(items)
        self.array_len(len(items), compact=compact)
        for item in items:
            self.string(item, compact=compact)
        return self

    def int32s(self, items: Iterable[int], *, compact: bool) -> Writer:
        items = list(items)
        self.array_len(len(items), compact=compact)
        for item in items:
            self.int32(item)
        return self

    def no_tags(self) -> Writer:
        """An empty tagged-field section (a flexible structure's end)."""
        return self.uvarint(0)


def uvarint(n: int) -> bytes:
    """An unsigned varint: 7 bits a byte, low bits first, the high bit saying "more"."""
    if n < 0:
        raise ValueError(f"uvarint of a negative number {n}")
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def request_header(api_key: int, version: int, correlation_id: int, client_id: str) -> bytes:
    """Header v2 for a flexible request version, v1 otherwise (the client id stays classic)."""
    w = Writer().int16(api_key).int16(version).int32(correlation_id)
    w.string(client_id, compact=False)
    if is_flexible(api_key, version):
        w.no_tags()
    return w.build()


def frame(payload: bytes) -> bytes:
    """Size-prefixed, ready for the socket."""
    return struct.pack(">i", len(payload)) + payload


def encode_request(
    api_key: int, version: int, correlation_id: int, client_id: str, body: bytes
) -> bytes:
    return frame(request_header(api_key, version, correlation_id, client_id) + body)


def frame_size(prefix: bytes, max_bytes: int = MAX_RESPONSE_BYTES) -> int:
    """The size a response's 4-byte prefix announces, checked before anything is read."""
    size = int(struct.unpack(">i", prefix)[0])
    if not 4 <= size <= max_bytes:
        raise ProtocolError(
            f"response size {size}: not a Kafka answer (is the address a Kafka listener, "
            "and does security.protocol match it?)"
        )
    return size


def read_frame(recv_exact: Callable[[int], bytes], max_bytes: int = MAX_RESPONSE_BYTES) -> bytes:
    """One response's bytes after its size, read through ``recv_exact(n)``."""
    return recv_exact(frame_size(recv_exact(4), max_bytes))


def split_response(api_key: int, version: int, data: bytes) -> tuple[int, bytes]:
    """(correlation id, body) of one framed response's bytes: header v1 (tags skipped) for
    a flexible version, v0 otherwise and always for ApiVersions."""
    r = Reader(data)
    try:
        correlation_id = r.int32("correlation_id")
        if api_key != API_VERSIONS and is_flexible(api_key, version):
            r.skip_tagged_fields("response header tagged fields")
    except Malformed as exc:
        raise ProtocolError(f"{exc}: the response header is truncated") from None
    return correlation_id, data[r.pos :]


#: the broker error codes lagpilot's raw clients act on: code -> (Kafka's name, retriable)
ERRORS: dict[int, tuple[str, bool]] = {
    -1: ("UNKNOWN_SERVER_ERROR", False),
    3: ("UNKNOWN_TOPIC_OR_PARTITION", True),
    14: ("COORDINATOR_LOAD_IN_PROGRESS", True),
    15: ("COORDINATOR_NOT_AVAILABLE", True),
    16: ("NOT_COORDINATOR", True),
    24: ("INVALID_GROUP_ID", False),
    29: ("TOPIC_AUTHORIZATION_FAILED", False),
    30: ("GROUP_AUTHORIZATION_FAILED", False),
    31: ("CLUSTER_AUTHORIZATION_FAILED", False),
    33: ("UNSUPPORTED_SASL_MECHANISM", False),
    34: ("ILLEGAL_SASL_STATE", False),
    35: ("UNSUPPORTED_VERSION", False),
    42: ("INVALID_REQUEST", False),
    58: ("SASL_AUTHENTICATION_FAILED", False),
    69: ("GROUP_ID_NOT_FOUND", False),
}  # fmt: skip


def error_name(code: int) -> str:
    return ERRORS.get(code, (f"error code {code}", False))[0]
