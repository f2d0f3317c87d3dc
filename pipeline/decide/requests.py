"""Action requests from people and agents, through every rail. Pure: no clock, no I/O.

``lagpilot mcp``'s ``request_action`` publishes a signed ``action_request`` on
``lagpilot.requests``; the decide stage (``PolicyOperator``) verifies it and calls
``evaluate(request, state, config, now_ms)``, which returns the ``request_verdict`` and,
when the rails let it through in ``recommend`` or ``act`` mode, the action to publish.
A request is never applied as it is: it becomes an action of the policy's own shape, with
the policy's mode, TTL and version, and the same cooldowns and budget as the policy's
own decisions (a request spends them, and is refused when they are spent).

The rails, in the order they apply (the first that says no is the verdict's ``rail``):

1. ``expired``: a request older than its ``expires_at`` is not acted on late;
2. ``enabled``: the type is in the policy's ``[actions] enabled``;
3. ``params``: the action it becomes must pass ``action.v1.json`` (params per type);
4. ``allow_list``: throttles only allow-listed client ids (a prefix only by a ``*`` glob),
   partitions only on allow-listed topics, exactly as the policy and the actuator;
5. ``floor``: no throttle below ``throttle.floor_bytes_per_s``;
6. ``halt``: nothing while the kill switch covers the group (or ``all``);
7. ``mode``: in ``observe`` the policy tracks no incidents and publishes nothing: the verdict
   is a recommendation describing the action, and nothing is published;
8. ``cooldown``: the per-target cooldown of the type, shared with the policy's decisions;
9. ``budget``: new interventions spend the global per-minute budget; undoing one
   (``release_producer``, ``restore_partition``) does not, as in the policy;
10. ``hysteresis``: a new intervention needs an open incident on its group and topic
    (lag above the enter level for ``enter_windows`` summaries); an undo does not.

Then ``recommend`` publishes the action marked as a recommendation (``recommended``) and
``act`` publishes it to be applied (``issued``; the actuator's outcome follows).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.decide.policy import BUDGET_WINDOW_MS, PolicyState, build_action, halted
from pipeline.decide.policy_config import PolicyConfig
from schemas import ActionType, EventError, Mode, stable_id, validate

#: Undo actions: not budgeted and allowed without an incident (refusing an undo would keep
#: a change on the cluster, not protect it).
UNDO = frozenset({ActionType.RELEASE_PRODUCER, ActionType.RESTORE_PARTITION})


#: how long a request waits for the decide stage before it is refused as stale
REQUEST_TTL_MS = 30_000


def build_request(
    action_type: str,
    target: str,
    params: Mapping[str, Any],
    reason: str,
    *,
    requested_by: str,
    now_ms: int,
    ttl_ms: int = REQUEST_TTL_MS,
) -> dict[str, Any]:
    """An unsigned ``action_request`` (sign it with ``schemas.sign`` to publish)."""
    return {
        "event": "action_request",
        "v": 1,
        "id": stable_id("request", action_type, target, requested_by, now_ms),
        "type": action_type,
        "target": target,
        "params": dict(params),
        "reason": reason,
        "requested_by": requested_by,
        "requested_at": now_ms,
        "expires_at": now_ms + ttl_ms,
        "signature": "",
    }


@dataclass(frozen=True, slots=True)
class Refusal:
    rail: str
    why: str


def scope_of(params: Mapping[str, Any]) -> tuple[str | None, list[str]]:
    """The consumer group and the topics an action's params are about."""
    group = params.get("group") if isinstance(params.get("group"), str) else None
    found = params.get("topics")
    topics = [t for t in found if isinstance(t, str)] if isinstance(found, list) else []
    if isinstance(params.get("topic"), str):
        topics.append(params["topic"])
    return group, topics


def open_incidents(state: PolicyState, group: str | None, topics: list[str]) -> list[str]:
    """The open incidents ("group/topic") on these topics (any topic when none is named,
    as for scale_consumers) of this group (any group when none is named, as for throttles)."""
    found = []
    for key, inc in sorted(state.incidents.items()):
        g, _, t = key.partition("\x00")
        if inc.active and (not topics or t in topics) and (group is None or g == group):
            found.append(f"{g}/{t}")
    return found


def _rails_before_mode(
    req: Mapping[str, Any], action: dict[str, Any], state: PolicyState, cfg: PolicyConfig, now: int
) -> Refusal | None:
    kind, params = str(req["type"]), req["params"]
    if now > int(req["expires_at"]):
        return Refusal(
            "expired",
            f"the request expired {(now - req['expires_at']) / 1000:.1f} s "
            "before the decide stage read it; ask again",
        )
    if kind not in cfg.enabled:
        return Refusal(
            "enabled",
            f"{kind} is not in the policy's [actions] enabled "
            f"({', '.join(sorted(cfg.enabled)) or 'none'}); an operator must enable it "
            "in the policy file",
        )
    try:
        validate(action)
    except EventError as exc:
        return Refusal("params", f"the params do not make a valid {kind}: {exc}")
    if kind == ActionType.THROTTLE_PRODUCER:
        entity, name = str(params["entity"]), str(params["name"])
        if not cfg.may_throttle(name, entity):
            return Refusal(
                "allow_list",
                f"{entity} {name!r} is not allowed by the policy's "
                f"[allow] throttle_client_ids ({list(cfg.throttle_client_ids)}); "
                "an operator must add it (a prefix needs a glob ending in *)",
            )
        rate = int(params["producer_byte_rate"])
        if rate < cfg.throttle_floor_bytes_per_s:
            return Refusal(
                "floor",
                f"producer_byte_rate {rate} is below the policy's floor "
                f"{cfg.throttle_floor_bytes_per_s} B/s; ask for at least the floor",
            )
    if kind == ActionType.ADD_PARTITIONS and not cfg.may_add_partitions(str(params["topic"])):
        return Refusal(
            "allow_list",
            f"topic {params['topic']!r} is not allowed by the policy's "
            f"[allow] partition_topics ({list(cfg.partition_topics)}); an operator "
            "must add it",
        )
    group, _ = scope_of(params)
    if halted(state, group or "all") or (group is None and state.halted):
        scopes = ", ".join(sorted(state.halted))
        return Refusal(
            "halt",
            f"the kill switch is on (halted: {scopes}); nothing changes until an operator resumes",
        )
    return None


def _rails_after_mode(
    req: Mapping[str, Any], state: PolicyState, cfg: PolicyConfig, now: int
) -> Refusal | None:
    kind, target = str(req["type"]), str(req["target"])
    last = state.cooldowns.get(f"{kind}|{target}")
    cooldown_ms = cfg.cooldown_s(kind) * 1000
    if last is not None and now - last < cooldown_ms:
        left = (cooldown_ms - (now - last)) / 1000
        return Refusal(
            "cooldown",
            f"{kind} on {target} was issued {(now - last) / 1000:.1f} s "
            f"ago; its cooldown is {cooldown_ms / 1000:g} s: ask again in "
            f"{left:.0f} s",
        )
    if kind not in UNDO:
        recent = [t for t in state.budget_ms if t > now - BUDGET_WINDOW_MS]
        if len(recent) >= cfg.actions_per_minute:
            return Refusal(
                "budget",
                f"the action budget is spent ({len(recent)} of "
                f"{cfg.actions_per_minute} in the last minute); ask again when "
                "the oldest leaves the minute",
            )
        group, topics = scope_of(req["params"])
        if not open_incidents(state, group, topics):
            what = f"group {group}" if group else "any group"
            return Refusal(
                "hysteresis",
                f"no open incident for {what} on "
                f"{', '.join(topics) or 'any topic'}: lagpilot intervenes only "
                "while lag has stayed above the enter level for enter_windows "
                "summaries",
            )
    return None


def evaluate(
    req: Mapping[str, Any], state: PolicyState, cfg: PolicyConfig, now_ms: int
) -> tuple[list[dict[str, Any]], PolicyState]:
    """``[action?, verdict]`` for one verified ``action_request``, and the next state
    (``state`` is not modified; a published action spends cooldown and budget)."""
    now = max(now_ms, state.clock_ms)
    kind, target, params = str(req["type"]), str(req["target"]), dict(req["params"])
    group, topics = scope_of(params)
    reason = {
        "rule": "request",
        "why": str(req["reason"]),
        "requested_by": req["requested_by"],
        "request_id": req["id"],
        "group": group,
        "topic": topics[0] if topics else None,
    }
    mode = Mode.RECOMMEND if cfg.mode is Mode.OBSERVE else cfg.mode
    action = build_action(
        kind,
        target,
        params,
        {**reason, "budgeted": kind not in UNDO},
        mode=mode,
        issued_at_ms=now,
        expires_at_ms=now + int(cfg.action_ttl_s * 1000),
        policy_version=cfg.policy_version,
        window=("request", req["id"]),
    )
    action["signature"] = "0" * 64  # validated unsigned; the operator signs what it publishes

    def verdict(
        result: str,
        rail: str,
        why: str,
        published: dict[str, Any] | None,
        described: dict[str, Any] | None,
    ) -> dict[str, Any]:
        return {
            "event": "request_verdict",
            "v": 1,
            "request_id": req["id"],
            "type": kind,
            "target": target,
            "requested_by": req["requested_by"],
            "group": group,
            "topic": topics[0] if topics else None,
            "result": result,
            "rail": rail,
            "why": why,
            "mode": str(cfg.mode),
            "action_id": published["id"] if published else None,
            "action": described,
            "policy_version": cfg.policy_version,
            "at": now,
        }

    refused = _rails_before_mode(req, action, state, cfg, now)
    if refused is not None:
        return [verdict("refused", refused.rail, refused.why, None, None)], state
    unsigned = {**action, "signature": ""}
    if cfg.mode is Mode.OBSERVE:
        why = (
            "the policy is in observe mode: this is what it would publish, nothing was "
            "published (observe tracks no incidents, so cooldown and hysteresis were not "
            'checked); an operator sets mode = "recommend" or "act" to go further'
        )
        return [verdict("recommended", "mode", why, None, unsigned)], state
    refused = _rails_after_mode(req, state, cfg, now)
    if refused is not None:
        return [verdict("refused", refused.rail, refused.why, None, None)], state
    s = state.copy()
    s.clock_ms = now
    s.cooldowns[f"{kind}|{target}"] = now
    if kind not in UNDO:
        s.budget_ms.append(now)
    if cfg.mode is Mode.RECOMMEND:
        why = "every rail passed; the policy is in recommend mode: published as a recommendation"
        return [unsigned, verdict("recommended", "mode", why, unsigned, unsigned)], s
    why = "every rail passed; published in act mode for the actuator to apply"
    return [unsigned, verdict("issued", "passed", why, unsigned, unsigned)], s
