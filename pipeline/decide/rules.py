"""The policy's rules, each a small pure function over one decision's context (``Ctx``).

Each rule sees the whole context and may emit; they run in the order of ``RULES``, the order
of how easily their action is undone (docs/policy.md). ``release_throttle``,
``restore_spread`` and ``spread`` are the undo and do steps the remedy ladders
(``pipeline.decide.remedies``) reuse; ``hot_partitions`` is the hotspot test diagnosis
reads.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from pipeline.decide.context import Ctx
from pipeline.decide.diagnosis import behind
from pipeline.decide.inputs import pressure
from pipeline.decide.policy_config import Producer, Thresholds
from pipeline.decide.state import Throttle
from schemas import ActionType, GroupLag, LagStatus
from schemas.lag import WorstPartition


def rule_throttle(
    c: Ctx,
    producers: Iterable[Producer] | None = None,
    *,
    open_new: bool = True,
    start_rates: dict[str, int] | None = None,
) -> None:
    """Throttle allow-listed producers of the lagging topic; renew, step, release.

    ``producers``: the policy file's map unless given (the ladder passes the attributed
    client ids); ``open_new`` false only renews, steps and releases what is held;
    ``start_rates``: a first rate per target (else ``throttle.start_bytes_per_s``).

    A producer that reports its pressure (``producer_rates`` v2: ``inputs.pressure``) is
    released once it no longer pushes against its throttle (its inflow is back under its
    budget) for ``QUIET_MS``, whatever the incident does; while it still pushes the throttle
    is kept (renewed) after the incident clears, and stepped up at each renewal while the
    consumers keep up, so the records it queued drain at what the consumers absorb. Without
    such reports, the throttle is released when the incident clears. A release waits until
    the cooldown has passed since the last throttle action, so a throttle and its release
    never flap inside one cooldown (the lease still ends it).
    """
    cfg, s = c.config, c.state
    cooldown_ms = cfg.cooldown_s(ActionType.THROTTLE_PRODUCER) * 1000
    for p in cfg.producers if producers is None else producers:
        if not p.writes(c.summary.topic) or not cfg.may_throttle(p.name, p.entity):
            continue
        th = s.throttles.get(p.target)
        push = _track_pressure(c, p, th)
        if th is not None and th.pushed and th.quiet_ms >= 0 and c.now - th.quiet_ms >= QUIET_MS:
            if c.now - th.issued_ms >= cooldown_ms:
                release_throttle(c, p.target, th, "its producer no longer pushes against it")
            continue
        if not c.incident.active:
            if th is not None and c.key in th.holders and th.pushed and push is not None:
                _renew(c, p, th, step_up=True)  # it still pushes: keep it, let it drain
                continue
            if th is not None and c.key in th.holders:
                th.holders.remove(c.key)
            if th is not None and not th.holders and c.now - th.issued_ms >= cooldown_ms:
                release_throttle(c, p.target, th, "incident cleared")
            continue
        if th is None:
            if not open_new:
                continue
            released = s.released_ms.get(p.target, -cooldown_ms)
            if c.now - released < cooldown_ms:
                continue  # released recently: wait out the cooldown, do not flap
            start = (start_rates or {}).get(p.target, cfg.throttle_start_bytes_per_s)
            lease_ms = int(cfg.throttle_lease_s * 1000)
            th = Throttle(start, c.now, 0, c.now, c.now + lease_ms, [c.key])
            if _throttle(c, p, th, th.rate, budgeted=True, why="incident open"):
                s.throttles[p.target] = th
            continue
        if c.key not in th.holders:
            th.holders = sorted([*th.holders, c.key])
        _renew(c, p, th, step_up=False)


#: a producer that pushed against its throttle and has not for this long is released
QUIET_MS = 3000


def _track_pressure(c: Ctx, p: Producer, th: Throttle | None) -> bool | None:
    """Fold the producer's latest pressure report into its throttle; None when it does not
    report pressure (no fresh v2 report, or a prefix entity: many clients)."""
    if th is None or p.entity != "client-id":
        return None
    push = pressure(c, p.name)
    if push:
        th.pushed, th.quiet_ms = True, -1
    elif push is not None and th.quiet_ms < 0:
        th.quiet_ms = c.now
    return push


def _renew(c: Ctx, p: Producer, th: Throttle, *, step_up: bool) -> None:
    """At its renewal time: step down while the lag grows (budgeted), step up while the
    consumers keep up and the producer still pushes (``step_up``), else renew the lease."""
    cfg = c.config
    due = max(cfg.cooldown_s(ActionType.THROTTLE_PRODUCER) * 1000, cfg.throttle_lease_s * 500)
    if c.now < th.issued_ms + due:
        return  # not due for renewal yet
    if step_up and th.quiet_ms < 0:
        higher = int(th.rate / cfg.throttle_step_ratio)
        _throttle(c, p, th, higher, budgeted=False,
                  why="consumers keep up and the producer still pushes: step up")  # fmt: skip
        return
    lower = max(cfg.throttle_floor_bytes_per_s, int(th.rate * cfg.throttle_step_ratio))
    if (
        not step_up
        and c.summary.lag_rate_per_s > 0
        and lower < th.rate
        and _throttle(c, p, th, lower, budgeted=True, why="lag still growing: step down")
    ):
        return
    _throttle(c, p, th, th.rate, budgeted=False, why="incident continues: renew lease")


def _throttle(c: Ctx, p: Producer, th: Throttle, rate: int, *, budgeted: bool, why: str) -> bool:
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


def release_throttle(c: Ctx, target: str, th: Throttle, why: str) -> None:
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

    Hot: consumed (not STOP), above the enter level (``behind`` it, with ``min_status``) and
    at least ``ratio`` times the time lag of the worst partition that keeps up (the "rest":
    not behind at the exit level, and its lag not growing: an overloaded group's partitions
    fall behind unevenly at first). Partitions behind at the exit level but not at the enter
    level are neither: a second hot partition on its way up must not stand as the rest of
    the first. At most a quarter of the topic's partitions (and at least one) may be behind:
    when more are, the group is slow, and spreading is not the fix (scale_consumers is).
    ``worst`` comes ordered by status first, so it is re-ordered by time lag here.
    """
    if s.topic_partitions < 2 or len(s.worst) < 2:
        return []
    # a partition nobody consumes (STOP: nothing moved for several usual intervals, or its
    # worker went silent: a member restarting or gone) is no hotspot: spreading needs a
    # worker that serves it; a member that is gone is a rebalance's business
    ranked = sorted((w for w in s.worst if w.status is not LagStatus.STOP),
                    key=lambda w: -w.time_lag_s)  # fmt: skip
    lagging = [w for w in ranked if behind(w, t.time_lag_s * t.exit_ratio, t.min_status)]
    rest = next((w for w in ranked if w not in lagging), None)
    if rest is None or len(lagging) > max(1, s.topic_partitions // 4) or growing(rest):
        return []  # more than a few behind, or the rest falls behind too: a slow group
    far = ratio * rest.time_lag_s
    return [w for w in lagging if behind(w, t.time_lag_s, t.min_status) and w.time_lag_s >= far]


#: a partition whose lag grows faster than this share of its produce rate falls behind (the
#: model's own growth rule, docs/lag-model.md): a healthy partition's commit sawtooth fits
#: to about zero over the model's window
GROWTH_RATIO = 0.05


def growing(w: WorstPartition) -> bool:
    """``w``'s lag keeps growing over the model's window (it is consumed slower than it is
    produced), however small its time lag still is."""
    return w.lag_rate_per_s > GROWTH_RATIO * max(w.produce_rate_per_s, 1.0)


def hot_partition(s: GroupLag, t: Thresholds, ratio: float) -> WorstPartition | None:
    """The hottest of ``hot_partitions``, if any."""
    hot = hot_partitions(s, t, ratio)
    return hot[0] if hot else None


def rule_spread(c: Ctx) -> None:
    """Tell the group's workers to spread a hot partition; restore it once the incident has
    stayed clear ``hotspot.restore_after_s`` (a spread that works clears its incident while
    the heavy records may still come) and the spread's cooldown has passed (a spread and
    its restore never flap)."""
    s = c.state
    mine = [(t, sp) for t, sp in s.spreads.items() if sp["incident"] == c.key]
    if not c.incident.active:
        cooldown_ms = c.config.cooldown_s(ActionType.SPREAD_PARTITION) * 1000
        hold_ms = c.config.spread_restore_after_s * 1000
        for target, sp in mine:
            if sp.get("keep"):  # a storm's hand-off (pipeline.decide.remedies)
                continue
            clear_ms = sp.setdefault("clear_ms", c.now)  # when the incident was first clear
            if (c.now - sp.get("issued_ms", sp["since_ms"]) >= cooldown_ms
                    and c.now - clear_ms >= hold_ms):  # fmt: skip
                restore_spread(c, target, "incident cleared")
        return
    keep_spreads(c)
    for hot in hot_partitions(c.summary, c.thresholds, c.config.hot_ratio):
        spread(c, hot)


def keep_spreads(c: Ctx) -> None:
    """The incident is on (again): its spreads stay, and their clear window starts afresh
    when it next clears."""
    for sp in c.state.spreads.values():
        if sp["incident"] == c.key:
            sp.pop("clear_ms", None)


_CONFIG_POOL = object()


def spread(c: Ctx, hot: WorstPartition, pool: Any = _CONFIG_POOL) -> None:
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


def restore_spread(c: Ctx, target: str, why: str) -> None:
    """Undo a spread or hand-off; a new spread of the target then waits out its cooldown."""
    sp = c.state.spreads.pop(target)
    params = {"group": sp["group"], "topic": sp["topic"], "partition": sp["partition"]}
    reason = {"rule": "restore_partition", "why": why, "spread_since_ms": sp["since_ms"],
              **(c.diagnosis or {})}  # fmt: skip
    if c.emit(ActionType.RESTORE_PARTITION, target, params, reason, (sp["since_ms"],),
              budgeted=False, cooled=False):  # fmt: skip
        c.state.cooldowns[f"{ActionType.SPREAD_PARTITION}|{target}"] = c.now


def rule_leadership(c: Ctx) -> None:
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


#: scale for this much more throughput than the inflow: capacity to drain the backlog too
DRAIN_HEADROOM = 1.5
#: the time lag's growth is read over the latest this many ms of an incident's summaries,
#: and only once they span at least GROWTH_MIN_SPAN_MS (a single step is noise)
GROWTH_SPAN_MS, GROWTH_MIN_SPAN_MS = 3_000, 1_000
#: growth read as at most this (a consumer 10x too slow): beyond, the partition count caps
MAX_GROWTH = 0.9


def time_lag_samples(
    samples: list[list[float]] | None, now_ms: int, time_lag_s: float
) -> list[list[float]]:
    """``samples`` ([ms, worst time lag s] pairs) with this summary's added and those older
    than ``GROWTH_SPAN_MS`` dropped, the newest beyond it kept as the span's start."""
    kept = [x for x in samples or () if x[0] < now_ms]
    old = [x for x in kept if now_ms - x[0] > GROWTH_SPAN_MS]
    return [*old[-1:], *(x for x in kept if now_ms - x[0] <= GROWTH_SPAN_MS), [now_ms, time_lag_s]]


def time_lag_growth(samples: list[list[float]] | None) -> float | None:
    """How fast the worst time lag grew over ``samples``, in seconds per second; None when
    they span less than ``GROWTH_MIN_SPAN_MS``. A group that consumes at ``c`` records/s
    what is produced at ``p`` reaches records produced ever longer ago: its time lag grows
    by ``1 - c / p`` each second, read at once, where fitted rates trail a ramp by their
    window."""
    if not samples or samples[-1][0] - samples[0][0] < GROWTH_MIN_SPAN_MS:
        return None
    (t0, lag0), (t1, lag1) = samples[0], samples[-1]
    return (lag1 - lag0) / ((t1 - t0) / 1000.0)


def recent_growth(samples: list[list[float]] | None, now_ms: int) -> float | None:
    """``time_lag_growth`` over the latest ``GROWTH_MIN_SPAN_MS`` of ``samples`` (from the
    newest sample at least that old): whether the group falls behind *now*, where the
    longer span still carries a backlog's rise after it began to drain."""
    if not samples:
        return None
    start = [x for x in samples if now_ms - x[0] >= GROWTH_MIN_SPAN_MS][-1:]
    return time_lag_growth([*start, *(x for x in samples if now_ms - x[0] < GROWTH_MIN_SPAN_MS)])


def replicas_needed(
    s: GroupLag, lag_per_replica: int, members: int | None = None, growth: float | None = None
) -> int:
    """The largest of KEDA's rule (total lag / lag per replica, rounded up) and, when the
    group consumes slower than it is produced, the rate rules: ``members`` x produce /
    consume rate (the group's worst partitions' fitted means), and ``members`` / (1 -
    ``growth``), the time lag's growth per second (``time_lag_growth``: the same ratio, as
    of the last seconds), each x ``DRAIN_HEADROOM``; not yet capped."""
    by_lag = max(1, math.ceil(s.total_lag_offsets / lag_per_replica))
    if not members:
        return by_lag
    produce = sum(w.produce_rate_per_s for w in s.worst)
    consume = sum(w.consume_rate_per_s for w in s.worst)
    need = float(by_lag)
    if consume > 0 and produce > consume:
        need = max(need, members * produce / consume * DRAIN_HEADROOM)
    if growth is not None and growth > 0:
        need = max(need, members / (1.0 - min(growth, MAX_GROWTH)) * DRAIN_HEADROOM)
    return math.ceil(need - 1e-9)


def rule_scale(c: Ctx) -> None:
    """Hint autoscalers to add consumers, never above the topic's partition count."""
    s, g = c.state, c.summary.group
    if not c.incident.active:
        if g in s.scale_hints and not any(
            i.active for k, i in s.incidents.items() if k.split("\x00", 1)[0] == g
        ):
            s.scale_hints.pop(g, None)
            s.scale_issued_ms.pop(g, None)
        return
    if c.summary.topic_partitions < 1:
        return
    members = (s.health.get(g) or {}).get("members")
    members = members if isinstance(members, int) and members > 0 else None
    # the time lag grows by 1 - c / p where p is the inflow when the records now consumed
    # were produced, seconds ago: on a ramp it trails the inflow, so the latest second's
    # growth counts where it is the higher
    lags = (s.ladders.get(c.key) or {}).get("time_lags")
    readings = [x for x in (time_lag_growth(lags), recent_growth(lags, c.now)) if x is not None]
    growth = max(readings) if readings else None
    needed = replicas_needed(c.summary, c.config.lag_per_replica, members, growth)
    replicas = min(needed, c.summary.topic_partitions)
    if replicas <= max(s.scale_hints.get(g, 0), members or 0):
        return
    params = {"group": g, "replicas": replicas, "partitions": c.summary.topic_partitions}
    reason = c.reason(
        "scale_consumers",
        replicas_needed=needed,
        lag_per_replica=c.config.lag_per_replica,
        members=members,
        time_lag_growth=None if growth is None else round(growth, 3),
    )
    if c.emit(
        ActionType.SCALE_CONSUMERS, f"group:{g}", params, reason, (c.incident.since_ms, replicas)
    ):
        s.scale_hints[g] = replicas
        s.scale_issued_ms[g] = c.now


#: a standing scale hint is published again this often while its incident lasts, so an
#: autoscaler that holds each hint for a lease (``lagpilot workers``: 60 s) keeps it
SCALE_RENEW_MS = 20_000


def renew_scale(c: Ctx) -> None:
    """While the incident lasts: raise the group's standing hint when the rates ask for more
    (``rule_scale``: an inflow still ramping up asks for more than it did at first), else
    publish it again (same replicas, a new id; not budgeted: it keeps a decision, as a
    throttle's renewal does)."""
    g = c.summary.group
    if not c.incident.active or g not in c.state.scale_hints:
        return
    before = c.state.scale_hints[g]
    rule_scale(c)
    if c.state.scale_hints[g] != before:
        return
    replicas = c.state.scale_hints.get(g)
    last = c.state.scale_issued_ms.get(g)
    if not c.incident.active or replicas is None or last is None:
        return
    if replicas > c.summary.topic_partitions:
        return  # another topic's hint (the group reads several): that incident renews it
    if c.now - last < SCALE_RENEW_MS:
        return
    params = {"group": g, "replicas": replicas, "partitions": c.summary.topic_partitions}
    reason = c.reason("scale_consumers", why="incident continues: renew the hint")
    if c.emit(ActionType.SCALE_CONSUMERS, f"group:{g}", params, reason,
              (c.incident.since_ms, replicas, c.now), budgeted=False):  # fmt: skip
        c.state.scale_issued_ms[g] = c.now


def rule_partitions(c: Ctx) -> None:
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


RULES: tuple[Callable[[Ctx], None], ...] = (
    rule_throttle,  # 1. leased: ends by itself if we die
    rule_spread,  # 2. consumer-side, undone by restore
    rule_leadership,  # 3. cluster-side, undone by the balancer or another move
    rule_scale,  # 4. a hint; the autoscaler decides
    rule_partitions,  # 5. irreversible: partitions never shrink
)
