"""Conformance: lagpilot's statement of the Redpanda Admin API against Redpanda's own.

``bench/support/redpanda_admin_contract.py`` states, in lagpilot's words, the routes the
client uses and the stub serves, and the fields of their answers. These tests check every
statement against Redpanda's Admin API description files, read where they live
(``tests/support/reference.py``: ``../shared/reference/redpanda-admin-api/``):

- every stated route exists upstream (method, path, operation name), in a file upstream
  still has; every path parameter has upstream's type; every query parameter exists
  upstream with the same type and required flag, and none upstream requires is left out;
- every stated answer is the one upstream declares for that operation;
- every stated answer model has exactly upstream's fields: none missing, none extra, none
  of another type (arrays by their item type, nested objects by model);
- a route stated as retired is one upstream deleted.

Where the reference folder is absent these tests report that they could not run and why
(under CI they fail: CI always has the folder).
"""

from __future__ import annotations

import dataclasses

import pytest
from support.redpanda_admin_upstream import SUBDIR, UpstreamApi, json_type, load
from support.reference import require

from bench.support.redpanda_admin_contract import MODELS, ROUTES, Field, Param, Route

SCALARS = {"integer", "string", "boolean"}


@pytest.fixture(scope="module")
def upstream() -> UpstreamApi:
    return load(require(SUBDIR))


def route_differences(route: Route, api: UpstreamApi) -> list[str]:
    """Every way a stated route differs from upstream's (empty: it conforms)."""
    where = f"{route.method} {route.template}"
    found = api.find(route.method, route.template)
    if not found:
        return [f"{where}: no such route upstream"]
    theirs = found[0]
    out = []
    if route.retired:
        if not theirs.deleted:
            out.append(f"{where}: stated as retired, but upstream still serves it")
        return out
    if theirs.deleted:
        out.append(f"{where}: upstream deleted it ({theirs.source})")
    if theirs.nickname != route.nickname:
        out.append(f"{where}: operation {route.nickname!r}, upstream {theirs.nickname!r}")
    if route.path_params != theirs.path_params:
        out.append(f"{where}: path parameters {route.path_params}, upstream {theirs.path_params}")
    for name, param in route.query_params.items():
        if name not in theirs.query_params:
            out.append(f"{where}: query parameter {name!r} does not exist upstream")
        elif (param.type, param.required) != theirs.query_params[name]:
            out.append(f"{where}: query {name!r} is {param}, upstream {theirs.query_params[name]}")
    for name, (_, required) in theirs.query_params.items():
        if required and name not in route.query_params:
            out.append(f"{where}: upstream requires query parameter {name!r}")
    out += _answer_differences(route, theirs.type, theirs.items, theirs.source, api)
    return out


def _answer_differences(
    route: Route, kind: str | None, items: str | None, source: str, api: UpstreamApi
) -> list[str]:
    where = f"{route.method} {route.template}"
    if route.answer_model_only and kind not in (None, "void"):
        return [f"{where}: stated as an undeclared answer, upstream declares {kind}"]
    if kind == "array":
        if not route.answer_is_array or route.answer != items:
            return [f"{where}: answers array of {route.answer}, upstream array of {items}"]
        return []
    if route.answer_is_array:
        return [f"{where}: stated as an array, upstream {kind}"]
    if kind in (None, "void"):
        # Upstream declares no answer. Only a route stated as answering a model upstream
        # documents in the same file, and declares as no operation's answer, may name one.
        if route.answer is None:
            return []
        declared = {r.type for r in api.routes} | {r.items for r in api.routes}
        if (
            not route.answer_model_only
            or api.model_sources.get(route.answer) != source
            or route.answer in declared
        ):
            return [f"{where}: answers {route.answer}, upstream declares no answer"]
        return []
    # Upstream names some answers after the operation: get_<model>.
    if route.answer not in (kind, kind.removeprefix("get_")):
        return [f"{where}: answers {route.answer}, upstream {kind}"]
    return []


def _their_field(spec: dict[str, object]) -> Field:
    kind = json_type(str(spec.get("type")))
    items = spec.get("items")
    item_kind = json_type(str(items.get("type"))) if isinstance(items, dict) else None
    return Field(str(kind), items=item_kind)


def model_differences(name: str, fields: dict[str, Field], api: UpstreamApi) -> list[str]:
    """Missing, extra and mistyped fields of a stated model (empty: it conforms)."""
    if name not in api.models:
        return [f"{name}: no such model upstream"]
    theirs = {key: _their_field(spec) for key, spec in api.models[name].items()}
    out = [f"{name}.{key}: upstream has it, the contract does not" for key in theirs
           if key not in fields]  # fmt: skip
    for key, ours in fields.items():
        if key not in theirs:
            out.append(f"{name}.{key}: not a field of upstream's {name}")
            continue
        if (ours.type, ours.items) != (theirs[key].type, theirs[key].items):
            their = f"{theirs[key].type}[{theirs[key].items}]"
            out.append(f"{name}.{key}: {ours.type}[{ours.items}] here, {their} upstream")
    return out


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r.method} {r.template}")
def test_every_stated_route_exists_upstream_as_stated(upstream: UpstreamApi, route: Route) -> None:
    assert route_differences(route, upstream) == []


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_stated_answer_model_has_exactly_upstreams_fields(
    upstream: UpstreamApi, name: str
) -> None:
    assert model_differences(name, MODELS[name], upstream) == []


def test_every_model_a_field_refers_to_is_stated() -> None:
    for name, fields in MODELS.items():
        for key, f in fields.items():
            for kind in (f.type, f.items):
                assert kind in (None, "array", *SCALARS, *MODELS), f"{name}.{key}: {kind}"
    for route in ROUTES:
        assert route.answer is None or route.answer in MODELS, route


def _replace(route: Route, **changes: object) -> Route:
    return dataclasses.replace(route, **changes)  # type: ignore[arg-type]


def test_the_route_comparison_finds_a_wrong_statement(upstream: UpstreamApi) -> None:
    transfer = next(r for r in ROUTES if r.nickname == "kafka_transfer_leadership")
    brokers = next(r for r in ROUTES if r.nickname == "get_brokers")
    config = next(r for r in ROUTES if r.nickname == "patch_cluster_config")
    wrong = [
        _replace(transfer, template="/v1/partitions/{namespace}/{topic}/{partition}/leader"),
        _replace(transfer, method="PUT"),
        _replace(transfer, nickname="transfer"),
        _replace(transfer, path_params={**transfer.path_params, "partition": "string"}),
        _replace(transfer, query_params={"target": Param("string")}),
        _replace(transfer, query_params={"target": Param("integer", required=True)}),
        _replace(transfer, query_params={"node": Param("integer")}),
        _replace(transfer, retired="gone"),
        _replace(brokers, answer="cluster_view"),
        _replace(brokers, answer_is_array=False),
        _replace(transfer, answer="partition"),
        _replace(transfer, answer="partition", answer_model_only=True),
        _replace(config, answer_model_only=False),
        _replace(brokers, answer_model_only=True),
        _replace(config, answer="broker"),
        Route(  # a route upstream deleted, stated as live
            "POST",
            "/v1/kafka/{topic}/{partition}/transfer_leadership",
            "kafka_transfer_leadership",
            {"topic": "string", "partition": "integer"},
        ),
    ]
    for route in wrong:
        assert route_differences(route, upstream), route


def test_the_model_comparison_finds_missing_extra_and_mistyped_fields(
    upstream: UpstreamApi,
) -> None:
    partition = dict(MODELS["partition"])
    missing = {k: v for k, v in partition.items() if k != "raft_group_id"}
    extra = {**partition, "leader": Field("integer")}
    mistyped = {**partition, "leader_id": Field("string")}
    wrong_items = {**partition, "replicas": Field("array", items="broker_shard")}
    not_array = {**partition, "replicas": Field("assignment")}
    assert model_differences("partition", missing, upstream) == [
        "partition.raft_group_id: upstream has it, the contract does not"
    ]
    assert model_differences("partition", extra, upstream) == [
        "partition.leader: not a field of upstream's partition"
    ]
    assert model_differences("partition", mistyped, upstream) == [
        "partition.leader_id: string[None] here, integer[None] upstream"
    ]
    assert model_differences("partition", wrong_items, upstream)
    assert model_differences("partition", not_array, upstream)
    assert model_differences("partitions", partition, upstream) == [
        "partitions: no such model upstream"
    ]
