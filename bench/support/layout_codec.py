"""An encoder of ``__consumer_offsets`` records driven by ``pipeline.coordinator.layouts``.

It shares no code with ``pipeline.read.offsets``: it walks the stated layout table and writes
each field by its wire type. The decoder's unit tests use it to show that the hand-written
decoder reads exactly what the table states, without any upstream file. (The conformance
tests show the table matches Kafka's own schemas, and that this encoder writes the same
bytes as kafka-python's generic engine fed those schemas.)

Field values are passed by the table's snake_case names; ``members`` is a list of dicts.
"""

from __future__ import annotations

import struct
from typing import Any

from pipeline.coordinator.layouts import Field, Layout, layout


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _length(n: int, flexible: bool, wide: bool) -> bytes:
    """``n`` (-1: null) as a compact varint (+1) or an int16/int32."""
    if flexible:
        return _uvarint(n + 1)
    return struct.pack(">i" if wide else ">h", n)


def _field(f: Field, value: Any, flexible: bool, member: tuple[Field, ...], version: int) -> bytes:
    if f.type == "int16":
        return struct.pack(">h", value)
    if f.type == "int32":
        return struct.pack(">i", value)
    if f.type == "int64":
        return struct.pack(">q", value)
    if f.type in ("string", "bytes"):
        if value is None:
            return _length(-1, flexible, wide=f.type == "bytes")
        raw = value.encode() if f.type == "string" else bytes(value)
        return _length(len(raw), flexible, wide=f.type == "bytes") + raw
    assert f.type == "[]member", f
    out = _length(len(value), flexible, wide=True)
    for element in value:
        out += _struct(member, element, flexible, (), version)
    return out


def _struct(
    fields: tuple[Field, ...], values: dict[str, Any], flexible: bool,
    member: tuple[Field, ...], version: int,
) -> bytes:  # fmt: skip
    out = b""
    for f in fields:
        if not f.in_version(version):
            continue
        if f.name not in values:
            raise KeyError(f"{f.name} is in version {version}: give it a value")
        out += _field(f, values[f.name], flexible, member, version)
    if flexible:
        out += _uvarint(0)  # no tagged fields
    return out


def encode_layout(spec: Layout, version: int, **values: Any) -> bytes:
    """int16 ``version`` (a key's record type), then the fields the layout states for it."""
    if version not in spec.versions:
        raise ValueError(f"{spec.name} has no version {version} (states {spec.versions})")
    return struct.pack(">h", version) + _struct(
        spec.fields, values, spec.flexible(version), spec.member, version
    )


def encode(name: str, version: int, **values: Any) -> bytes:
    """:func:`encode_layout` of the layout named ``name``."""
    return encode_layout(layout(name), version, **values)
