"""The Redpanda Admin API contract, read from upstream's api-doc files in ``reference/``.

Most files are Swagger 1.2 documents; ``status.json`` and ``kafka.json`` are Swagger 2.0
``paths`` fragments that upstream's server concatenates into one document, so they parse
only once wrapped in braces. Routes whose file upstream deleted (per ``SOURCES.txt``) stay
known, so a request to one is reported as retired instead of merely unknown.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

REFERENCE_DIR = Path(__file__).parent / "reference"
_INT_TYPES = {"integer", "long", "int"}


@dataclass(frozen=True)
class Route:
    method: str
    template: str
    nickname: str
    path_params: dict[str, str]  # name -> declared type
    query_params: dict[str, bool]  # name -> required
    response_type: str | None
    items_type: str | None
    source: str
    retired: str | None = None  # why the route no longer exists upstream

    @property
    def literal_segments(self) -> int:
        return sum(1 for s in self.template.split("/") if s and not s.startswith("{"))

    def match(self, path: str) -> dict[str, str] | None:
        pattern = "^"
        for segment in self.template.strip("/").split("/"):
            name = segment[1:-1] if segment.startswith("{") else None
            if name is None:
                pattern += "/" + re.escape(segment)
            elif self.path_params.get(name) in _INT_TYPES:
                pattern += f"/(?P<{name}>-?[0-9]+)"
            else:
                pattern += f"/(?P<{name}>[^/]+)"
        found = re.match(pattern + "$", path)
        return {k: unquote(v) for k, v in found.groupdict().items()} if found else None


def _retired_files(reference_dir: Path) -> dict[str, str]:
    """Files that SOURCES.txt says upstream deleted: their routes are no longer served."""
    sources = reference_dir / "SOURCES.txt"
    retired = {}
    for line in sources.read_text().splitlines() if sources.exists() else []:
        name = line.split(" ", 1)[0]
        if name.endswith(".json") and "DELETED" in line:
            retired[name] = line.strip()
    return retired


def _params(op: dict[str, Any]) -> tuple[dict[str, str], dict[str, bool]]:
    path_params, query_params = {}, {}
    for p in op.get("parameters", []):
        where = p.get("in") or p.get("paramType") or "query"
        kind = p.get("type") or p.get("schema", {}).get("type") or "string"
        if where == "path":
            path_params[p["name"]] = kind
        elif where == "query":
            query_params[p["name"]] = p.get("required") in (True, "true")
    return path_params, query_params


class Contract:
    """Routes and models from Swagger 1.2 files and Swagger 2.0 ``paths`` fragments."""

    def __init__(self, reference_dir: Path = REFERENCE_DIR) -> None:
        self.routes: list[Route] = []
        self.models: dict[str, dict[str, Any]] = {}
        retired = _retired_files(reference_dir)
        for f in sorted(reference_dir.glob("*.json")):
            text = f.read_text()
            try:
                doc = json.loads(text)
            except json.JSONDecodeError:
                # status.json/kafka.json: 'paths' fragments the server concatenates.
                doc = json.loads("{" + text + "}")
            if "apis" in doc:
                self._load_swagger12(doc, f.name, retired.get(f.name))
            else:
                self._load_paths_fragment(doc, f.name, retired.get(f.name))
        if not self.routes:
            raise RuntimeError(f"no routes found in {reference_dir}: copy the api-doc files")
        # Literal segments win over parameters: /v1/partitions/local_summary is not a topic.
        self.routes.sort(key=lambda r: -r.literal_segments)

    def _load_swagger12(self, doc: dict[str, Any], source: str, retired: str | None) -> None:
        self.models.update(doc.get("models", {}))
        for api in doc["apis"]:
            for op in api["operations"]:
                path_params, query_params = _params(op)
                items = op.get("items", {}).get("type")
                self.routes.append(
                    Route(
                        op["method"].upper(), api["path"], op.get("nickname", ""), path_params,
                        query_params, op.get("type"), items, source, retired,
                    )
                )  # fmt: skip

    def _load_paths_fragment(self, doc: dict[str, Any], source: str, retired: str | None) -> None:
        for path, ops in doc.items():
            for method, op in ops.items():
                path_params, query_params = _params(op)
                self.routes.append(
                    Route(
                        method.upper(), path, op.get("operationId", ""), path_params,
                        query_params, None, None, source, retired,
                    )
                )  # fmt: skip

    def resolve(
        self, method: str, path: str, query: dict[str, list[str]]
    ) -> tuple[Route | None, dict[str, str], str | None]:
        """(route, path params, violation): violation is None when the request is declared."""
        on_path = [(r, m) for r in self.routes if (m := r.match(path)) is not None]
        if not on_path:
            return None, {}, f"{method} {path}: no such path in the contract"
        found = [(r, m) for r, m in on_path if r.method == method]
        if not found:
            allowed = sorted({r.method for r, _ in on_path})
            return None, {}, f"{method} {path}: method not declared (declared: {allowed})"
        route, params = found[0]
        if route.retired:
            return route, params, f"{method} {path}: route deleted upstream: {route.retired}"
        unknown = sorted(set(query) - set(route.query_params))
        if unknown:
            return route, params, f"{method} {path}: undeclared query parameters {unknown}"
        missing = sorted(n for n, req in route.query_params.items() if req and n not in query)
        if missing:
            return route, params, f"{method} {path}: missing required query parameters {missing}"
        return route, params, None

    def undocumented_fields(self, type_name: str | None, value: Any, where: str = "") -> list[str]:
        """Keys in ``value`` that the named model does not declare (recursively)."""
        model = self.models.get(type_name or "") or self.models.get(
            (type_name or "").removeprefix("get_")
        )
        if model is None or not isinstance(value, dict):
            return []
        out = []
        props = model.get("properties", {})
        for key, item in value.items():
            if key not in props:
                out.append(f"{where}{key}")
                continue
            spec = props[key]
            if spec.get("type") == "array" and isinstance(item, list):
                for i, element in enumerate(item):
                    sub = spec.get("items", {}).get("type")
                    out += self.undocumented_fields(sub, element, f"{where}{key}[{i}].")
            elif spec.get("type") in self.models:
                out += self.undocumented_fields(spec["type"], item, f"{where}{key}.")
        return out
