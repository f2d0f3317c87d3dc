"""lagpilot mcp without a broker: the tools and resources it offers (in-process, with the
SDK's client), its argument errors, and its pure views (actions joined with outcomes,
the explanation of an incident and what lagpilot would do next)."""

from __future__ import annotations

from importlib import resources
from typing import Any

import anyio
import orjson
import pytest
from mcp import Client

from pipeline.decide.policy_config import config_from_mapping
from pipeline.serve.mcp import views
from pipeline.serve.mcp.server import Lagpilot, _parser, build_server, operator_key
from schemas import ConfigError

KEY = "unit-signing-key-0123456789"


def server(monkeypatch: pytest.MonkeyPatch, **env: str) -> Any:
    monkeypatch.setenv("LAGPILOT_SIGNING_KEY", KEY)
    for name in (
        "LAGPILOT_MCP_OPERATOR_KEY",
        "LAGPILOT_MCP_OPERATOR_KEY_FILE",
        "LAGPILOT_POLICY_FILE",
        "LAGPILOT_POLICY_MODE",
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return build_server(Lagpilot(_parser().parse_args(["--identity", "unit"])))


def in_process(srv: Any, body: Any) -> Any:
    async def go() -> Any:
        async with Client(srv) as client:
            return await body(client)

    return anyio.run(go)


def test_halt_and_resume_exist_only_with_an_operator_key(monkeypatch: pytest.MonkeyPatch) -> None:
    async def names(client: Client) -> set[str]:
        return {t.name for t in (await client.list_tools()).tools}

    base = {"lag_status", "explain", "actions", "group_health", "request_action"}
    assert in_process(server(monkeypatch), names) == base
    keyed = server(monkeypatch, LAGPILOT_MCP_OPERATOR_KEY="operator-key-0123456789")
    assert in_process(keyed, names) == base | {"halt", "resume"}


def test_a_short_operator_key_is_a_config_error_naming_the_variable() -> None:
    with pytest.raises(ConfigError, match="LAGPILOT_MCP_OPERATOR_KEY"):
        operator_key({"LAGPILOT_MCP_OPERATOR_KEY": "short"})
    assert operator_key({}) is None


def test_bad_arguments_are_tool_errors_that_name_the_argument(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def body(client: Client) -> Any:
        return [
            await client.call_tool(
                "request_action",
                {"type": "halt", "target": "scope:all", "params": {}, "reason": "x"},
            ),
            await client.call_tool(
                "request_action",
                {"type": "spread_partition", "target": "", "params": {}, "reason": "x"},
            ),
            await client.call_tool("group_health", {}),
        ]

    results = in_process(server(monkeypatch), body)
    assert all(r.is_error for r in results)
    for result, word in zip(results, ("type", "target", "group"), strict=True):
        assert word in result.content[0].text


def test_resources_are_the_runbook_the_policy_and_every_schema(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def body(client: Client) -> Any:
        listed = {str(r.uri) for r in (await client.list_resources()).resources}
        policy = await client.read_resource("lagpilot://policy")
        schema = await client.read_resource("lagpilot://schemas/action_request.v1.json")
        runbook = await client.read_resource("lagpilot://runbook")
        return listed, policy, schema, runbook

    srv = server(monkeypatch, LAGPILOT_POLICY_MODE="act")
    listed, policy, schema, runbook = in_process(srv, body)
    files = [e.name for e in resources.files("schemas").iterdir() if e.name.endswith(".json")]
    assert listed == {"lagpilot://runbook", "lagpilot://policy"} | {
        f"lagpilot://schemas/{name}" for name in files
    }
    rails = orjson.loads(policy.contents[0].text)
    assert rails["mode"] == "act" and "allow" in rails and rails["actions_per_minute"] >= 1
    text = resources.files("schemas").joinpath("action_request.v1.json").read_text()
    assert schema.contents[0].text == text
    assert runbook.contents[0].text.startswith("# lagpilot runbook")


ACTION = {
    "event": "action",
    "v": 1,
    "id": "a" * 32,
    "type": "spread_partition",
    "target": "group:g/topic:t/3",
    "mode": "act",
    "issued_at": 1000,
    "params": {"group": "g", "topic": "t", "partition": 3, "lanes": 4},
    "reason": {
        "rule": "ladder",
        "group": "g",
        "topic": "t",
        "cause": "hotspot",
        "evidence": {"partitions": [3], "ratio": 9.5},
    },
}
OTHER = {
    **ACTION,
    "id": "b" * 32,
    "params": {"group": "h", "topic": "t", "partition": 1},
    "reason": {"group": "h", "topic": "t"},
}


def events(*more: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = [
        ("lagpilot.control", ACTION),
        ("lagpilot.control", OTHER),
        (
            "lagpilot.outcomes",
            {
                "event": "outcome",
                "action_id": "a" * 32,
                "result": "delegated",
                "actuator": "x",
                "at": 1100,
            },
        ),
        (
            "lagpilot.outcomes",
            {"event": "worker_outcome", "action_id": "a" * 32, "instance": "w1", "did": "spread"},
        ),
        (
            "lagpilot.outcomes",
            {"event": "worker_outcome", "action_id": "a" * 32, "instance": "w2", "did": "spread"},
        ),
    ]
    return out + [("lagpilot.outcomes", e) for e in more]


def test_actions_are_joined_with_outcomes_instances_and_verification_by_group() -> None:
    verdict = {
        "event": "verification",
        "action_id": "a" * 32,
        "result": "no_effect",
        "why": "time lag 40 s, wanted <= 8 s",
        "cause": "hotspot",
        "step": 0,
        "at": 9,
    }
    joined = views.join_actions(events(verdict), group="g")
    [a] = joined["actions"]
    assert a["id"] == "a" * 32 and a["applied_by"] == 2 and a["cause"] == "hotspot"
    assert [o["result"] for o in a["outcomes"]] == ["delegated"]
    assert a["verification"][0]["result"] == "no_effect"
    assert views.state_of(a) == "delegated"
    assert len(views.join_actions(events())["actions"]) == 2


ACT, OBSERVE = config_from_mapping({"mode": "act"}), config_from_mapping({"mode": "observe"})
WORST = [
    {
        "partition": p,
        "lag_offsets": 900 if p == 3 else 5,
        "time_lag_s": 40.0 if p == 3 else 0.5,
        "lag_rate_per_s": 3.0 if p == 3 else 0.0,
        "lag_accel_per_s2": 0.0,
        "produce_rate_per_s": 10.0,
        "consume_rate_per_s": 2.0 if p == 3 else 10.0,
        "status": "WARN" if p == 3 else "OK",
        "leader": -1,
    }
    for p in (3, 0, 1)
]
LAG = {
    "groups": [
        {
            "event": "group_lag",
            "v": 1,
            "group": "g",
            "topic": "t",
            "status": "ERR",
            "max_time_lag_s": 40.0,
            "total_lag_offsets": 910,
            "lag_rate_per_s": 3.0,
            "partitions": 8,
            "topic_partitions": 8,
            "observed_at_ms": 5,
            "worst": WORST,
        }
    ],
    "partitions": [
        {
            "topic": "t",
            "partition": p,
            "status": "OK",
            "lag_offsets": p,
            "time_lag_s": float(p * 10),
            "lag_rate_per_s": 0.0,
            "eta_drain_s": None,
            "owner": None,
        }
        for p in range(4)
    ],
    "group_health": [],
}


def test_explain_names_cause_evidence_remedies_and_the_next_rung() -> None:
    verdict = {
        "event": "verification",
        "action_id": "a" * 32,
        "result": "no_effect",
        "why": "no fall",
        "cause": "hotspot",
        "step": 0,
        "at": 9,
    }
    got = views.explain("g", "t", LAG, views.join_actions(events(verdict), "g"), ACT)
    assert (got["status"], got["cause"]) == ("ERR", "hotspot")
    assert got["evidence"] == {"partitions": [3], "ratio": 9.5}
    assert [w["partition"] for w in got["worst_partitions"]][:2] == [3, 2]
    assert [r["state"] for r in got["remedies"]] == ["delegated"]
    assert got["next"].startswith("escalate to handoff_partition")
    pending = views.explain("g", "t", LAG, views.join_actions(events(), "g"), ACT)
    assert pending["next"].startswith("verify spread_partition within 30 s")
    assert "handoff_partition" in pending["next"]
    observe = views.explain("g", "t", LAG, views.join_actions(events(), "g"), OBSERVE)
    assert "observe mode" in observe["next"]
    unknown = views.explain("g", "nope", {"groups": [], "partitions": []}, {}, ACT)
    assert unknown["status"] == "UNKNOWN" and unknown["incident"] is None


def test_without_actions_explain_diagnoses_from_the_lag_events() -> None:
    got = views.explain("g", "t", LAG, {"actions": [], "requests": []}, OBSERVE)
    assert (got["cause"], got["cause_source"]) == ("hotspot", "lag events")
    assert got["evidence"]["partitions"] == [3]
    assert got["next"].endswith("in act mode the hotspot ladder starts with spread_partition")
    fresh = views.explain("g", "t", LAG, {"actions": [], "requests": []}, ACT)
    assert fresh["next"].startswith("spread_partition (hotspot's first step)")


def test_a_request_is_listed_once_under_its_group_even_when_refused() -> None:
    refused = {
        "event": "request_verdict",
        "request_id": "c" * 32,
        "type": "spread_partition",
        "target": "group:g/topic:t/3",
        "group": "g",
        "topic": "t",
        "result": "refused",
        "rail": "hysteresis",
        "why": "no open incident",
        "action": None,
    }
    replayed = {**refused, "rail": "expired", "why": "the request expired"}
    joined = views.join_actions(events(refused, replayed), group="g")
    assert [(r["request_id"], r["rail"]) for r in joined["requests"]] == [("c" * 32, "hysteresis")]
    assert (joined["requests"][0]["group"], joined["requests"][0]["topic"]) == ("g", "t")
    assert views.join_actions(events(refused), group="h")["requests"] == []


def test_an_unreachable_broker_is_one_sentence_and_the_server_keeps_serving(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LAGPILOT_SIGNING_KEY", KEY)
    args = _parser().parse_args(["--bootstrap", "127.0.0.1:1", "--connect-timeout-s", "1"])
    srv = build_server(Lagpilot(args))

    async def body(client: Client) -> Any:
        down = await client.call_tool("lag_status", {})
        tools = await client.list_tools()
        return down, tools

    down, tools = in_process(srv, body)
    assert down.is_error and "127.0.0.1:1" in down.content[0].text
    assert "cannot reach the broker" in down.content[0].text, down.content[0].text
    assert len(tools.tools) == 5
