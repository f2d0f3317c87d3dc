"""Diagnose, act by the cause's ladder, verify (pure: ``now`` is the summary's event time).

``run(c)`` replaces the independent rules of ``pipeline.decide.policy`` when ``diagnose`` is on:

1. upkeep, whatever the cause: leased throttles are renewed, stepped down or released,
   spreads restored once the incident clears, scale hints dropped;
2. while no incident is open, the group's usual rates (``Baseline``) are learnt;
3. when an incident opens it is diagnosed (``pipeline.decide.diagnosis``); until its ladder
   has acted the cause follows the evidence; after that it may be replaced only by a more
   severe one (a storm found after a hotspot), which restarts the ladder (``_replaces``);
4. the ladder's current step acts (``issued``); its actions carry the cause and evidence.
   A hotspot climbs the ladder once per hot partition (``_per_partition``): each partition
   is spread, watched, verified and, without effect, handed off on its own deadline;
5. an ``applied`` (or ``recorded``, or ``delegated`` to the SDK workers) outcome of one of
   the step's actions starts the watch (``inputs.fold_outcome``): the target's time lag at that
   moment is the reference;
6. ``verified`` as soon as the target's time lag is ``verify.improve_ratio`` of the
   reference or below the exit level; ``no_effect`` at the deadline (never before the
   action type's cooldown, so an undo never flaps with its action). No outcome by the
   deadline counts as ``no_effect`` too. A ``verification`` event records the verdict and
   its numbers; after ``no_effect`` the action is undone (release, restore) where it can
   be, and the next step acts. A ``failed``/``rejected``/``expired`` outcome moves to the
   next step at once.
"""

from __future__ import annotations

from typing import Any

from pipeline.decide import diagnosis as dg
from pipeline.decide.context import Ctx
from pipeline.decide.inputs import _reports, reporters, topic_producers
from pipeline.decide.ladder import Step
from pipeline.decide.policy_config import Producer
from pipeline.decide.rules import (
    hot_partitions,
    keep_spreads,
    recent_growth,
    release_throttle,
    renew_scale,
    restore_spread,
    rule_leadership,
    rule_partitions,
    rule_scale,
    rule_spread,
    rule_throttle,
    spread,
    time_lag_samples,
)
from pipeline.decide.state import PolicyState
from schemas import ActionType, LagStatus, Mode


def verification_event(lad: dict[str, Any], verdict: str, lag_now_s: float, now: int,
                       why: str) -> dict[str, Any]:  # fmt: skip
    """The ``verification`` event (``schemas/verification.v1.json``) on lagpilot.outcomes."""
    ref = lad.get("lag_at_apply_s")
    return {
        "event": "verification", "v": 1, "action_id": lad["ids"][0], "action_ids": lad["ids"],
        "action_type": lad["type"], "target": lad["target"], "group": lad["group"],
        "topic": lad["topic"], "cause": lad["cause"], "step": lad["step"],
        "result": verdict, "why": why,
        "time_lag_at_apply_s": None if ref is None else round(ref, 3),
        "time_lag_now_s": round(lag_now_s, 3),
        "applied_at": lad.get("applied_ms"), "deadline_at": lad["deadline_ms"], "at": now,
    }  # fmt: skip


# -- the ladder -----------------------------------------------------------------------------


def target_time_lag(c: Ctx, lad: dict[str, Any]) -> float:
    """The time lag the step is judged by: its partition's (the worst of its partitions, for
    a step that changed several at once: a storm member's hand-off), else the group's on
    the topic."""
    part = lad.get("partition")
    if part is None:
        return c.summary.max_time_lag_s
    return max(_partition_time_lag(c, p) for p in lad.get("partitions") or (part,))


def _partition_time_lag(c: Ctx, part: int) -> float:
    for w in c.summary.worst:
        if w.partition == part:
            return w.time_lag_s
    return min((w.time_lag_s for w in c.summary.worst), default=0.0)  # not among the worst


def _upkeep(c: Ctx, lad: dict[str, Any] | None) -> None:
    undo = set(lad.get("undo", ())) if lad else set()
    if undo:
        _release_undone(c, lad, undo)  # type: ignore[arg-type]
    held = [
        Producer(t.split(":", 1)[0], t.split(":", 1)[1], (c.summary.topic,))
        for t, th in c.state.throttles.items()
        if t not in undo and c.key in th.holders
    ]
    # a throttle nobody holds any more waits out its cooldown, then any summary releases it
    # (never adopts it: another group's incident has its own cause and remedy)
    cooldown_ms = c.config.cooldown_s(ActionType.THROTTLE_PRODUCER) * 1000
    for t, th in list(c.state.throttles.items()):
        if not th.holders and c.now - th.issued_ms >= cooldown_ms:
            release_throttle(c, t, th, "incident cleared")
    if held:
        rule_throttle(c, held, open_new=False)
    renew_scale(c)
    if not c.incident.active:
        rule_spread(c)  # restores
        rule_scale(c)  # drops the hint
    else:
        keep_spreads(c)


def run(c: Ctx) -> None:
    s, key = c.state, c.key
    lad = s.ladders.get(key)
    if any(w.status is LagStatus.STOP for w in c.summary.worst):
        s.stops_ms[key] = c.now  # seen before an incident opens too: a restart's first sign
    if not c.incident.active:
        if lad is None or lad.get("closed"):
            s.baselines[key] = dg.update_baseline(s.baselines.get(key), c.summary)
        if lad is not None:
            lad = s.ladders[key] = dict(lad)
            if not lad.get("closed"):
                for sub_key in _partition_ladders(s, key):  # each hot partition's, then drop
                    _verify_on_clear(c, dict(s.ladders.pop(sub_key)))
            c.diagnosis = {"cause": lad["cause"], "evidence": lad["evidence"]}
            _verify_on_clear(c, lad)
            lad["closed"] = True  # kept while it holds a throttle or spread (undone later)
        _upkeep(c, lad)
        if lad is not None and not _holds(c):
            s.ladders.pop(key, None)
        return
    t = c.thresholds
    exit_s = t.time_lag_s * t.exit_ratio
    hot = hot_partitions(c.summary, t, c.config.hot_ratio)
    held = [target for target, th in s.throttles.items() if key in th.holders]
    d = dg.diagnose(c.summary, exit_s, hot, c.config.diagnosis_config(t), now_ms=c.now,
                    health=s.health.get(c.summary.group), baseline=s.baselines.get(key),
                    producers=topic_producers(c), stopped_ms=s.stops_ms.get(key),
                    throttled=held)  # fmt: skip
    if lad is None or lad.get("closed") or _replaces(lad, d, c.incident.since_ms):
        for sub_key in _partition_ladders(s, key):  # a new ladder: the old one's rungs go
            del s.ladders[sub_key]
        # the incident's time lag goes on from the ladder it replaces
        kept = lad.get("time_lags", []) if lad is not None and not lad.get("closed") else []
        lad = s.ladders[key] = {"cause": d.cause, "evidence": d.evidence, "step": 0,
                                "phase": "ready", "since_ms": c.incident.since_ms,
                                "cause_since_ms": c.now,
                                "group": c.summary.group, "topic": c.summary.topic,
                                "time_lags": kept}  # fmt: skip
    else:
        lad = s.ladders[key] = dict(lad)
    # the worst time lag of the last seconds: how fast the group falls behind (rule_scale)
    lad["time_lags"] = time_lag_samples(lad.get("time_lags"), c.now, c.summary.max_time_lag_s)
    c.diagnosis = {"cause": lad["cause"], "evidence": lad["evidence"]}
    _upkeep(c, lad)
    steps = c.config.ladders.for_group(c.summary.group, lad["cause"])
    if not _confirmed(c, lad):
        return  # the cause has not held long enough to act on (``diagnosis.confirm_s``)
    if lad["cause"] == dg.HOTSPOT:
        _per_partition(c, lad, steps, exit_s, hot)
        c.diagnosis = {"cause": lad["cause"], "evidence": lad["evidence"]}
        return
    _judge(c, lad, steps, exit_s)
    if lad["phase"] == "ready" and lad["step"] < len(steps):
        _act(c, lad, steps[lad["step"]], hot)


def _confirmed(c: Ctx, lad: dict[str, Any]) -> bool:
    """A ladder that has not acted waits until its cause has held ``confirm_s`` (per cause):
    a slow group's first seconds may still turn out a burst (its producers' next two
    reports). A slow group acts only while its time lag is not falling (``recent_growth``):
    a backlog that drains (after a pause, a rebalance) needs no more consumers. Once it acted,
    it is judged whatever the cause does."""
    if lad.get("acted"):
        return True
    wait_ms = c.config.confirm_s.get(lad["cause"], 0.0) * 1000
    if c.now - lad.get("cause_since_ms", lad["since_ms"]) < wait_ms:
        return False
    if lad["cause"] == dg.SLOW:
        growth = recent_growth(lad.get("time_lags"), c.now)
        return growth is None or growth >= 0
    return True


# -- a hotspot climbs the ladder once per hot partition --------------------------------------


def partition_ladder_key(key: str, partition: int) -> str:
    """The state key of one hot partition's ladder inside incident ``key`` (group, topic)."""
    return f"{key}\x00{partition}"


def incident_of(ladder_key: str) -> str:
    """The incident key a ladder belongs to (itself, or its hot partition's incident)."""
    return "\x00".join(ladder_key.split("\x00", 2)[:2])


def _partition_ladders(s: PolicyState, key: str) -> list[str]:
    """The hot partitions' ladders of incident ``key``, in partition order (deterministic)."""
    subs = [k for k in s.ladders if k != key and incident_of(k) == key]
    return sorted(subs, key=lambda k: int(k.rsplit("\x00", 1)[1]))


def _per_partition(
    c: Ctx, lad: dict[str, Any], steps: tuple[Step, ...], exit_s: float, hot: list[Any]
) -> None:
    """Every hot partition gets its own ladder: spread it, verify it, hand it off if the
    spread did not help, each on its own deadline. A partition that turns hot later in the
    incident starts its own ladder then; none waits for another's verdict. The rails are
    the same for every partition's actions (``c.emit``: budget, cooldown, enabled); an action
    that a rail holds back is tried again on the next summary."""
    s = c.state
    lad["phase"] = "per_partition"
    for w in hot:
        sub_key = partition_ladder_key(c.key, w.partition)
        if sub_key not in s.ladders:
            s.ladders[sub_key] = {
                "cause": dg.HOTSPOT, "step": 0, "phase": "ready", "since_ms": lad["since_ms"],
                "group": c.summary.group, "topic": c.summary.topic, "of": w.partition,
                "evidence": dg.hotspot_evidence(c.summary, hot, c.config.hot_ratio,
                                                only=w.partition),
            }  # fmt: skip
    by_part = {w.partition: w for w in hot}
    for sub_key in _partition_ladders(s, c.key):
        sub = s.ladders[sub_key] = dict(s.ladders[sub_key])
        c.diagnosis = {"cause": sub["cause"], "evidence": sub["evidence"]}
        _judge(c, sub, steps, exit_s)
        if sub["phase"] == "ready" and sub["step"] < len(steps):
            w = by_part.get(sub["of"])
            _act(c, sub, steps[sub["step"]], [w] if w is not None else [])
        if sub.get("acted"):
            lad["acted"] = True


def _verify_on_clear(c: Ctx, lad: dict[str, Any]) -> None:
    """The incident cleared while the step was watched: it helped."""
    if lad.get("phase") == "watching":
        lag_now = target_time_lag(c, lad)
        c.actions.append(verification_event(lad, "verified", lag_now, c.now,
                                            "the incident cleared"))  # fmt: skip
        lad["phase"] = "verified"


def _replaces(lad: dict[str, Any], d: dg.Diagnosis, since_ms: int) -> bool:
    """Whether diagnosis ``d`` starts a new ladder in place of ``lad`` in the same incident.

    Until the ladder has acted, the diagnosis follows the evidence: an incident that opens
    while a group is still joining (no consumption yet: ``stalled``, which only alerts) is
    a hotspot a second later, and must not stay an alert. Once it acted, only a storm
    replaces it (members dying on what the remedy moved), or a burst a slow group's (the
    producers named after the scale step: their inflow was the cause). A passive cause
    changes nothing, and dropping the watch of a standing remedy (one summary with every
    worker busy, the rebalance a scale-up makes) would leave it unjudged; the evidence of
    other causes is often the remedy's own doing or the incident's (a spread's lanes load
    the other partitions; the heavy records that made a hotspot raised their producers'
    bytes), so the ladder goes on and is judged by its target's time lag.
    A burst read from partition rates alone never replaces a cause (``_unattributed_burst``).
    """
    if d.cause == lad["cause"] or lad["since_ms"] != since_ms or _unattributed_burst(d):
        return False
    if not lad.get("acted"):
        # until it acts the cause follows the evidence, but "nothing to do yet" is no
        # evidence against it: a hot partition's status flickers while the model learns its
        # pace, and the cause's confirmation (``confirm_s``) must not restart at each flicker
        return d.cause not in (dg.WATCHING, dg.DRAINING)
    if d.cause == dg.STORM:
        return lad["cause"] != dg.STORM
    # a named producer's burst found after a slow group's step: its inflow was the cause
    return d.cause == dg.BURST and lad["cause"] == dg.SLOW


def _unattributed_burst(d: dg.Diagnosis) -> bool:
    """A burst read from partition rates alone does not replace an open incident's cause:
    the usual rates froze when the incident opened, so a slow group's inflow that keeps
    rising would read as a burst, and with no producer named there is no one to throttle."""
    return d.cause == dg.BURST and d.evidence.get("source") == "partition_rates"


def _holds(c: Ctx) -> bool:
    return any(c.key in th.holders for th in c.state.throttles.values()) or any(
        sp["incident"] == c.key for sp in c.state.spreads.values()
    )


def _judge(c: Ctx, lad: dict[str, Any], steps: tuple[Step, ...], exit_s: float) -> None:
    phase = lad["phase"]
    if phase not in ("issued", "watching", "failed"):
        return
    lag_now = target_time_lag(c, lad)
    if phase == "issued":
        lad["last_lag_s"] = lag_now  # the reference once an outcome says applied
    if phase == "watching":
        ref, ratio = lad["lag_at_apply_s"], c.config.verify_improve_ratio
        if lag_now <= ratio * ref or lag_now < exit_s:
            # the effect must last ``verify.hold_s``: one good summary may be a lull
            since = lad.setdefault("better_since_ms", c.now)
            if c.now - since >= c.config.verify_hold_s * 1000:
                why = (
                    f"time lag <= {ratio:g} x {ref:.3f} s at apply, or below the exit level "
                    f"{exit_s:g} s, for {(c.now - since) / 1000:g} s (now {lag_now:.3f} s)"
                )
                c.actions.append(verification_event(lad, "verified", lag_now, c.now, why))
                lad["phase"] = "verified"
            return  # holding: judged when the hold completes or breaks, past the deadline too
        lad.pop("better_since_ms", None)
    if phase != "failed" and c.now < lad["deadline_ms"]:
        return
    why = lad.get("why") or (
        "no outcome by the deadline" if phase == "issued" else
        f"time lag {lag_now:.3f} s not below {c.config.verify_improve_ratio:g} x "
        f"{lad.get('lag_at_apply_s', lag_now):.3f} s by the deadline")  # fmt: skip
    c.actions.append(verification_event(lad, "no_effect", lag_now, c.now, why))
    _undo(c, lad, steps)
    lad["step"] += 1
    lad["phase"] = "ready" if lad["step"] < len(steps) else "exhausted"
    for k in (
        "ids",
        "lag_at_apply_s",
        "applied_ms",
        "why",
        "partition",
        "last_lag_s",
        "better_since_ms",
    ):
        lad.pop(k, None)


def _undo(c: Ctx, lad: dict[str, Any], steps: tuple[Step, ...]) -> None:
    """Release a throttle that did not help; restore a spread unless the next step escalates
    the same partition (a hand-off replaces the spread)."""
    if lad["type"] == ActionType.THROTTLE_PRODUCER:
        lad["undo"] = sorted({*lad.get("undo", ()), *lad.get("targets", ())})
        _release_undone(c, lad, set(lad["undo"]))
    elif lad["type"] == ActionType.SPREAD_PARTITION:
        nxt = steps[lad["step"] + 1].action if lad["step"] + 1 < len(steps) else ""
        if nxt not in ("handoff_partition", "handoff_member"):
            for target in lad.get("targets", ()):
                if target in c.state.spreads:
                    restore_spread(c, target, "no effect by the deadline")


def _release_undone(c: Ctx, lad: dict[str, Any], undo: set[str]) -> None:
    """Release throttles that had no effect, once their cooldown since the last throttle
    action has passed (a renewal and a release never flap); until then they are not renewed."""
    cooldown_ms = c.config.cooldown_s(ActionType.THROTTLE_PRODUCER) * 1000
    for target in sorted(undo):
        th = c.state.throttles.get(target)
        if th is None:
            undo.discard(target)
        elif c.now - th.issued_ms >= cooldown_ms:
            th.holders = [h for h in th.holders if h != c.key]
            if not th.holders:
                release_throttle(c, target, th, "no effect by the deadline")
            undo.discard(target)
    lad["undo"] = sorted(undo)


#: steps that move a consumer group's partitions between its members' lanes or add
#: partitions for more members: a share group's members already share every partition
#: (KIP-932) and scale past the partition count, so for one these steps are skipped
CONSUMER_GROUP_STEPS = frozenset(
    {"spread_partition", "handoff_partition", "handoff_member", "add_partitions"}
)


def _act(c: Ctx, lad: dict[str, Any], step: Step, hot: list[Any]) -> None:
    before = len(c.actions)
    mode = str(Mode.RECOMMEND) if step.recommend else None
    if step.action == "alert":
        lad["phase"] = "alert"
        return
    if c.summary.group_type == "share" and step.action in CONSUMER_GROUP_STEPS:
        lad["step"] += 1
        lad["skipped"] = [*lad.get("skipped", ()), f"{step.action}: a share group"]
        return
    if step.action == "spread_partition" and hot:
        spread(c, hot[0], pool=None)  # lanes here; the pool is the hand-off step's
    elif step.action in ("handoff_partition", "handoff_member"):
        if c.config.spread_pool is None:  # no pool to hand off to: skip the step
            lad["step"] += 1
            lad["skipped"] = [*lad.get("skipped", ()), f"{step.action}: no hotspot.pool"]
            return
        _handoff(c, lad, step, hot)
    elif step.action == "scale_consumers":
        rule_scale(c)
    elif step.action == "add_partitions":
        rule_partitions(c)
    elif step.action == "throttle_producer":
        _throttle_attributed(c)
    elif step.action == "transfer_leadership":
        rule_leadership(c)
    new = [a for a in c.actions[before:] if a.get("event") == "action"]
    if mode is not None:
        for a in new:
            a["mode"] = mode
    if not new:
        return  # nothing possible now (cooling, budget, not allowed): try again next tick
    lad["acted"] = True
    deadline_ms = int(step.deadline_s * 1000)
    cooldown_ms = int(c.config.cooldown_s(new[0]["type"]) * 1000)
    part = new[0]["params"].get("partition")
    lad.update(
        phase="issued",
        ids=[a["id"] for a in new],
        type=new[0]["type"],
        target=new[0]["target"],
        targets=[a["target"] for a in new],
        issued_ms=c.now,
        deadline_len_ms=max(deadline_ms, cooldown_ms),
        deadline_ms=c.now + 2 * max(deadline_ms, cooldown_ms),
    )  # waits for an outcome
    if part is not None and new[0]["type"] != ActionType.SCALE_CONSUMERS:
        lad["partition"] = part
        parts = [a["params"].get("partition") for a in new]
        if len(parts) > 1 and all(isinstance(p, int) for p in parts):
            lad["partitions"] = parts  # judged on the worst of them (target_time_lag)
    lad["last_lag_s"] = target_time_lag(c, lad)
    if mode is not None or c.config.mode is Mode.RECOMMEND:
        lad["phase"] = "recommended"  # nothing is applied: nothing to verify


def _handoff(c: Ctx, lad: dict[str, Any], step: Step, hot: list[Any]) -> None:
    """Hand partitions to the dedicated pool: the hottest (hotspot) or the storm member's."""
    g, topic = c.summary.group, c.summary.topic
    pool = c.config.spread_pool
    if step.action == "handoff_member":
        parts = list(lad["evidence"].get("partitions") or ())
    else:
        parts = [hot[0].partition] if hot else [lad["evidence"].get("partitions", [None])[0]]
    for part in [p for p in parts if isinstance(p, int)]:
        target = f"group:{g}/topic:{topic}/{part}"
        sp = c.state.spreads.get(target)
        if sp is not None and sp.get("pool") == pool:
            continue
        params = {"group": g, "topic": topic, "partition": part,
                  "lanes": c.config.spread_lanes, "pool": pool}  # fmt: skip
        reason = c.reason(step.action, partition=part, pool=pool)
        if step.action == "handoff_member":
            ev = lad["evidence"]
            reason["recommendation"] = (
                f"member {ev.get('member')} (client id {ev.get('client_id')}, host "
                f"{ev.get('client_host')}) keeps leaving: give it more memory or time"
            )
        # an escalation of a spread on the same partition: a new decision window, and the
        # spread's cooldown does not hold it back (it replaces, it does not oppose)
        if c.emit(ActionType.SPREAD_PARTITION, target, params, reason,
                  (c.incident.since_ms, "handoff", pool), cooled=sp is None):  # fmt: skip
            c.state.spreads[target] = {"incident": c.key, "since_ms": c.incident.since_ms,
                                       "issued_ms": c.now, **params}  # fmt: skip
            if step.action == "handoff_member":
                # kept when the incident clears: given back, the partition would kill its
                # members again (the storm ends because it is in the pool); it stays there
                # until an operator publishes its restore_partition (members fixed)
                c.state.spreads[target]["keep"] = True


def _throttle_attributed(c: Ctx) -> None:
    """Throttle the client ids whose rise made the burst, each to its usual rate (floored);
    with no culprit among the rate reports, the policy file's map, less the producers that
    report rates for the topic (they are judged by their rates: one whose reports stopped,
    or did not rise, is no culprit)."""
    rates = topic_producers(c)
    culprits = dg.culprits_of(rates) if rates else []
    if not culprits:
        reporting = reporters(c)
        rule_throttle(c, [p for p in c.config.producers if not _reports(p, reporting)])
        return
    floor, start = c.config.throttle_floor_bytes_per_s, c.config.throttle_start_bytes_per_s
    producers = [Producer("client-id", cid, (c.summary.topic,)) for cid in culprits]
    start_rates = {p.target: max(floor, min(start, int(rates[p.name][1]))) for p in producers}
    rule_throttle(c, producers, start_rates=start_rates)
