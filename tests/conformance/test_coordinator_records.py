"""Conformance: lagpilot's stated record layouts against Apache Kafka's own schemas.

``pipeline.coordinator.layouts`` states, in lagpilot's words, every ``__consumer_offsets``
key and value layout the decoder claims to read; the decoder's unit tests hold the decoder
to that table. These tests hold the table to upstream: Kafka's message schemas for these
records, read where they live (``tests/support/reference.py``), never copied in.

- every layout, version by version: the same fields in the same order, wire types,
  nullability, flexible versions, and the value a field takes where it is absent;
- the same layouts in Kafka 4.x's newer ``coordinator-key``/``coordinator-value`` form;
- the record types the decoder skips by kind (KIP-848, share groups) are the ones upstream
  gives those kinds, and the decoder skips keys encoded from upstream's schemas;
- kafka-python's generic engine fed upstream's schemas (an encoder that shares nothing with
  lagpilot) writes the same bytes as the table-driven encoder, and the decoder reads them.

Where the reference folder is absent these tests report that they could not run and why
(under CI they fail: CI always has the folder).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
from support import offset_vectors
from support.reference import require

from bench.support import kafka_schemas, layout_codec
from pipeline.coordinator.layouts import (
    CONSUMER_GROUP_TYPES,
    GROUP_METADATA_VALUE,
    LAYOUTS,
    OFFSET_COMMIT_VALUE,
    SKIPPED_KINDS,
    VALUE_OF,
    Layout,
)
from pipeline.coordinator.records import ConsumerGroupTombstone
from pipeline.read.offsets import OffsetDeleted, Skipped, decode_record
from schemas import GroupRemoved

#: Share-coordinator records in the same folder: they go to ``__share_group_state``.
OTHER_TOPIC = ("ShareSnapshot", "ShareUpdate")
KIND_PREFIX = {"share group": "ShareGroup"}


@pytest.fixture(scope="module")
def upstream() -> Path:
    return require(kafka_schemas.SUBDIR)


def _versions(spec: str | None) -> range:
    """Kafka's version ranges: "3", "0-4", "3+", "none"."""
    if spec is None or spec == "none":
        return range(0)
    if spec.endswith("+"):
        return range(int(spec[:-1]), 2**15)
    low, _, high = spec.partition("-")
    return range(int(low), int(high or low) + 1)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _wire_type(kafka_type: str) -> str:
    return "[]member" if kafka_type.startswith("[]") else kafka_type


def _absent(default: Any) -> int | None:
    return None if default in (None, "null") else int(default)


def _struct_fields(doc: dict[str, Any], kafka_type: str) -> list[dict[str, Any]]:
    name = kafka_type[2:]
    for struct in doc.get("commonStructs", []):
        if struct["name"] == name:
            return list(struct["fields"])
    field = next(f for f in doc["fields"] if f["type"] == kafka_type)
    return list(field["fields"])


def _compare_fields(
    where: str, ours: tuple[Any, ...], theirs: list[dict[str, Any]], version: int, every: range
) -> list[str]:
    mine = [(f.name, f.type, version in f.nullable) for f in ours if version in f.versions]
    upstream = [
        (_snake(f["name"]), _wire_type(f["type"]), version in _versions(f.get("nullableVersions")))
        for f in theirs
        if version in _versions(f["versions"]) and not f.get("taggedVersions")
    ]
    out = []
    if mine != upstream:
        out.append(f"{where} v{version}: fields {mine} but upstream {upstream}")
    for f in ours:
        match = next((t for t in theirs if _snake(t["name"]) == f.name), None)
        if match is None or all(v in _versions(match["versions"]) for v in every):
            continue  # in every version: no absent value to agree on
        if f.absent != _absent(match.get("default")):
            out.append(
                f"{where}.{f.name}: absent means {f.absent}, upstream {match.get('default')}"
            )
    return out


def layout_differences(spec: Layout, doc: dict[str, Any]) -> list[str]:
    """Every way ``spec`` differs from one old-style upstream schema (empty: it conforms)."""
    out = []
    valid = _versions(doc["validVersions"])
    if spec.part == "key" and list(valid) != list(spec.versions):
        out.append(f"{spec.name}: record types {spec.versions}, upstream {valid}")
    missing = [v for v in spec.versions if v not in valid]
    if missing:
        out.append(f"{spec.name}: claims versions {missing} that upstream does not define")
    return out + _version_differences(spec, doc, [v for v in spec.versions if v in valid])


def _version_differences(spec: Layout, doc: dict[str, Any], versions: list[int]) -> list[str]:
    out = []
    flexible = _versions(doc["flexibleVersions"])
    for v in versions:
        if spec.flexible(v) != (v in flexible):
            out.append(f"{spec.name} v{v}: flexible={spec.flexible(v)}, upstream {v in flexible}")
        out += _compare_fields(spec.name, spec.fields, doc["fields"], v, spec.versions)
        if spec.member:
            kind = next(f["type"] for f in doc["fields"] if f["type"].startswith("[]"))
            theirs = _struct_fields(doc, kind)
            out += _compare_fields(f"{spec.name}.members[]", spec.member, theirs, v, spec.versions)
    return out


@pytest.mark.parametrize("spec", LAYOUTS, ids=lambda s: s.name)
def test_every_stated_layout_matches_the_upstream_schema(upstream: Path, spec: Layout) -> None:
    doc = kafka_schemas.read_schema(upstream / f"{spec.name}.json")
    assert doc["type"] == "data"
    assert layout_differences(spec, doc) == []


def test_the_comparison_finds_a_wrong_statement(upstream: Path) -> None:
    doc = kafka_schemas.read_schema(upstream / "OffsetCommitValue.json")
    offset, epoch, metadata, *rest = OFFSET_COMMIT_VALUE.fields

    def with_fields(*fields: Any) -> Layout:
        return dataclasses.replace(OFFSET_COMMIT_VALUE, fields=fields)

    wrong = [
        dataclasses.replace(OFFSET_COMMIT_VALUE, versions=range(0, 6)),  # claims v5
        dataclasses.replace(OFFSET_COMMIT_VALUE, flexible_from=3),
        with_fields(offset, metadata, epoch, *rest),  # order
        with_fields(offset, dataclasses.replace(epoch, absent=0), metadata, *rest),
        with_fields(offset, dataclasses.replace(epoch, type="int64"), metadata, *rest),
        with_fields(offset, metadata, *rest),  # a field missing
        with_fields(offset, dataclasses.replace(epoch, versions=range(2, 5)), metadata, *rest),
    ]
    for spec in wrong:
        assert layout_differences(spec, doc), spec
    group = kafka_schemas.read_schema(upstream / "GroupMetadataValue.json")
    nullable_member = dataclasses.replace(
        GROUP_METADATA_VALUE,
        member=tuple(
            dataclasses.replace(f, nullable=f.versions) if f.name == "client_id" else f
            for f in GROUP_METADATA_VALUE.member
        ),
    )
    assert any("members[]" in d for d in layout_differences(nullable_member, group))


def _kafka4x(upstream: Path) -> list[dict[str, Any]]:
    return [kafka_schemas.read_schema(p) for p in sorted((upstream / "kafka4x").glob("*.json"))]


def test_the_layouts_match_kafka_4x_coordinator_schemas(upstream: Path) -> None:
    """Kafka 4.x states each key once (version 0) under its record type (``apiKey``)."""
    keys = [spec for spec in LAYOUTS if spec.part == "key"]
    checked = []
    for doc in _kafka4x(upstream):
        key = next((k for k in keys if doc["apiKey"] in k.versions), None)
        if key is None:
            continue
        if doc["type"] == "coordinator-key":
            assert _versions(doc["validVersions"]) == range(1) and doc["flexibleVersions"] == "none"
            ours = [(f.name, f.type) for f in key.fields_in(doc["apiKey"])]
            theirs = [(_snake(f["name"]), f["type"]) for f in doc["fields"]]
            assert ours == theirs, doc["name"]
        else:
            value = VALUE_OF[key.name]
            versions = [v for v in _versions(doc["validVersions"]) if v in value.versions]
            assert versions, doc["name"]
            assert _version_differences(value, doc, versions) == [], doc["name"]
        checked.append(doc["name"])
    assert {"OffsetCommitKey", "OffsetCommitValue", "LegacyOffsetCommitKey"} <= set(checked)


def test_kafka_4x_keys_decode_or_are_skipped_as_stated(upstream: Path) -> None:
    for doc in _kafka4x(upstream):
        if doc["type"] != "coordinator-key":
            continue
        rtype = int(doc["apiKey"])
        key = rtype.to_bytes(2, "big")
        values: dict[str, Any] = {}
        for f in doc["fields"]:
            assert f["type"] in ("string", "int32"), f  # non-flexible keys
            values[f["name"]] = f"{f['name'].lower()}-x" if f["type"] == "string" else 9
            raw = values[f["name"]]
            key += (
                len(raw).to_bytes(2, "big") + raw.encode()
                if isinstance(raw, str)
                else raw.to_bytes(4, "big")
            )
        got = decode_record(key, None)
        if rtype in (0, 1):
            assert got == OffsetDeleted(values["group"], values["topic"], 9)
        elif rtype == 2:
            assert got == GroupRemoved(values["group"])
        elif rtype in CONSUMER_GROUP_TYPES:  # read by pipeline.coordinator.records
            assert isinstance(got, ConsumerGroupTombstone), got
            assert got.group == values["GroupId"]
        else:
            assert isinstance(got, Skipped) and (got.reason, got.record_type) == (
                "unknown_type",
                rtype,
            )


def test_skipped_kinds_are_the_record_types_upstream_gives_them(upstream: Path) -> None:
    names = [
        n for n in kafka_schemas.record_schema_names()
        if n.endswith("Key") and not n.startswith(OTHER_TOPIC)
    ]  # fmt: skip
    stated = {spec.name for spec in LAYOUTS}
    for kind, types in SKIPPED_KINDS.items():
        theirs = sorted(kafka_schemas.key_type(n) for n in names if n.startswith(KIND_PREFIX[kind]))
        assert theirs == list(types), kind
    consumer_groups = sorted(
        kafka_schemas.key_type(n) for n in names if n.startswith("ConsumerGroup")
    )
    assert set(consumer_groups) <= set(CONSUMER_GROUP_TYPES)  # stated in consumer_group_records
    others = [
        n for n in names
        if n not in stated and not n.startswith(("ConsumerGroup", *KIND_PREFIX.values()))
    ]  # fmt: skip
    assert others == [], "upstream has record kinds the table does not name"


@pytest.mark.parametrize(
    "key_name",
    [
        "ShareGroupMetadataKey",
        "ShareGroupStatePartitionMetadataKey",
    ],
)
def test_keys_encoded_from_upstream_schemas_are_skipped_by_kind(
    upstream: Path, key_name: str
) -> None:
    rtype = kafka_schemas.key_type(key_name)
    fields = {
        f: "grp" if "group" in f else "x" for f in kafka_schemas.schema_class(key_name).fields
    }
    key = kafka_schemas.encode(key_name, rtype, **fields)
    value = kafka_schemas.encode(key_name[: -len("Key")] + "Value", 0)
    kind = next(k for k, types in SKIPPED_KINDS.items() if rtype in types)
    for v, version in ((value, 0), (None, None)):
        got = decode_record(key, v)
        assert isinstance(got, Skipped)
        assert (got.reason, got.record_type, got.version) == ("unknown_type", rtype, version)
        assert kind.split()[0] in got.detail


# ------------------------------------------------------- an encoder that shares nothing


@pytest.mark.parametrize("record_type", [0, 1])
@pytest.mark.parametrize("version", OFFSET_COMMIT_VALUE.versions)
def test_offset_commit_vectors_from_upstream_schema(
    upstream: Path, record_type: int, version: int
) -> None:
    offset_vectors.check_offset_commit(kafka_schemas.encode, record_type, version)


@pytest.mark.parametrize("version", GROUP_METADATA_VALUE.versions)
@pytest.mark.parametrize("assignment_version", range(4))
def test_group_metadata_vectors_from_upstream_schema(
    upstream: Path, version: int, assignment_version: int
) -> None:
    offset_vectors.check_group_metadata(kafka_schemas.encode, version, assignment_version)


@pytest.mark.parametrize("version", GROUP_METADATA_VALUE.versions)
def test_empty_group_vectors_from_upstream_schema(upstream: Path, version: int) -> None:
    offset_vectors.check_empty_group(kafka_schemas.encode, version)


def _sample(spec: Layout) -> dict[str, Any]:
    values: dict[str, Any] = {
        "group": "payments", "topic": "orders", "partition": 3, "offset": 1 << 40,
        "leader_epoch": 6, "metadata": "m", "commit_timestamp": offset_vectors.TS,
        "expire_timestamp": offset_vectors.EXPIRE, "protocol_type": "consumer",
        "generation": 4, "protocol": "range", "leader": None,
        "current_state_timestamp": offset_vectors.TS,
    }  # fmt: skip
    if spec.member:
        values["members"] = offset_vectors.group_members(0, 0)
    return {f.name: values[f.name] for f in spec.fields if f.name in values or f.name == "members"}


@pytest.mark.parametrize("spec", LAYOUTS, ids=lambda s: s.name)
def test_the_table_encoder_writes_what_kafka_schemas_write(upstream: Path, spec: Layout) -> None:
    for version in spec.versions:
        values = _sample(spec)
        assert layout_codec.encode(spec.name, version, **values) == kafka_schemas.encode(
            spec.name, version, **values
        ), (spec.name, version)
