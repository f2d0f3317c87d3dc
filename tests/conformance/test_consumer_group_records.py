"""The KIP-848 layouts stated in ``pipeline.coordinator.records.LAYOUTS`` match Apache
Kafka's coordinator-record schemas (read where they live: see ``tests/support/reference.py``).

Each schema's non-tagged fields, in order, with their types (structs expanded, common
structs resolved), must equal the layout the decoder states; tagged fields are what the
decoder skips. Kafka's old-style key files carry the record type as their only valid
version, the Kafka 4.x ones as ``apiKey``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from pipeline.coordinator.records import KINDS, LAYOUTS
from tests.support.reference import require

NAMES = {
    3: "ConsumerGroupMetadata",
    4: "ConsumerGroupPartitionMetadata",
    5: "ConsumerGroupMemberMetadata",
    6: "ConsumerGroupTargetAssignmentMetadata",
    7: "ConsumerGroupTargetAssignmentMember",
    8: "ConsumerGroupCurrentMemberAssignment",
    16: "ConsumerGroupRegularExpression",
}


def _load(path: Path) -> dict[str, Any]:
    return dict(json.loads(re.sub(r"(?m)^\s*//.*$", "", path.read_text())))


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _fields(fields: list[dict[str, Any]], common: dict[str, list[dict[str, Any]]]) -> list[str]:
    out = []
    for f in fields:
        if "taggedVersions" in f:
            continue
        ftype = f["type"]
        base = ftype.removeprefix("[]")
        prefix = "[]" if ftype.startswith("[]") else ""
        inner = f.get("fields") or common.get(base)
        if inner is not None:
            text = prefix + "{" + ",".join(_fields(inner, common)) + "}"
        else:
            text = ftype + ("?" if "nullableVersions" in f else "")
        out.append(f"{_snake(f['name'])}:{text}")
    return out


def _layout(doc: dict[str, Any]) -> tuple[str, ...]:
    common = {c["name"]: c["fields"] for c in doc.get("commonStructs", [])}
    return tuple(_fields(doc["fields"], common))


def _schemas() -> list[tuple[int, Path, Path]]:
    folder = require("kafka-coordinator-records")
    found = []
    for rtype, name in NAMES.items():
        key, value = folder / f"{name}Key.json", folder / f"{name}Value.json"
        if key.exists() and value.exists():
            found.append((rtype, key, value))
    return found


def test_the_reference_holds_every_kip848_type_of_the_record_table() -> None:
    # type 16 (regular expressions) is newer than the reference snapshot: its layout is
    # checked by the real-broker vectors and built bytes in test_consumer_group_records.py
    assert {rtype for rtype, *_ in _schemas()} >= set(range(3, 9))
    assert set(LAYOUTS) == set(KINDS) == set(NAMES)


@pytest.mark.parametrize("rtype", range(3, 9))
def test_stated_layout_matches_upstream(rtype: int) -> None:
    [(_, key_path, value_path)] = [s for s in _schemas() if s[0] == rtype]
    key, value = _load(key_path), _load(value_path)
    assert key["validVersions"] == str(rtype)  # old-style keys: the version is the type
    key_fields = _layout(key)
    assert key_fields[0] == "group_id:string"
    assert (key_fields[1:], _layout(value)) == LAYOUTS[rtype]
    assert value["validVersions"] == "0" and value["flexibleVersions"] == "0+"


def test_kafka4x_metadata_key_type_is_three() -> None:
    doc = _load(require("kafka-coordinator-records") / "kafka4x" / "ConsumerGroupMetadataKey.json")
    assert doc["apiKey"] == 3 and _layout(doc) == ("group_id:string",)
