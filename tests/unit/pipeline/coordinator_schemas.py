"""An independent encoder/decoder of ``__consumer_offsets`` records, for tests and the bench.

kafka-python 3's generic schema engine (``kafka.protocol.api_data.ApiData``) reads Kafka's
own message JSON files; fed the upstream coordinator-record schemas copied in ``vectors/``
(Apache-2.0, from apache/kafka group-coordinator), it encodes and decodes the records
without sharing a line with ``pipeline.offsets``. That independence is the point: a vector
built here catches a decoder bug that a vector built by the decoder's author would repeat.

``ApiData`` loads its JSON by class name from an importable package, so ``vectors/`` is
registered under a private module name rather than put on ``sys.path``.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from typing import Any

from kafka.protocol.api_data import ApiData

VECTORS = Path(__file__).resolve().parent / "vectors"
_PACKAGE = "_lagpilot_coordinator_vectors"


def _vectors_package() -> Any:
    if _PACKAGE not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            _PACKAGE, VECTORS / "__init__.py", submodule_search_locations=[str(VECTORS)]
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[_PACKAGE] = module
        spec.loader.exec_module(module)
    return sys.modules[_PACKAGE]


@functools.cache
def schema_class(name: str) -> type[ApiData]:
    """The ApiData class of one upstream record schema, e.g. ``"OffsetCommitValue"``."""
    return type(name, (ApiData,), {}, load_json=_vectors_package())


def record_schema_names() -> list[str]:
    """Every Key/Value schema in ``vectors/`` (old-style, ``"type": "data"``)."""
    return sorted(p.stem for p in VECTORS.glob("*.json"))


def key_type(name: str) -> int:
    """The record type of a key schema: its single valid version, by upstream convention."""
    low, high = schema_class(name).valid_versions
    assert low == high, f"{name} keys have one record type, got {low}..{high}"
    return int(low)


def encode(name: str, version: int, **fields: Any) -> bytes:
    """int16 version (a key's record type) + the struct, as the broker writes it."""
    return bytes(schema_class(name)(version=version, **fields).encode(version=version))


def decode(name: str, data: bytes) -> Any:
    """kafka-python's generic decoding of one key or value (header included)."""
    return schema_class(name).decode(data)
