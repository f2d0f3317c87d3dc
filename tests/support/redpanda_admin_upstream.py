"""A reader of Redpanda's Admin API description files, for the conformance tests only.

The files live in the reference folder (``../shared/reference/redpanda-admin-api/``, see
``tests/support/reference.py``); the repository carries no copy. Most are Swagger 1.2
documents; ``status.json`` and ``kafka.json`` are Swagger 2.0 ``paths`` fragments that
upstream's server concatenates into one document, so they parse only once wrapped in
braces. ``SOURCES.txt`` names the upstream commit of each file and marks files upstream
has since deleted (their routes no longer exist).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SUBDIR = "redpanda-admin-api"
_INTEGERS = {"integer", "long", "int", "int32", "int64"}


def json_type(kind: str | None) -> str | None:
    """Swagger's scalar type names as JSON types ("long" -> "integer"); models unchanged."""
    if kind in _INTEGERS:
        return "integer"
    return kind


@dataclass(frozen=True)
class UpstreamRoute:
    method: str
    template: str
    nickname: str
    path_params: dict[str, str | None]  # name -> JSON type
    query_params: dict[str, tuple[str | None, bool]]  # name -> (JSON type, required)
    type: str | None  # the operation's declared answer type ("void", "array", a model)
    items: str | None  # for arrays
    source: str
    deleted: bool


@dataclass
class UpstreamApi:
    routes: list[UpstreamRoute] = field(default_factory=list)
    models: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> properties
    model_sources: dict[str, str] = field(default_factory=dict)

    def find(self, method: str, template: str) -> list[UpstreamRoute]:
        return [r for r in self.routes if r.method == method and r.template == template]


def _deleted_files(folder: Path) -> set[str]:
    sources = folder / "SOURCES.txt"
    lines = sources.read_text().splitlines() if sources.exists() else []
    return {ln.split(" ", 1)[0] for ln in lines if ln.split(" ", 1)[0].endswith(".json")
            and "DELETED" in ln}  # fmt: skip


def _params(op: dict[str, Any]) -> tuple[dict[str, str | None], dict[str, tuple[str | None, bool]]]:
    path_params: dict[str, str | None] = {}
    query_params: dict[str, tuple[str | None, bool]] = {}
    for p in op.get("parameters", []):
        where = p.get("in") or p.get("paramType") or "query"
        kind = json_type(p.get("type") or p.get("schema", {}).get("type"))
        if where == "path":
            path_params[p["name"]] = kind
        elif where == "query":
            query_params[p["name"]] = (kind, p.get("required") in (True, "true"))
    return path_params, query_params


def load(folder: Path) -> UpstreamApi:
    api = UpstreamApi()
    deleted = _deleted_files(folder)
    for f in sorted(folder.glob("*.json")):
        text = f.read_text()
        try:
            doc = json.loads(text)
        except json.JSONDecodeError:
            doc = json.loads("{" + text + "}")  # a Swagger 2.0 'paths' fragment
        gone = f.name in deleted
        if "apis" in doc:
            for name, model in doc.get("models", {}).items():
                api.models[name] = model.get("properties", {})
                api.model_sources[name] = f.name
            for entry in doc["apis"]:
                for op in entry["operations"]:
                    path_params, query_params = _params(op)
                    api.routes.append(
                        UpstreamRoute(
                            op["method"].upper(), entry["path"], op.get("nickname", ""),
                            path_params, query_params, op.get("type"),
                            op.get("items", {}).get("type"), f.name, gone,
                        )
                    )  # fmt: skip
        else:
            for path, ops in doc.items():
                for method, op in ops.items():
                    path_params, query_params = _params(op)
                    api.routes.append(
                        UpstreamRoute(
                            method.upper(), path, op.get("operationId", ""), path_params,
                            query_params, None, None, f.name, gone,
                        )
                    )  # fmt: skip
    return api
