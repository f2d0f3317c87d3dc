"""The policy: lag summaries in, unsigned action events out. Pure: no clock, no I/O.

``decide(summary, state, config, now_ms)`` sees one ``GroupLag`` (one group on one topic,
one per tick) and returns the actions to publish plus the next state. ``now_ms`` is the
summary's event time, so replaying the same inputs from the same state yields the same
actions with the same ids (``schemas.stable_id`` of type, target and decision window: the
time the incident or throttle episode began, never the wall clock).

The rails, in the order they apply:

1. hysteresis: ``enter_windows`` consecutive summaries above the enter level open an
   incident, ``exit_windows`` below the exit level (``exit_ratio`` of it) close it; in
   between nothing changes, so lag oscillating around a threshold never flaps;
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
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from pipeline.decide.policy_config import PolicyConfig, Producer, Thresholds
from pipeline.decide.state import (
    ABOVE,
    BELOW,
    BETWEEN,
    BUDGET_WINDOW_MS,
    MAX_CONTROL_SKEW_MS,
    PRUNE_EVERY_MS,
    THRESHOLD_KEYS,
    Incident,
    PolicyState,
    Throttle,
    build_action,
    incident_key,
)
from schemas import ActionType, GroupLag, Mode
from schemas.halts import ACTIONS, halt_scope
from schemas.lag import WorstPartition

# -- one decision: the summary, the config, the state being built, the actions so far -------


@dataclass(slots=True)
class _Ctx:
    summary: GroupLag
    config: PolicyConfig
    state: PolicyState
    now: int
    thresholds: Thresholds
    incident: Incident
    key: str
    actions: list[dict[str, Any]] = field(default_factory=list)
    diagnosis: dict[str, Any] | None = None  # {"cause", "evidence"} when diagnosing

    def budget_left(self) -> bool:
        recent = [t for t in self.state.budget_ms if t > self.now - BUDGET_WINDOW_MS]
        return len(recent) < self.config.actions_per_minute

    def cooling(self, action_type: str, target: str) -> bool:
        last = self.state.cooldowns.get(f"{action_type}|{target}")
        cooldown_ms = self.config.cooldown_s(action_type) * 1000
        return last is not None and self.now - last < cooldown_ms

    def emit(
        self,
        action_type: ActionType,
        target: str,
        params: dict[str, Any],
        reason: dict[str, Any],
        window: Iterable[object],
        *,
        budgeted: bool = True,
        cooled: bool = True,
        also_cools: tuple[str, ...] = (),
        mode: str | None = None,
    ) -> bool:
        """Append the action if every gate passes; record its cooldowns and budget use."""
        if str(action_type) not in self.config.enabled:
            return False
        if cooled and any(self.cooling(action_type, t) for t in (target, *also_cools)):
            return False
        if budgeted and not self.budget_left():
            return False
        if cooled:
            for t in (target, *also_cools):
                self.state.cooldowns[f"{action_type}|{t}"] = self.now
        if budgeted:
            self.state.budget_ms.append(self.now)
        cfg, expires = self.config, self.now + int(self.config.action_ttl_s * 1000)
        reason = {**reason, "budgeted": budgeted}
        self.actions.append(build_action(action_type, target, params, reason,
            mode=mode or cfg.mode,
            issued_at_ms=self.now, expires_at_ms=expires, policy_version=cfg.policy_version,
            window=window))  # fmt: skip
        return True

    def reason(self, rule: str, **extra: Any) -> dict[str, Any]:
        """The numbers behind a decision, as an on-call engineer would want to read them."""
        s, t = self.summary, self.thresholds
        return {
            "rule": rule,
            "group": s.group,
            "topic": s.topic,
            "status": str(s.status),
            "time_lag_s": round(s.max_time_lag_s, 3),
            "offset_lag": s.total_lag_offsets,
            "lag_rate_per_s": round(s.lag_rate_per_s, 3),
            "accel_per_s2": round(_accel(s), 3),
            "thresholds": {k: getattr(t, k) for k in THRESHOLD_KEYS},
            "incident_since_ms": self.incident.since_ms,
            **(self.diagnosis or {}),
            **extra,
        }


def _accel(s: GroupLag) -> float:
    return max((w.lag_accel_per_s2 for w in s.worst), default=0.0)


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
    """ABOVE the enter level, BELOW the exit level, or BETWEEN (the dead band)."""
    above_exit = (
        s.max_time_lag_s >= t.time_lag_s * t.exit_ratio
        or s.total_lag_offsets >= t.offset_lag * t.exit_ratio
    )
    if (
        s.max_time_lag_s >= t.time_lag_s
        or s.total_lag_offsets >= t.offset_lag
        or (_accel(s) >= t.accel_per_s2 and above_exit)
    ):
        return ABOVE
    return BETWEEN if above_exit else BELOW


def step_hysteresis(inc: Incident, lvl: str, t: Thresholds, now: int) -> None:
    """N consecutive windows above enter open an incident, M below exit close it."""
    inc.above = inc.above + 1 if lvl == ABOVE else 0
    inc.below = inc.below + 1 if lvl == BELOW else 0
    if not inc.active and inc.above >= t.enter_windows:
        inc.active, inc.since_ms = True, now
    elif inc.active and inc.below >= t.exit_windows:
        inc.active = False


def halted(state: PolicyState, group: str) -> bool:
    return "all" in state.halted or group in state.halted


# -- the rules, in order; each one sees the whole context and may emit ---------------------


def rule_throttle(
    c: _Ctx,
    producers: Iterable[Producer] | None = None,
    *,
    open_new: bool = True,
    start_rates: dict[str, int] | None = None,
) -> None:
    """Throttle allow-listed producers of the lagging topic; renew, step down, release.

    ``producers``: the policy file's map unless given (the ladder passes the attributed
    client ids); ``open_new`` false only renews, steps down and releases what is held;
    ``start_rates``: a first rate per target (else ``throttle.start_bytes_per_s``).
    A release waits until the cooldown has passed since the last throttle action, so a
    throttle and its release never flap inside one cooldown (the lease still ends it).
    """
    cfg, s = c.config, c.state
    cooldown_ms = cfg.cooldown_s(ActionType.THROTTLE_PRODUCER) * 1000
    for p in cfg.producers if producers is None else producers:
        if not p.writes(c.summary.topic) or not cfg.may_throttle(p.name, p.entity):
            continue
        th = s.throttles.get(p.target)
        if not c.incident.active:
            if th is not None and c.key in th.holders:
                th.holders.remove(c.key)
            if th is not None and not th.holders and c.now - th.issued_ms >= cooldown_ms:
                _release(c, p.target, th, "incident cleared")
            continue
        lease_ms = int(cfg.throttle_lease_s * 1000)
        if th is None:
            if not open_new:
                continue
            released = s.released_ms.get(p.target, -cooldown_ms)
            if c.now - released < cooldown_ms:
                continue  # released recently: wait out the cooldown, do not flap
            start = (start_rates or {}).get(p.target, cfg.throttle_start_bytes_per_s)
            th = Throttle(start, c.now, 0, c.now, c.now + lease_ms, [c.key])
            if _throttle(c, p, th, th.rate, budgeted=True, why="incident open"):
                s.throttles[p.target] = th
            continue
        if c.key not in th.holders:
            th.holders = sorted([*th.holders, c.key])
        if c.now < th.issued_ms + max(cooldown_ms, lease_ms / 2):
            continue  # not due for renewal yet
        lower = max(cfg.throttle_floor_bytes_per_s, int(th.rate * cfg.throttle_step_ratio))
        if (
            c.summary.lag_rate_per_s > 0
            and lower < th.rate
            and _throttle(c, p, th, lower, budgeted=True, why="lag still growing: step down")
        ):
            continue
        _throttle(c, p, th, th.rate, budgeted=False, why="incident continues: renew lease")


def _throttle(c: _Ctx, p: Producer, th: Throttle, rate: int, *, budgeted: bool, why: str) -> bool:
    lease_s = c.config.throttle_lease_s
    topics = sorted({k.split("\x00", 1)[1] for k in th.holders} | {c.summary.topic})
    params = {"entity": p.entity, "name": p.name, "producer_byte_rate": rate,
              "lease_s": lease_s, "topics": topics}  # fmt: skip
    reason = c.reason("throttle_producer", why=why, previous_byte_rate=th.rate,
                      floor_bytes_per_s=c.config.throttle_floor_bytes_per_s)  # fmt: skip
    window = (th.since_ms, th.seq)
    if not c.emit(
        ActionType.THROTTLE_PRODUCER, p.target, params, reason, window, budgeted=budgeted
    ):
        return False
    th.rate, th.seq, th.issued_ms = rate, th.seq + 1, c.now
    th.lease_until_ms = c.now + int(lease_s * 1000)
    return True


def _release(c: _Ctx, target: str, th: Throttle, why: str) -> None:
    """Undo a throttle (exempt from budget and cooldown; remembered to stop re-throttling)."""
    entity, name = target.split(":", 1)
    reason = {"rule": "release_producer", "why": why, "throttle_since_ms": th.since_ms,
              "last_byte_rate": th.rate, **(c.diagnosis or {})}  # fmt: skip
    c.emit(ActionType.RELEASE_PRODUCER, target, {"entity": entity, "name": name}, reason,
           (th.since_ms,), budgeted=False, cooled=False)  # fmt: skip
    c.state.throttles.pop(target, None)
    c.state.released_ms[target] = c.now


def hot_partitions(s: GroupLag, t: Thresholds, ratio: float) -> list[WorstPartition]:
    """The partitions far worse than the rest: a hotspot, not a slow group.

    Hot: above the enter level and at least ``ratio`` times the time lag of the worst
    partition that is not above it (the "rest" baseline). At most a quarter of the topic's
    partitions (and at least one) may be hot: when more lag, the group is slow, and
    spreading is not the fix (scale_consumers is). ``worst`` comes ordered by status first,
    so it is re-ordered by time lag here.
    """
    if s.topic_partitions < 2 or len(s.worst) < 2:
        return []
    ranked = sorted(s.worst, key=lambda w: -w.time_lag_s)
    above = [w for w in ranked if w.time_lag_s >= t.time_lag_s]
    rest = ranked[len(above)] if len(above) < len(ranked) else None
    if rest is None or len(above) > max(1, s.topic_partitions // 4):
        return []
    return [w for w in above if w.time_lag_s >= ratio * rest.time_lag_s]


def hot_partition(s: GroupLag, t: Thresholds, ratio: float) -> WorstPartition | None:
    """The hottest of ``hot_partitions``, if any."""
    hot = hot_partitions(s, t, ratio)
    return hot[0] if hot else None


def rule_spread(c: _Ctx) -> None:
    """Tell the group's workers to spread a hot partition; restore it when the incident ends
    (once the spread's cooldown has passed: a spread and its restore never flap)."""
    s = c.state
    if not c.incident.active:
        cooldown_ms = c.config.cooldown_s(ActionType.SPREAD_PARTITION) * 1000
        for target in [t for t, sp in s.spreads.items() if sp["incident"] == c.key
                       and not sp.get("keep")  # a storm's hand-off (pipeline.remedies)
                       and c.now - sp.get("issued_ms", sp["since_ms"]) >= cooldown_ms]:  # fmt: skip
            _restore(c, target, "incident cleared")
        return
    for hot in hot_partitions(c.summary, c.thresholds, c.config.hot_ratio):
        _spread(c, hot)


_CONFIG_POOL = object()


def _spread(c: _Ctx, hot: WorstPartition, pool: Any = _CONFIG_POOL) -> None:
    """Spread over lanes; with a pool (``hotspot.pool`` unless given), hand it off there."""
    s, g, topic = c.state, c.summary.group, c.summary.topic
    target = f"group:{g}/topic:{topic}/{hot.partition}"
    if target in s.spreads:
        return
    pool = c.config.spread_pool if pool is _CONFIG_POOL else pool
    params = {"group": g, "topic": topic, "partition": hot.partition,
              "lanes": c.config.spread_lanes, "pool": pool}  # fmt: skip
    below = [w.time_lag_s for w in c.summary.worst if w.time_lag_s < hot.time_lag_s]
    next_lag = max(below, default=0.0)
    reason = c.reason("spread_partition", partition=hot.partition, hot_ratio=c.config.hot_ratio,
                      partition_time_lag_s=round(hot.time_lag_s, 3),
                      next_worst_time_lag_s=round(next_lag, 3))  # fmt: skip
    if c.emit(ActionType.SPREAD_PARTITION, target, params, reason, (c.incident.since_ms,)):
        s.spreads[target] = {"incident": c.key, "since_ms": c.incident.since_ms,
                             "issued_ms": c.now, **params}  # fmt: skip


def _restore(c: _Ctx, target: str, why: str) -> None:
    """Undo a spread or hand-off; a new spread of the target then waits out its cooldown."""
    sp = c.state.spreads.pop(target)
    params = {"group": sp["group"], "topic": sp["topic"], "partition": sp["partition"]}
    reason = {"rule": "restore_partition", "why": why, "spread_since_ms": sp["since_ms"],
              **(c.diagnosis or {})}  # fmt: skip
    if c.emit(ActionType.RESTORE_PARTITION, target, params, reason, (sp["since_ms"],),
              budgeted=False, cooled=False):  # fmt: skip
        c.state.cooldowns[f"{ActionType.SPREAD_PARTITION}|{target}"] = c.now


def rule_leadership(c: _Ctx) -> None:
    """Move one lagging partition off a broker that leads many of them, to one leading none."""
    if not c.incident.active:
        return
    t = c.thresholds
    lagging = [
        w for w in c.summary.worst if w.leader >= 0 and w.time_lag_s >= t.time_lag_s * t.exit_ratio
    ]
    counts = Counter(w.leader for w in lagging)
    if not counts:
        return
    broker, n = max(counts.items(), key=lambda kv: (kv[1], -kv[0]))
    if n < c.config.leadership_min_partitions:
        return
    known = c.config.broker_ids or tuple(sorted(int(b) for b in c.state.brokers_seen))
    free = [b for b in known if b not in counts]
    if not free:
        return
    worst = max((w for w in lagging if w.leader == broker), key=lambda w: w.time_lag_s)
    topic = c.summary.topic
    params = {"topic": topic, "partition": worst.partition, "target_broker": free[0],
              "from_broker": broker}  # fmt: skip
    reason = c.reason("transfer_leadership", from_broker=broker, lagging_partitions_led=n,
                      partition=worst.partition,
                      partition_time_lag_s=round(worst.time_lag_s, 3))  # fmt: skip
    c.emit(ActionType.TRANSFER_LEADERSHIP, f"topic:{topic}/{worst.partition}", params, reason,
           (c.incident.since_ms,), also_cools=(f"topic:{topic}",))  # fmt: skip


def replicas_needed(s: GroupLag, lag_per_replica: int) -> int:
    """KEDA's rule: total lag / lag per replica, rounded up (not yet capped)."""
    return max(1, math.ceil(s.total_lag_offsets / lag_per_replica))


def rule_scale(c: _Ctx) -> None:
    """Hint autoscalers to add consumers, never above the topic's partition count."""
    s, g = c.state, c.summary.group
    if not c.incident.active:
        if g in s.scale_hints and not any(
            i.active for k, i in s.incidents.items() if k.split("\x00", 1)[0] == g
        ):
            s.scale_hints.pop(g, None)
        return
    if c.summary.topic_partitions < 1:
        return
    needed = replicas_needed(c.summary, c.config.lag_per_replica)
    replicas = min(needed, c.summary.topic_partitions)
    if replicas <= s.scale_hints.get(g, 0):
        return
    params = {"group": g, "replicas": replicas, "partitions": c.summary.topic_partitions}
    reason = c.reason(
        "scale_consumers", replicas_needed=needed, lag_per_replica=c.config.lag_per_replica
    )
    if c.emit(
        ActionType.SCALE_CONSUMERS, f"group:{g}", params, reason, (c.incident.since_ms, replicas)
    ):
        s.scale_hints[g] = replicas


def rule_partitions(c: _Ctx) -> None:
    """Add partitions to an allow-listed topic when more consumers than partitions are needed."""
    topic, have = c.summary.topic, c.summary.topic_partitions
    if not c.incident.active or have < 1 or not c.config.may_add_partitions(topic):
        return
    needed = replicas_needed(c.summary, c.config.lag_per_replica)
    pending = c.state.partition_requests.get(topic)
    if needed <= have or (pending is not None and pending[0] > have):
        return  # consumers can still scale, or our last request has not landed yet
    total = min(
        c.config.partitions_max_total,
        max(have + 1, math.ceil(have * c.config.partitions_growth_ratio)),
    )
    if total <= have:
        return
    reason = c.reason("add_partitions", replicas_needed=needed, partitions=have,
                      max_total=c.config.partitions_max_total,
                      note="keyed ordering changes for new records of moved keys")  # fmt: skip
    params = {"topic": topic, "total": total, "current": have}
    if c.emit(ActionType.ADD_PARTITIONS, f"topic:{topic}", params, reason, (total,)):
        c.state.partition_requests[topic] = [total, c.now]


RULES: tuple[Callable[[_Ctx], None], ...] = (
    rule_throttle,  # 1. leased: ends by itself if we die
    rule_spread,  # 2. consumer-side, undone by restore
    rule_leadership,  # 3. cluster-side, undone by the balancer or another move
    rule_scale,  # 4. a hint; the autoscaler decides
    rule_partitions,  # 5. irreversible: partitions never shrink
)


# -- housekeeping --------------------------------------------------------------------------


def _prune(c: _Ctx, acting: bool) -> None:
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
            _release(c, target, th, "no group lags on its topics any more")
    if acting:
        for target in [t for t, sp in s.spreads.items() if sp["incident"] not in s.incidents]:
            _restore(c, target, "group no longer seen")
    live_groups = {k.split("\x00", 1)[0] for k in s.incidents}
    s.scale_hints = {g: r for g, r in s.scale_hints.items() if g in live_groups}
    # what diagnosis keeps: bounded by the groups and producers seen lately
    s.baselines = {k: b for k, b in s.baselines.items() if k in s.incidents}
    # a hot partition's ladder is keyed "<incident key>\x00<partition>" (pipeline.remedies)
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
    c = _Ctx(summary, config, s, now, t, inc, key)
    for w in summary.worst:
        if w.leader >= 0:
            s.brokers_seen[str(w.leader)] = now
    step_hysteresis(inc, level(summary, t), t, now)
    acting = not halted(s, summary.group)
    _prune(c, acting)
    if not acting:
        return [], s
    if config.diagnose:
        from pipeline.decide import remedies  # remedies builds on this module's rules

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
