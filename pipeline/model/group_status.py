"""A group's status and its ``group_health`` event, judged from what group health folded
(pure, ``now`` passed in).

``pipeline.model.group_health`` folds the coordinator's records into a :class:`Group`;
these functions judge it. The status rules, in severity order (the first that holds wins):

1. ``STORM``: the generation moved ``storm_rebalances`` times or more within
   ``storm_window_s`` while no commit of the group advanced for ``stall_s``, or while a
   partition held by a member that left in the window did not advance for ``stall_s``
   (one poisoned partition kills each member that takes it, and the rest of the group
   keeps committing). The member identity that left most often in the window (its
   instance id, else client id @ host: a restarted member comes back with a new member
   id) is named, with the stuck partitions (else the partitions it held). Evaluated at
   the record that moves the generation, so it is published with that record's batch
   (well inside a second).
2. ``EMPTY``: no members.
3. ``REBALANCING``: a KIP-848 group assigning or reconciling, or a generation moved
   within the last ``stall_s``.
4. ``OK``.

A group's rebalance times are the records' own timestamps (the coordinator's clock), so a
replay of an old log after a restart does not look like a storm now.

Each function takes the group's KIP-848 topic names (id -> name) to name what its members
hold; judging trims the group's window (rebalances, joins and leaves older than
``storm_window_s``) in place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.model.group_state import Group, HealthConfig, Member, group_state, topic_of


def _trim(g: Group, now_ms: int, cfg: HealthConfig) -> None:
    edge = now_ms - int(cfg.storm_window_s * 1000)
    while g.rebalances and g.rebalances[0] < edge:
        g.rebalances.popleft()
    while g.churn and g.churn[0][0] < edge:
        g.churn.popleft()


def _stalled(g: Group, now_ms: int, cfg: HealthConfig) -> bool:
    return now_ms - g.last_progress_ms >= cfg.stall_s * 1000


def _stuck(
    g: Group, now_ms: int, cfg: HealthConfig, topic_names: Mapping[str, str]
) -> dict[str, list[int]]:
    """Partitions (topic -> partitions) held by members that left in the window, whose
    commits did not advance for ``stall_s``: what the members keep leaving with."""
    edge = now_ms - cfg.stall_s * 1000
    out: dict[str, set[int]] = {}
    for _, kind, _, m in g.churn:
        if kind != "left":
            continue
        for key, parts in m.assignment.items():
            topic = topic_of(g, key, topic_names)
            if topic is None:
                continue
            for p in parts:
                if g.progress_ms.get((topic, p), g.last_progress_ms) <= edge:
                    out.setdefault(topic, set()).add(p)
    return {t: sorted(ps) for t, ps in sorted(out.items())}


def group_status(g: Group, now_ms: int, cfg: HealthConfig, topic_names: Mapping[str, str]) -> str:
    """The group's status now (the rules in the module docstring)."""
    _trim(g, now_ms, cfg)
    stalled = _stalled(g, now_ms, cfg)
    state = group_state(g)
    if len(g.rebalances) >= cfg.storm_rebalances and (
        stalled or _stuck(g, now_ms, cfg, topic_names)
    ):
        return "STORM"
    if state == "Empty":
        return "EMPTY"
    recent = g.rebalances and now_ms - g.rebalances[-1] < cfg.stall_s * 1000
    if state in ("Assigning", "Reconciling") or recent:
        return "REBALANCING"
    return "OK"


def _flapping(
    g: Group, now_ms: int, cfg: HealthConfig, topic_names: Mapping[str, str]
) -> dict[str, Any] | None:
    leaves: dict[str, list[Member]] = {}
    for _, kind, identity, m in g.churn:
        if kind == "left":
            leaves.setdefault(identity, []).append(m)
    if not leaves:
        return None
    identity, left = max(leaves.items(), key=lambda kv: (len(kv[1]), kv[0]))
    last = left[-1]
    stuck = _stuck(g, now_ms, cfg, topic_names)
    ids = (
        {topic_of(g, k, topic_names): k for _, _, _, m in g.churn for k in m.assignment}
        if g.protocol == "consumer"
        else {}
    )
    held = _assignment(g, last, topic_names)
    # name the stuck partitions this member held when it last left (a poison partition
    # kills whoever takes it); only when it held none of them, every stuck one
    last_held = {a["topic"]: set(a["partitions"]) for a in held}
    mine = {t: [p for p in ps if p in last_held.get(t, ())] for t, ps in stuck.items()}
    named = {t: ps for t, ps in mine.items() if ps} or stuck
    partitions = (
        [{"topic": t, "topic_id": ids.get(t), "partitions": ps} for t, ps in named.items()]
        if stuck
        else held
    )
    return {
        "identity": identity,
        "member_id": last.member_id,
        "client_id": last.client_id,
        "client_host": last.client_host,
        "instance_id": last.instance_id,
        "leaves": len(left),
        "partitions": partitions,
    }


def _assignment(g: Group, m: Member, topic_names: Mapping[str, str]) -> list[dict[str, Any]]:
    out = []
    for key, parts in sorted(m.assignment.items()):
        topic = topic_of(g, key, topic_names)
        topic_id = key if g.protocol == "consumer" else None
        out.append({"topic": topic, "topic_id": topic_id, "partitions": sorted(parts)})
    return out


def health_event(
    g: Group, now_ms: int, cfg: HealthConfig, topic_names: Mapping[str, str]
) -> dict[str, Any]:
    """The ``group_health`` event of one group now (``schemas/group_health.v1.json``);
    the group keeps its status and since when it holds (``status_since_ms``)."""
    status = group_status(g, now_ms, cfg, topic_names)
    if status != g.status:
        g.status, g.status_since_ms = status, now_ms
    stalled = _stalled(g, now_ms, cfg)
    state = group_state(g)
    window_s = cfg.storm_window_s
    last = g.rebalances[-1] if g.rebalances else None
    churn = [kind for _, kind, _, _ in g.churn]
    return {
        "event": "group_health",
        "v": 1,
        "group": g.name,
        "observed_at_ms": now_ms,
        "protocol": g.protocol,
        "state": state,
        "generation": g.generation,
        "status": status,
        "status_since_ms": g.status_since_ms,
        "members": [
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "instance_id": m.instance_id,
                "assignment": _assignment(g, m, topic_names),
            }
            for m in sorted(g.members.values(), key=lambda m: m.member_id)
        ],
        "window_s": window_s,
        "rebalances_per_min": round(len(g.rebalances) * 60.0 / window_s, 3),
        "rebalances_total": g.rebalances_total,
        "last_rebalance_ms": last,
        "since_last_rebalance_s": None if last is None else round((now_ms - last) / 1000, 3),
        "joined": churn.count("joined"),
        "left": churn.count("left"),
        "commits_stalled": stalled,
        "last_progress_ms": g.last_progress_ms or None,
        "consumption_stopped": stalled and status in ("STORM", "REBALANCING"),
        "storm": _flapping(g, now_ms, cfg, topic_names) if status == "STORM" else None,
    }
