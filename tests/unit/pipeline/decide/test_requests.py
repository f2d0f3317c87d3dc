"""Action requests through every rail (pipeline/decide/requests.py), and through the policy
operator: pure, no broker."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.decide.policy import Incident, PolicyState, incident_key
from pipeline.decide.policy_config import config_from_mapping
from pipeline.decide.policy_op import PolicyOperator
from pipeline.decide.requests import build_request, evaluate
from schemas import sign, validate, verify
from tests.support.state import MemoryState

KEY = b"r" * 32
T0 = 1_800_000_000_000
THROTTLE = {
    "entity": "client-id",
    "name": "ingest-1",
    "producer_byte_rate": 2_000_000,
    "lease_s": 60.0,
    "topics": ["docs"],
}
SPREAD = {"group": "workers", "topic": "docs", "partition": 3, "lanes": 4, "pool": None}


def config(mode: str, **extra: Any) -> Any:
    return config_from_mapping(
        {
            "mode": mode,
            "policy_version": "t-1",
            "allow": {"throttle_client_ids": ["ingest-*"], "partition_topics": ["docs"]},
            "budget": {"actions_per_minute": 2},
            **extra,
        }
    )


def request(kind: str, target: str, params: dict[str, Any], at: int = T0) -> dict[str, Any]:
    req = build_request(
        kind, target, params, "the parsers are drowning", requested_by="bot", now_ms=at
    )
    return sign(req, KEY)


def incident(group: str = "workers", topic: str = "docs", active: bool = True) -> PolicyState:
    s = PolicyState(clock_ms=T0)
    s.incidents[incident_key(group, topic)] = Incident(active=active, since_ms=T0 - 5000)
    return s


def verdict_of(out: list[dict[str, Any]]) -> dict[str, Any]:
    [v] = [e for e in out if e["event"] == "request_verdict"]
    validate(v)
    return v


def test_a_request_is_a_valid_signed_event() -> None:
    req = request("spread_partition", "group:workers/topic:docs/3", SPREAD)
    validate(req)
    verify(req, KEY)


def test_observe_describes_the_action_and_publishes_nothing() -> None:
    state = PolicyState()
    out, new = evaluate(
        request("spread_partition", "group:workers/topic:docs/3", SPREAD),
        state,
        config("observe"),
        T0,
    )
    v = verdict_of(out)
    assert [e["event"] for e in out] == ["request_verdict"]
    assert (v["result"], v["rail"], v["action_id"]) == ("recommended", "mode", None)
    assert v["action"]["type"] == "spread_partition" and "observe mode" in v["why"]
    assert new is state


@pytest.mark.parametrize("mode", ["observe", "recommend", "act"])
def test_a_client_outside_the_allow_list_is_refused_in_every_mode(mode: str) -> None:
    params = {**THROTTLE, "name": "crawler-7"}
    out, _ = evaluate(
        request("throttle_producer", "client-id:crawler-7", params), incident(), config(mode), T0
    )
    v = verdict_of(out)
    assert (v["result"], v["rail"], v["action"]) == ("refused", "allow_list", None)
    assert "'crawler-7'" in v["why"] and "throttle_client_ids" in v["why"]
    assert len(out) == 1


def test_a_prefix_needs_a_star_glob_and_partitions_need_their_allow_list() -> None:
    prefix = {**THROTTLE, "entity": "client-id-prefix", "name": "ingest-"}
    cfg = config("act", allow={"throttle_client_ids": ["ingest-"], "partition_topics": []})
    v = verdict_of(
        evaluate(
            request("throttle_producer", "client-id-prefix:ingest-", prefix), incident(), cfg, T0
        )[0]
    )
    assert v["rail"] == "allow_list"
    add = {"topic": "docs", "total": 16, "current": 8}
    v = verdict_of(evaluate(request("add_partitions", "topic:docs", add), incident(), cfg, T0)[0])
    assert v["rail"] == "allow_list" and "partition_topics" in v["why"]


def test_floor_enabled_params_and_expiry_refuse_with_their_rail() -> None:
    low = {**THROTTLE, "producer_byte_rate": 10}
    v = verdict_of(
        evaluate(
            request("throttle_producer", "client-id:ingest-1", low), incident(), config("act"), T0
        )[0]
    )
    assert v["rail"] == "floor" and "floor" in v["why"]
    only_spread = config("act", actions={"enabled": ["spread_partition"]})
    v = verdict_of(
        evaluate(
            request("throttle_producer", "client-id:ingest-1", THROTTLE),
            incident(),
            only_spread,
            T0,
        )[0]
    )
    assert v["rail"] == "enabled"
    bad = {"group": "workers", "topic": "docs"}  # no partition, no lanes
    v = verdict_of(
        evaluate(
            request("spread_partition", "group:workers/topic:docs/3", bad),
            incident(),
            config("act"),
            T0,
        )[0]
    )
    assert v["rail"] == "params" and "partition" in v["why"]
    old = request("spread_partition", "group:workers/topic:docs/3", SPREAD, at=T0 - 60_000)
    assert verdict_of(evaluate(old, incident(), config("act"), T0)[0])["rail"] == "expired"


def test_the_kill_switch_refuses() -> None:
    state = incident()
    state.halted["workers"] = T0 - 1
    v = verdict_of(
        evaluate(
            request("spread_partition", "group:workers/topic:docs/3", SPREAD),
            state,
            config("act"),
            T0,
        )[0]
    )
    assert (v["result"], v["rail"]) == ("refused", "halt") and "workers" in v["why"]


def test_no_open_incident_is_refused_by_hysteresis_but_an_undo_is_not() -> None:
    quiet = incident(active=False)
    v = verdict_of(
        evaluate(
            request("spread_partition", "group:workers/topic:docs/3", SPREAD),
            quiet,
            config("act"),
            T0,
        )[0]
    )
    assert v["rail"] == "hysteresis" and "no open incident for group workers" in v["why"]
    undo = {"group": "workers", "topic": "docs", "partition": 3}
    out, new = evaluate(
        request("restore_partition", "group:workers/topic:docs/3", undo), quiet, config("act"), T0
    )
    assert verdict_of(out)["result"] == "issued" and new.budget_ms == []


def test_act_issues_one_action_that_spends_cooldown_and_budget() -> None:
    req = request("spread_partition", "group:workers/topic:docs/3", SPREAD)
    out, new = evaluate(req, incident(), config("act"), T0)
    action, v = out
    assert (v["result"], v["rail"], v["action_id"]) == ("issued", "passed", action["id"])
    validate(sign(action, KEY))
    assert action["mode"] == "act" and action["reason"]["requested_by"] == "bot"
    assert action["reason"]["request_id"] == req["id"] and action["policy_version"] == "t-1"
    assert new.budget_ms == [T0] and new.cooldowns["spread_partition|group:workers/topic:docs/3"]
    again = request("spread_partition", "group:workers/topic:docs/3", SPREAD, at=T0 + 1000)
    v2 = verdict_of(evaluate(again, new, config("act"), T0 + 1000)[0])
    assert v2["rail"] == "cooldown" and "ask again in 29 s" in v2["why"]


def test_the_budget_is_shared_with_the_policy() -> None:
    state = incident()
    state.budget_ms = [T0 - 1000, T0 - 500]  # two of two spent by the policy this minute
    v = verdict_of(
        evaluate(
            request("throttle_producer", "client-id:ingest-1", THROTTLE), state, config("act"), T0
        )[0]
    )
    assert v["rail"] == "budget" and "2 of 2" in v["why"]


def test_recommend_publishes_a_recommendation() -> None:
    out, _ = evaluate(
        request("throttle_producer", "client-id:ingest-1", THROTTLE),
        incident(),
        config("recommend"),
        T0,
    )
    action, v = out
    assert action["mode"] == "recommend" and v["result"] == "recommended"


def test_the_operator_verifies_signs_and_answers() -> None:
    op = PolicyOperator(config("act"), KEY)
    store: Any = MemoryState()
    store.set("state", incident().to_dict())
    forged = {
        **request("spread_partition", "group:workers/topic:docs/3", SPREAD),
        "requested_by": "someone else",
    }
    assert op(forged, "policy", T0, None, store) == [] and op.rejected_requests == 1
    out = op(
        request("spread_partition", "group:workers/topic:docs/3", SPREAD), "policy", T0, None, store
    )
    action, v = out
    verify(action, KEY)
    assert v["action"] == action and v["result"] == "issued"
    assert store.get("state")["budget_ms"] == [T0]  # saved: a restart keeps what it spent


def test_in_observe_mode_the_operator_only_answers_requests() -> None:
    assert not PolicyOperator(config("observe"), KEY).decides
    assert PolicyOperator(config("recommend"), KEY).decides


def test_a_group_wide_request_needs_an_open_incident_of_that_group_on_any_topic() -> None:
    scale = {"group": "workers", "replicas": 4, "partitions": 8}
    out, _ = evaluate(
        request("scale_consumers", "group:workers", scale), incident(), config("act"), T0
    )
    assert verdict_of(out)["result"] == "issued"
    other = {**scale, "group": "crawlers"}
    v = verdict_of(
        evaluate(
            request("scale_consumers", "group:crawlers", other), incident(), config("act"), T0
        )[0]
    )
    assert v["rail"] == "hysteresis" and "group crawlers on any topic" in v["why"]
