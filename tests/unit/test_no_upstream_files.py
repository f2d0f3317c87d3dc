"""The repository carries no upstream file: other projects' contracts are read where they
live (``../shared/reference/``) by the conformance tests, and stated here in the project's
own code. This guard needs no reference folder: it recognises the shapes of the files the
project once copied (Kafka message schemas, Redpanda's Swagger api-docs) in any file git
would commit. (``tests/conformance/test_no_copies.py`` also compares bytes with the folder.)
"""

from __future__ import annotations

import json
import re

from support.repository import REPO, repository_files

_COMMENTS = re.compile(r"(?m)^\s*//.*$")


def upstream_shape(text: str) -> str | None:
    """What kind of upstream file ``text`` looks like, or None."""
    stripped = _COMMENTS.sub("", text).strip()
    if stripped.startswith('"/v1/'):
        return "a Swagger 2.0 paths fragment (Redpanda api-doc)"
    try:
        doc = json.loads(stripped)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    if "swaggerVersion" in doc or ("apis" in doc and "apiVersion" in doc):
        return "a Swagger api-doc (Redpanda Admin API)"
    if {"validVersions", "fields"} <= doc.keys():
        return "a Kafka message schema"
    return None


def test_the_guard_recognises_the_files_once_copied() -> None:
    assert upstream_shape('// Licensed\n{"type": "data", "validVersions": "0-4", "fields": []}')
    assert upstream_shape('{"apiVersion": "0.0.1", "swaggerVersion": "1.2", "apis": []}')
    assert upstream_shape('"/v1/status/ready": {"get": {}}')
    assert upstream_shape('{"$schema": "https://json-schema.org/draft/2020-12/schema"}') is None


def test_no_repository_file_is_an_upstream_file() -> None:
    files = repository_files()
    assert any(f.name == "pyproject.toml" for f in files)  # the listing works
    found = []
    for f in files:
        if f.suffix not in (".json", ".txt", ""):
            continue
        try:
            kind = upstream_shape(f.read_text())
        except (UnicodeDecodeError, OSError):
            continue
        if kind:
            found.append(f"{f.relative_to(REPO)}: {kind}")
    assert found == [], "upstream files belong in ../shared/reference, not here:\n" + "\n".join(
        found
    )
