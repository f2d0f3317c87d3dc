"""The part of Redpanda's Admin API that lagpilot uses, stated in lagpilot's own words.

This is what the contract stub (``redpanda_admin_stub``) serves and checks, and what the
client (``actuators.redpanda_admin``) may send: each route's method, path (with typed path
parameters), query parameters (type, required or not) and the fields of its answer, with
their JSON types. Nothing here is read from upstream at run time.

Each statement was taken from Redpanda's Admin API description (``src/v/redpanda/admin/
api-doc/`` in github.com/redpanda-data/redpanda), and the conformance tests
(``tests/conformance/test_redpanda_admin_contract.py``) check every one of them against
those files where they live (``../shared/reference/redpanda-admin-api/``): every route and
parameter exists upstream with the same types, and every answer model has exactly
upstream's fields (none missing, none extra, none of another type).

What upstream does not describe, and so is not stated here: request bodies (the stub
checks the two it accepts itself), error texts, and which answer fields a real Redpanda
leaves out. Fields marked ``optional`` are ones a real Redpanda omits when it has no value
(``rack`` without a rack, ``maintenance_status`` before the node reports health); the stub
may leave them out too, and the client must not rely on them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import unquote

Scalar = Literal["integer", "string", "boolean"]


@dataclass(frozen=True)
class Param:
    type: Scalar
    required: bool = False


@dataclass(frozen=True)
class Field:
    """An answer field: a scalar, ``array`` of ``items``, or the name of another model."""

    type: str
    items: str | None = None  # for arrays: a scalar or a model name
    optional: bool = False  # a real Redpanda may leave it out


@dataclass(frozen=True)
class Route:
    method: str
    template: str
    nickname: str  # the operation's name upstream (Swagger nickname / operationId)
    path_params: dict[str, Scalar] = field(default_factory=dict)
    query_params: dict[str, Param] = field(default_factory=dict)
    answer: str | None = None  # the answer's model; None: an empty body
    answer_is_array: bool = False
    # True: upstream documents the answer's model but declares the operation "void".
    answer_model_only: bool = False
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
            elif self.path_params.get(name) == "integer":
                pattern += f"/(?P<{name}>-?[0-9]+)"
            else:
                pattern += f"/(?P<{name}>[^/]+)"
        found = re.match(pattern + "$", path)
        return {k: unquote(v) for k, v in found.groupdict().items()} if found else None


_NTP: dict[str, Scalar] = {"namespace": "string", "topic": "string", "partition": "integer"}

ROUTES: tuple[Route, ...] = (
    Route("GET", "/v1/brokers", "get_brokers", answer="broker", answer_is_array=True),
    Route(
        "GET",
        "/v1/cluster/health_overview",
        "get_cluster_health_overview",
        answer="cluster_health_overview",
    ),
    Route("GET", "/v1/status/ready", "ready"),  # 200, empty body: the node is up
    Route(
        "GET",
        "/v1/partitions/{namespace}/{topic}/{partition}",
        "get_partition",
        path_params=_NTP,
        answer="partition",
    ),
    Route(
        "POST",
        "/v1/partitions/{namespace}/{topic}/{partition}/transfer_leadership",
        "kafka_transfer_leadership",
        path_params=_NTP,
        query_params={"target": Param("integer")},  # absent: any other replica
    ),
    # Body: the new replica set, [{"node_id": int, "core": int}, ...]; 503 while a move runs.
    Route(
        "POST",
        "/v1/partitions/{namespace}/{topic}/{partition}/replicas",
        "set_partition_replicas",
        path_params=_NTP,
    ),
    # Body: {"upsert": {name: value}, "remove": [name]}. Answers {"config_version": N};
    # upstream documents that model but declares the operation "void" (and dry runs answer
    # an empty body).
    Route(
        "PUT",
        "/v1/cluster_config",
        "patch_cluster_config",
        query_params={"force": Param("integer"), "dry_run": Param("integer")},
        answer="cluster_config_write_result",
        answer_model_only=True,
    ),
    # Retired: Redpanda moved leadership transfer under /v1/partitions/{namespace}/... in
    # 2021 (commit 3943f0db, "admin: add int. topic leadership transfer"). Known so that a
    # request to it is reported as retired rather than merely unknown.
    Route(
        "POST",
        "/v1/kafka/{topic}/{partition}/transfer_leadership",
        "kafka_transfer_leadership",
        path_params={"topic": "string", "partition": "integer"},
        query_params={"target": Param("integer")},
        retired="moved to /v1/partitions/{namespace}/{topic}/{partition}/transfer_leadership",
    ),
)

MODELS: dict[str, dict[str, Field]] = {
    "broker": {
        "node_id": Field("integer"),
        "num_cores": Field("integer"),
        "rack": Field("string", optional=True),
        "internal_rpc_address": Field("string"),
        "internal_rpc_port": Field("integer"),
        "membership_status": Field("string"),  # "active", "draining", "removed"
        "is_alive": Field("boolean"),
        "recovery_mode_enabled": Field("boolean"),
        "disk_space": Field("array", items="disk_space_info"),
        "version": Field("string"),
        "maintenance_status": Field("maintenance_status", optional=True),
        "in_fips_mode": Field("string"),  # "disabled", "permissive", "enabled"
    },
    "disk_space_info": {
        "path": Field("string"),
        "free": Field("integer"),
        "total": Field("integer"),
    },
    "maintenance_status": {
        "draining": Field("boolean"),
        "finished": Field("boolean"),
        "errors": Field("boolean"),
        "partitions": Field("integer"),
        "eligible": Field("integer"),
        "transferring": Field("integer"),
        "failed": Field("integer"),
    },
    "cluster_health_overview": {
        "is_healthy": Field("boolean"),
        "unhealthy_reasons": Field("array", items="string"),
        "controller_id": Field("integer"),  # -1 while no controller leader is elected
        "all_nodes": Field("array", items="integer"),
        "nodes_down": Field("array", items="integer"),
        "nodes_in_recovery_mode": Field("array", items="integer"),
        "leaderless_partitions": Field("array", items="string"),
        "leaderless_count": Field("integer"),
        "under_replicated_partitions": Field("array", items="string"),
        "under_replicated_count": Field("integer"),
        "bytes_in_cloud_storage": Field("integer"),
    },
    "partition": {
        "ns": Field("string"),
        "topic": Field("string"),
        "partition_id": Field("integer"),
        "status": Field("string"),  # "done", or "in_progress" while replicas move
        "leader_id": Field("integer"),
        "raft_group_id": Field("integer"),
        "replicas": Field("array", items="assignment"),
        "disabled": Field("boolean"),
    },
    "assignment": {
        "node_id": Field("integer"),
        "core": Field("integer"),
    },
    "cluster_config_write_result": {
        "config_version": Field("integer"),
    },
}

_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "integer": (int,),
    "string": (str,),
    "boolean": (bool,),
}
_QUERY_FORMS = {"integer": re.compile(r"-?[0-9]+"), "boolean": re.compile(r"true|false|0|1")}


def _is(value: Any, scalar: str) -> bool:
    if isinstance(value, bool) and scalar != "boolean":
        return False  # a JSON true is not an integer
    return isinstance(value, _PYTHON_TYPES[scalar])


class Contract:
    """Resolves requests against the stated routes; checks answers against the models."""

    def __init__(
        self,
        routes: tuple[Route, ...] = ROUTES,
        models: dict[str, dict[str, Field]] = MODELS,
    ) -> None:
        # Literal segments win over parameters, as in Redpanda's router.
        self.routes = sorted(routes, key=lambda r: -r.literal_segments)
        self.models = models

    def resolve(
        self, method: str, path: str, query: dict[str, list[str]]
    ) -> tuple[Route | None, dict[str, str], str | None]:
        """(route, path params, violation): violation is None when the request is stated."""
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
        missing = sorted(n for n, p in route.query_params.items() if p.required and n not in query)
        if missing:
            return route, params, f"{method} {path}: missing required query parameters {missing}"
        for name, values in query.items():
            form = _QUERY_FORMS.get(route.query_params[name].type)
            bad = [v for v in values if form is not None and not form.fullmatch(v)]
            if bad:
                kind = route.query_params[name].type
                return route, params, f"{method} {path}: query {name}={bad[0]!r} is not {kind}"
        return route, params, None

    def answer_problems(self, model: str, value: Any, where: str = "") -> list[str]:
        """Every way ``value`` breaks the named model: extra, missing and mistyped fields."""
        spec = self.models[model]
        if not isinstance(value, dict):
            return [f"{where or model}: not an object"]
        out = [f"{where}{key}: not in {model}" for key in value if key not in spec]
        for key, f in spec.items():
            if key not in value:
                if not f.optional:
                    out.append(f"{where}{key}: missing from {model}")
                continue
            out += self._value_problems(f.type, f.items, value[key], f"{where}{key}")
        return out

    def _value_problems(self, kind: str, items: str | None, value: Any, where: str) -> list[str]:
        if kind == "array":
            if not isinstance(value, list):
                return [f"{where}: not an array"]
            assert items is not None
            out = []
            for i, element in enumerate(value):
                out += self._value_problems(items, None, element, f"{where}[{i}]")
            return out
        if kind in self.models:
            return self.answer_problems(kind, value, f"{where}.")
        return [] if _is(value, kind) else [f"{where}: {value!r} is not {kind}"]
