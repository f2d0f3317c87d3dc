"""Pure views for ``lagpilot mcp``: events in, answers out (no clock, no I/O).

``join_actions`` folds the control and outcome topics into one record per action: what was
decided and why, what the actuator did, how many worker instances obeyed, and what its
verification found; requests and their verdicts are listed beside them. ``explain`` reads
one group on one topic: the incident (from the lag events), its cause and evidence (from
the actions' reasons, where diagnosis put them), the remedies with their outcomes and
verification, and what lagpilot would do next (from the cause's ladder and the mode).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pipeline.commands.tail import InstanceTally, TailFilter
from pipeline.decide import diagnosis as dg
from pipeline.decide.ladder import STEPS, Ladders
from pipeline.decide.policy import hot_partitions
from pipeline.decide.policy_config import PolicyConfig
from schemas import group_lag_from_dict

#: the actuator's results that end an action; "recorded"/"delegated" say it was noted
FINAL = frozenset({"applied", "failed", "rejected", "expired", "duplicate"})


def join_actions(
    events: Iterable[tuple[str, Mapping[str, Any]]], group: str | None = None
) -> dict[str, list[dict[str, Any]]]:
    """``{"actions": [...], "requests": [...]}`` from control and outcome events in order.

    ``group``: only actions about it (``tail``'s filter); outcomes, worker reports and
    verification join the action they name, when it is in the window.
    """
    keep = TailFilter([group] if group else ())
    tally = InstanceTally()
    actions: dict[str, dict[str, Any]] = {}
    requests: list[dict[str, Any]] = []
    answered: set[str] = set()
    for _topic, ev in events:
        kind = ev.get("event")
        if kind == "request_verdict":  # the first verdict of a request (a replay may add one)
            first = str(ev.get("request_id")) not in answered
            if first and (not group or ev.get("group") == group):
                answered.add(str(ev.get("request_id")))
                requests.append(_verdict_view(ev))
            continue
        if kind not in ("action", "outcome", "worker_outcome", "verification"):
            continue
        if kind == "verification":
            rec = actions.get(str(ev.get("action_id")))
            if rec is not None:
                rec["verification"].append(
                    _pick(
                        ev,
                        "result",
                        "why",
                        "cause",
                        "step",
                        "time_lag_at_apply_s",
                        "time_lag_now_s",
                        "at",
                    )
                )
            continue
        if kind == "action":
            if not keep(ev):  # the group filter of ``tail``; outcomes follow their action
                continue
            got = ev.get("reason")
            reason: Mapping[str, Any] = got if isinstance(got, Mapping) else {}
            actions[str(ev["id"])] = {
                "id": ev["id"],
                "type": ev.get("type"),
                "target": ev.get("target"),
                "mode": ev.get("mode"),
                "issued_at": ev.get("issued_at"),
                "params": ev.get("params"),
                "reason": reason,
                "cause": reason.get("cause"),
                "requested_by": reason.get("requested_by"),
                "outcomes": [],
                "applied_by": 0,
                "verification": [],
            }
            continue
        rec = actions.get(str(ev.get("action_id")))
        if rec is None:
            continue  # its action is older than the window
        if kind == "worker_outcome":
            rec["applied_by"] = tally.add(ev)
            continue
        detail = ev.get("reason") or (ev.get("error") or {}).get("message")
        rec["outcomes"].append(
            {
                "result": ev.get("result"),
                "detail": detail,
                "actuator": ev.get("actuator"),
                "at": ev.get("at"),
            }
        )
    return {"actions": list(actions.values()), "requests": requests}


def _pick(ev: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    return {k: ev.get(k) for k in keys}


def _verdict_view(ev: Mapping[str, Any]) -> dict[str, Any]:
    return _pick(
        ev,
        "request_id",
        "type",
        "target",
        "group",
        "topic",
        "requested_by",
        "result",
        "rail",
        "why",
        "mode",
        "action_id",
        "at",
    )


def state_of(action: Mapping[str, Any]) -> str:
    """One word for an action: the actuator's last result, else "pending" (or the mode)."""
    final = [o["result"] for o in action["outcomes"] if o["result"] in FINAL]
    if final:
        return str(final[-1])
    if action["outcomes"]:
        return str(action["outcomes"][-1]["result"])
    return "recommended" if action["mode"] == "recommend" else "pending"


INCIDENT_KEYS = (
    "status",
    "max_time_lag_s",
    "total_lag_offsets",
    "lag_rate_per_s",
    "partitions",
    "observed_at_ms",
)
PARTITION_KEYS = (
    "partition",
    "status",
    "lag_offsets",
    "time_lag_s",
    "lag_rate_per_s",
    "eta_drain_s",
    "owner",
)
HEALTH_KEYS = ("status", "state", "generation", "rebalances_per_min", "commits_stalled", "storm")
REMEDY_KEYS = (
    "id",
    "type",
    "target",
    "mode",
    "issued_at",
    "requested_by",
    "applied_by",
    "outcomes",
    "verification",
)


def explain(
    group: str,
    topic: str,
    lag: Mapping[str, Any],
    joined: Mapping[str, list[dict[str, Any]]],
    policy: PolicyConfig,
) -> dict[str, Any]:
    """The incident of ``group`` on ``topic``: status, cause and evidence, remedies, next.

    ``lag`` is ``reading.lag_status``'s document; ``joined`` is ``join_actions``'s. The
    cause is the decide stage's (in its actions' reasons) when it acted; else, while the
    group lags, the same rules (``pipeline.decide.diagnosis``) applied here to the latest
    summary and health (no baseline or producer rates: an inflow burst is not told apart),
    marked ``cause_source: "lag events"``.
    """
    summary = next((s for s in lag.get("groups", ()) if s["topic"] == topic), None)
    parts = [p for p in lag.get("partitions", ()) if p["topic"] == topic]
    worst = sorted(parts, key=lambda p: -p["time_lag_s"])[:5]
    health = next(iter(lag.get("group_health", ())), None)
    remedies = [
        {**_pick(a, *REMEDY_KEYS), "state": state_of(a)}
        for a in joined.get("actions", ())
        if a["reason"].get("topic") in (topic, None) and a["type"] not in ("halt", "resume")
    ]
    acted = [
        a for a in joined.get("actions", ()) if a.get("cause") and a["reason"].get("topic") == topic
    ]
    status = summary["status"] if summary else "UNKNOWN"
    cause, evidence, source = None, None, None
    if acted:
        cause, evidence, source = acted[-1]["cause"], acted[-1]["reason"].get("evidence"), "actions"
    elif summary is not None and status != "OK":
        found = _diagnose(summary, health, policy)
        cause, evidence, source = found.cause, found.evidence, "lag events"
    return {
        "group": group,
        "topic": topic,
        "status": status,
        "incident": None if summary is None else _pick(summary, *INCIDENT_KEYS),
        "worst_partitions": [_pick(p, *PARTITION_KEYS) for p in worst],
        "group_health": None if health is None else _pick(health, *HEALTH_KEYS),
        "cause": cause,
        "evidence": evidence,
        "cause_source": source,
        "remedies": remedies,
        "requests": list(joined.get("requests", ())),
        "next": next_step(
            group, status, cause, remedies, mode=str(policy.mode), ladders=policy.ladders
        ),
    }


def _diagnose(
    summary: Mapping[str, Any], health: Mapping[str, Any] | None, policy: PolicyConfig
) -> dg.Diagnosis:
    s = group_lag_from_dict(dict(summary))
    t = policy.thresholds_for(s.group, s.topic)
    hot = hot_partitions(s, t, policy.hot_ratio)
    cfg = policy.diagnosis_config(t)
    return dg.diagnose(s, t.time_lag_s * t.exit_ratio, hot, cfg, health=health)


def next_step(
    group: str,
    status: str,
    cause: str | None,
    remedies: list[dict[str, Any]],
    *,
    mode: str,
    ladders: Ladders,
) -> str:
    """What lagpilot would do next, in one sentence (from the ladder, the mode, the facts)."""
    if status == "UNKNOWN":
        return (
            "nothing: no lag event for this group and topic in the window (is the group "
            "watched, and the pipeline running?)"
        )
    if mode == "observe":
        steps = ladders.for_group(group, cause) if cause else ()
        would = f"; in act mode the {cause} ladder starts with {steps[0].action}" if steps else ""
        return f"nothing: the policy is in observe mode and publishes no action{would}"
    if cause is None:
        if status == "OK":
            return "nothing: lag is within its thresholds"
        return (
            "diagnose once the incident opens (lag above the enter level for enter_windows "
            "summaries), then take the first remedy of the cause's ladder"
        )
    steps = ladders.for_group(group, cause)
    if not steps:
        return f"nothing: the {cause} ladder has no step (wait for the group to catch up)"
    last = next((r for r in reversed(remedies) if r["type"] in STEPS), None)
    index = next((i for i, s in enumerate(steps) if last and s.action == last["type"]), -1)
    verdicts = last["verification"] if last else []
    if last is None or index < 0:
        step = steps[0]
        return f"{step.action} ({cause}'s first step): expects {step.expects}"
    if verdicts and verdicts[-1]["result"] == "verified":
        return (
            f"keep {last['type']} while the incident lasts (verified: "
            f"{verdicts[-1]['why']}); undo it when the incident closes"
        )
    following = steps[index + 1] if index + 1 < len(steps) else None
    if verdicts:  # no_effect
        if following is None:
            return f"{cause}'s ladder is exhausted after {last['type']}: alert only"
        how = " as a recommendation" if following.recommend else ""
        return f"escalate to {following.action}{how}: {last['type']} had no effect"
    step = steps[index]
    then = f"; if not, {following.action}" if following else "; if not, alert only"
    return (
        f"verify {last['type']} within {step.deadline_s:g} s of its outcome "
        f"(expects {step.expects}){then}"
    )
