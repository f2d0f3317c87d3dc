"""Kafka's wire types, read from a buffer by a reader that names the field it could not read.

Shared by the ``__consumer_offsets`` decoders (:mod:`pipeline.read.offsets` and
:mod:`pipeline.coordinator.records`): pure, no I/O. Compact (flexible-version) lengths
are stored +1 with 0 meaning null; tagged fields are skipped, which is how newer brokers
add fields without a version bump.
"""

from __future__ import annotations

import base64
import struct

from schemas.errors import LagpilotError

__all__ = ["INT16", "INT32", "INT64", "Malformed", "Reader"]

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")


class Malformed(LagpilotError):
    """Raised inside a reader only; the decoders turn it into ``Skipped`` naming the field."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}", code="malformed")
        self.field = field


class Reader:
    """Reads Kafka's wire types from a buffer, naming the field when it cannot."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos

    def _take(self, n: int, field: str) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise Malformed(field, f"needs {n} bytes at byte {self.pos}, {self.remaining} left")
        out = self.buf[self.pos : end]
        self.pos = end
        return out

    def take(self, n: int, field: str) -> bytes:
        """The next ``n`` raw bytes (a tagged field's data, a nested structure)."""
        return self._take(n, field)

    @property
    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def int16(self, field: str) -> int:
        return int(INT16.unpack(self._take(2, field))[0])

    def int32(self, field: str) -> int:
        return int(INT32.unpack(self._take(4, field))[0])

    def int64(self, field: str) -> int:
        return int(INT64.unpack(self._take(8, field))[0])

    def uvarint(self, field: str) -> int:
        result = shift = 0
        while True:
            if self.pos >= len(self.buf):
                raise Malformed(field, "truncated varint")
            b = self.buf[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 28:
                raise Malformed(field, "varint longer than 5 bytes")

    def _length(self, field: str, compact: bool, wide: bool = False) -> int:
        """-1 for null; compact lengths are stored +1, 0 meaning null."""
        if compact:
            return self.uvarint(field) - 1
        return self.int32(field) if wide else self.int16(field)

    def string(self, field: str, compact: bool) -> str:
        s = self.nullable_string(field, compact)
        if s is None:
            raise Malformed(field, "null where a string is required")
        return s

    def nullable_string(self, field: str, compact: bool) -> str | None:
        n = self._length(field, compact)
        if n < -1:
            raise Malformed(field, f"negative length {n}")
        if n == -1:
            return None
        raw = self._take(n, field)
        try:
            return raw.decode()
        except UnicodeDecodeError as exc:
            raise Malformed(field, f"not UTF-8 ({exc.reason} at {exc.start})") from None

    def nullable_bytes(self, field: str, compact: bool) -> bytes | None:
        n = self._length(field, compact, wide=True)
        if n < -1:
            raise Malformed(field, f"negative length {n}")
        return None if n == -1 else self._take(n, field)

    def array_len(self, field: str, compact: bool) -> int:
        n = self._length(field, compact, wide=True)
        if n < -1:
            raise Malformed(field, f"negative array length {n}")
        if n > self.remaining:  # every element takes at least one byte
            raise Malformed(field, f"array length {n} exceeds the {self.remaining} bytes left")
        return max(n, 0)

    def int8(self, field: str) -> int:
        return int(INT8.unpack(self._take(1, field))[0])

    def uuid(self, field: str) -> str:
        """A 16-byte UUID as Kafka prints topic ids: URL-safe base64 without padding."""
        return base64.urlsafe_b64encode(self._take(16, field)).rstrip(b"=").decode()

    def int32_array(self, field: str, compact: bool) -> tuple[int, ...]:
        n = self.array_len(field, compact)
        raw = self._take(4 * n, field)
        return struct.unpack(f">{n}i", raw)

    def string_array(self, field: str, compact: bool) -> tuple[str, ...]:
        return tuple(
            self.string(f"{field}[{i}]", compact) for i in range(self.array_len(field, compact))
        )

    def skip_tagged_fields(self, field: str) -> None:
        for _ in range(self.uvarint(field)):
            self.uvarint(field)  # tag
            self._take(self.uvarint(field), field)

    def end(self, last_field: str) -> None:
        if self.remaining:
            raise Malformed(last_field, f"{self.remaining} trailing bytes after it")
