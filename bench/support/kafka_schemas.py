"""Apache Kafka's coordinator-record schemas, read where they live, and a codec over them.

The conformance tests (and ``bench/perf/decode.py``'s baseline) read Kafka's own message JSON
for the ``__consumer_offsets`` records from the reference folder
(``tests/support/reference.py``: ``../shared/reference/kafka-coordinator-records/``, or
``$LAGPILOT_REFERENCE_DIR``). The repository carries no copy of them.

kafka-python 3's generic schema engine (``kafka.protocol.api_data.ApiData``) reads such
JSON and encodes and decodes records without sharing a line with ``pipeline.read.offsets``: a
vector built here catches a decoder bug that a vector built by the decoder's author would
repeat. ``ApiData`` loads its JSON by class name from an importable package, so the folder
is registered under a private package name whose loader reads files from it in place.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import json
import re
import sys
from importlib.resources.abc import TraversableResources
from pathlib import Path
from types import ModuleType
from typing import Any

from kafka.protocol.api_data import ApiData

from bench.support.reference import reference_dir

SUBDIR = "kafka-coordinator-records"
_PACKAGE = "_lagpilot_upstream_coordinator_records"
_COMMENTS = re.compile(r"(?m)^\s*//.*$")


def schema_dir() -> Path:
    """The folder of upstream schemas; FileNotFoundError naming the fix if it is absent."""
    folder = reference_dir() / SUBDIR
    if not folder.is_dir():
        raise FileNotFoundError(
            f"{folder} not found: Kafka's coordinator-record schemas are read there "
            f"(set LAGPILOT_REFERENCE_DIR to the folder that holds {SUBDIR}/)"
        )
    return folder


def read_schema(path: Path) -> dict[str, Any]:
    """One upstream message JSON file (``//`` comment lines stripped)."""
    doc: dict[str, Any] = json.loads(_COMMENTS.sub("", path.read_text()))
    return doc


class _InPlace(TraversableResources):
    def __init__(self, folder: Path) -> None:
        self._folder = folder

    def files(self) -> Path:
        return self._folder


class _InPlaceLoader(importlib.abc.Loader):
    """Serves a folder's files as a package's resources, without copying them."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder

    def get_resource_reader(self, name: str) -> _InPlace:
        return _InPlace(self._folder)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        pass


def _package() -> ModuleType:
    if _PACKAGE not in sys.modules:
        loader = _InPlaceLoader(schema_dir())
        spec = importlib.machinery.ModuleSpec(_PACKAGE, loader, is_package=True)
        sys.modules[_PACKAGE] = importlib.util.module_from_spec(spec)
    return sys.modules[_PACKAGE]


@functools.cache
def schema_class(name: str) -> type[ApiData]:
    """The ApiData class of one upstream record schema, e.g. ``"OffsetCommitValue"``."""
    return type(name, (ApiData,), {}, load_json=_package())


def record_schema_names() -> list[str]:
    """Every old-style (``"type": "data"``) Key/Value schema at the folder's top level."""
    return sorted(p.stem for p in schema_dir().glob("*.json"))


def key_type(name: str) -> int:
    """The record type of a key schema: its single valid version, by upstream convention."""
    low, high = schema_class(name).valid_versions
    assert low == high, f"{name} keys have one record type, got {low}..{high}"
    return int(low)


def encode(name: str, version: int, **fields: Any) -> bytes:
    """int16 version (a key's record type) + the struct, as the broker writes it.

    ``members`` may be given as dicts (as for ``bench.support.layout_codec.encode``).
    """
    cls = schema_class(name)
    if "members" in fields:
        member = cls.MemberMetadata  # type: ignore[attr-defined]
        fields["members"] = [
            m if not isinstance(m, dict) else member(version=version, **m)
            for m in fields["members"]
        ]
    return bytes(cls(version=version, **fields).encode(version=version))


def decode(name: str, data: bytes) -> Any:
    """kafka-python's generic decoding of one key or value (header included)."""
    return schema_class(name).decode(data)
