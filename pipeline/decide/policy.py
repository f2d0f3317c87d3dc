"""The policy: lag summaries in, unsigned action events out. Pure: no clock, no I/O.

``decide(summary, state, config, now_ms)`` sees one ``GroupLag`` (one group on one topic,
one per tick) and returns the actions to publish plus the next state. ``now_ms`` is the
summary's event time, so replaying the same inputs from the same state yields the same
actions with the same ids (``schemas.stable_id`` of type, target and decision window: the
time the incident or throttle episode began, never the wall clock).

The rails, in the order they apply:

1. hysteresis: ``enter_windows`` consecutive summaries above the enter level open an
   incident (one, when a partition is in STALL: the workers' progress reports confirm it),
   ``exit_windows`` below the exit level (``exit_ratio`` of it) close it; in between
   nothing changes, so lag oscillating around a threshold never flaps;
2. the kill switch: while a halt covers the group, decide tracks lag but returns nothing,
   not even renewals or releases; throttles end by their lease, the hands-off state a halt
   asks for;
3. per-target cooldowns on every action type that changes the cluster (renewals included);
4. a budget of actions per sliding minute on new interventions. Keeping or undoing a
   standing decision (renewal at the same rate, release, restore) is not budgeted:
   refusing it would change the cluster (a lapsed lease) rather than protect it;
5. throttles: only allow-listed producers of the lagging topic, never below the floor,
   leased, renewed while the incident lasts, released when it clears, and not throttled
   again within the throttle cooldown after a release.

Rules run in order of how easily their action is undone, so when the budget is tight the
cheapest to reverse wins: leased throttles, then worker-side spreads, then leadership
moves, then scale hints, then partitions (which never shrink again).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from pipeline.decide import remedies
from pipeline.decide.context import Ctx, accel
from pipeline.decide.diagnosis import behind
from pipeline.decide.policy_config import PolicyConfig, Thresholds
from pipeline.decide.rules import (
    RULES,
    hot_partition,
    hot_partitions,
    release_throttle,
    restore_spread,
)
from pipeline.decide.state import (
    ABOVE,
    BELOW,
    BETWEEN,
    BUDGET_WINDOW_MS,
    MAX_CONTROL_SKEW_MS,
    PRUNE_EVERY_MS,
    Incident,
    PolicyState,
    build_action,
    incident_key,
)
from schemas import ActionType, GroupLag, LagStatus, Mode
from schemas.halts import ACTIONS, halt_scope

#: what other modules and the tests import from here (the rules live in ``rules``)
__all__ = [
    "ABOVE",
    "BELOW",
    "BETWEEN",
    "BUDGET_WINDOW_MS",
    "RULES",
    "Incident",
    "PolicyState",
    "apply_control",
    "build_action",
    "decide",
    "halted",
    "hot_partition",
    "hot_partitions",
    "incident_key",
    "level",
    "step_hysteresis",
]  # fmt: skip


def _well_formed(s: GroupLag) -> bool:
    numbers = [s.max_time_lag_s, s.lag_rate_per_s, float(s.total_lag_offsets)]
    numbers += [x for w in s.worst for x in (w.time_lag_s, w.lag_accel_per_s2)]
    return (
        all(math.isfinite(x) for x in numbers)
        and s.total_lag_offsets >= 0
        and s.max_time_lag_s >= 0
        and s.topic_partitions >= 0
        and bool(s.group)
        and bool(s.topic)
    )


# -- measurement and hysteresis ------------------------------------------------------------


def level(s: GroupLag, t: Thresholds) -> str:
    """ABOVE the enter level, BELOW the exit level, or BETWEEN (the dead band). A partition's
    time lag counts while the model judges it at least ``t.min_status`` late."""
    exit_s = t.time_lag_s * t.exit_ratio
    gated = t.min_status != LagStatus.OK
    worst_s = max(
        (w.time_lag_s for w in s.worst if behind(w, 0.0, t.min_status)), default=0.0
    ) if gated else s.max_time_lag_s  # fmt: skip
    above_exit = worst_s >= exit_s or s.total_lag_offsets >= t.offset_lag * t.exit_ratio
    if (
        worst_s >= t.time_lag_s
        or s.total_lag_offsets >= t.offset_lag
        or (accel(s) >= t.accel_per_s2 and above_exit)
    ):
        return ABOVE
    return BETWEEN if above_exit else BELOW


def confirmed_stall(s: GroupLag) -> bool:
    """A partition the model calls STALL: data waits, the workers keep reporting, and the
    position has not moved beyond the stop floor. The workers' own reports confirm it, so
    waiting out more windows would only let the backlog grow (a hotspot climbs through
    WARN first and waits for its windows)."""
    return any(w.status is LagStatus.STALL for w in s.worst)


def step_hysteresis(
    inc: Incident,
    lvl: str,
    t: Thresholds,
    now: int,
    *,
    confirmed: bool = False,
    raw_above: bool = False,
) -> None:
    """N windows above enter open an incident, M consecutive below exit close it; one
    window above is enough when ``confirmed`` (a STALL the workers' reports confirm).
    ``raw_above``: the time lag is above enter though no partition is judged late now; it
    keeps the windows counted so far (a hot partition's status flickers between WARN and
    OK while the model learns its new, slower pace) without adding one."""
    if lvl == ABOVE:
        inc.above += 1
    elif not (raw_above and inc.above > 0):
        inc.above = 0
    inc.below = inc.below + 1 if lvl == BELOW else 0
    enter = 1 if confirmed else t.enter_windows
    if not inc.active and inc.above >= enter:
        inc.active, inc.since_ms = True, now
    elif inc.active and inc.below >= t.exit_windows:
        inc.active = False


def pool_group(group: str, config: PolicyConfig) -> bool:
    """A dedicated pool's own group (``<group>.pool.<pool>``, actuators/workers/handoff.py):
    it serves partitions handed to it, whose lag the owner group mirrors and is judged by;
    nothing acts on the pool's group itself (no worker would obey it)."""
    pool = config.spread_pool
    return pool is not None and group.endswith(f".pool.{pool}")


def halted(state: PolicyState, group: str) -> bool:
    return "all" in state.halted or group in state.halted


# -- housekeeping --------------------------------------------------------------------------


def _prune(c: Ctx, acting: bool) -> None:
    """Forget what is stale, so the state stays bounded; undo what a vanished group held.

    While halted (``acting`` false) nothing is undone: orphaned throttles end by their lease.
    """
    s, cfg, now = c.state, c.config, c.now
    forget_ms = cfg.forget_after_s * 1000
    s.budget_ms = [t for t in s.budget_ms if t > now - BUDGET_WINDOW_MS]
    for target in [t for t, th in s.throttles.items() if now >= th.lease_until_ms]:
        del s.throttles[target]  # the actuator removed the quota when the lease ended
    if now - s.pruned_ms < PRUNE_EVERY_MS:
        return  # a full sweep is O(state): once a second of event time is enough
    s.pruned_ms = now
    longest = max([cfg.cooldown_default_s, *cfg.cooldowns_s.values()]) * 1000
    s.cooldowns = {k: t for k, t in s.cooldowns.items() if now - t < longest}
    s.released_ms = {k: t for k, t in s.released_ms.items() if now - t < longest}
    s.brokers_seen = {b: t for b, t in s.brokers_seen.items() if now - t < forget_ms}
    s.partition_requests = {k: v for k, v in s.partition_requests.items() if now - v[1] < forget_ms}
    s.control_ms = {k: t for k, t in s.control_ms.items() if k in s.halted or now - t < forget_ms}
    gone = {k for k, i in s.incidents.items() if now - i.seen_ms >= forget_ms}
    for k in gone:
        del s.incidents[k]
    throttle_cooldown_ms = cfg.cooldown_s(ActionType.THROTTLE_PRODUCER) * 1000
    for target, th in list(s.throttles.items()):
        th.holders = [h for h in th.holders if h not in gone]
        if not th.holders and acting and now - th.issued_ms >= throttle_cooldown_ms:
            release_throttle(c, target, th, "no group lags on its topics any more")
    if acting:
        for target in [t for t, sp in s.spreads.items() if sp["incident"] not in s.incidents]:
            restore_spread(c, target, "group no longer seen")
    live_groups = {k.split("\x00", 1)[0] for k in s.incidents}
    s.scale_hints = {g: r for g, r in s.scale_hints.items() if g in live_groups}
    s.scale_issued_ms = {g: t for g, t in s.scale_issued_ms.items() if g in s.scale_hints}
    # what diagnosis keeps: bounded by the groups and producers seen lately
    s.baselines = {k: b for k, b in s.baselines.items() if k in s.incidents}
    s.stops_ms = {k: t for k, t in s.stops_ms.items() if k in s.incidents}
    # a hot partition's ladder is keyed "<incident key>\x00<partition>" (decide/remedies.py)
    s.ladders = {k: lad for k, lad in s.ladders.items()
                 if "\x00".join(k.split("\x00", 2)[:2]) in s.incidents}  # fmt: skip
    s.health = {g: h for g, h in s.health.items() if now - h.get("at", 0) < forget_ms}
    s.producer_rates = {k: r for k, r in s.producer_rates.items() if now - r[2] < forget_ms}


def decide(
    summary: GroupLag, state: PolicyState, config: PolicyConfig, now_ms: int
) -> tuple[list[dict[str, Any]], PolicyState]:
    """Unsigned actions for one summary, and the next state (``state`` is not modified).

    ``observe`` mode decides nothing at all. A malformed summary (NaN, negative lag, no
    group) is counted in ``skipped_inputs`` and changes nothing else.
    """
    if config.mode is Mode.OBSERVE:
        return [], state
    s = state.copy()
    if not _well_formed(summary):
        s.skipped_inputs += 1
        return [], s
    now = s.clock_ms = max(now_ms, s.clock_ms)  # event time never runs backwards here
    key = incident_key(summary.group, summary.topic)
    t = config.thresholds_for(summary.group, summary.topic)
    inc = s.incidents[key] = replace(s.incidents.get(key) or Incident(), seen_ms=now)
    c = Ctx(summary, config, s, now, t, inc, key)
    for w in summary.worst:
        if w.leader >= 0:
            s.brokers_seen[str(w.leader)] = now
    lvl = level(summary, t)
    raw_above = lvl != ABOVE and t.min_status != LagStatus.OK and (
        level(summary, replace(t, min_status=LagStatus.OK.value)) == ABOVE
    )  # fmt: skip
    step_hysteresis(inc, lvl, t, now, confirmed=confirmed_stall(summary), raw_above=raw_above)
    acting = not halted(s, summary.group)
    _prune(c, acting)
    if not acting or pool_group(summary.group, config):
        return [], s
    if config.diagnose:
        remedies.run(c)
        return c.actions, s
    for rule in RULES:
        rule(c)
    return c.actions, s


def apply_control(state: PolicyState, action: dict[str, Any], now_ms: int) -> PolicyState:
    """Fold a (verified) halt or resume from ``lagpilot.control`` into the state.

    Only ``actions`` halts stop the policy (schemas/halts.py): of every group (kept as
    ``"all"``) or of one group; ``resume`` of ``"all"`` lifts every halt. Events are
    ordered by ``issued_at``: one older than the last event for its scope (or for
    ``"all"``) is a replay and ignored, and one stamped more than ``MAX_CONTROL_SKEW_MS``
    after ``now_ms`` is ignored as a bad clock. Other action types leave the state as is.
    """
    kind = action.get("type")
    params = action.get("params")
    at = action.get("issued_at")
    if kind not in (ActionType.HALT, ActionType.RESUME) or not isinstance(params, dict):
        return state
    if not isinstance(params.get("scope"), str) or not isinstance(at, int):
        return state
    hs = halt_scope(params)
    if hs.kind != ACTIONS:
        return state  # a workload halt pauses the group's workers; the policy keeps deciding
    scope = hs.group or "all"
    if at > now_ms + MAX_CONTROL_SKEW_MS:
        return state
    if at < state.control_ms.get(scope, -1) or at < state.control_ms.get("all", -1):
        return state
    s = state.copy()
    s.control_ms[scope] = at
    if kind == ActionType.HALT:
        s.halted[scope] = at
    elif scope == "all":
        s.halted.clear()
    else:
        s.halted.pop(scope, None)
    return s
