"""Why a group lags: one cause per incident, with its evidence as numbers (pure, no clock).

``diagnose`` reads what is already on lagpilot's topics: the ``group_lag`` summary (its
worst partitions' lag, rates, time lag, status and leader), the group's latest
``group_health`` event, and the per-client producer rates of the topic (``producer_rates``,
folded by ``inputs.fold_producer_rate``). A partition is *behind* when its time lag is at
the exit level and the model judges it late against its own cadence (``min_status``:
``behind``). The rules, in severity order (the first that holds wins):

1. ``stalled``: the group lags and none of its partitions, or none of those behind, is
   consumed (STOP; members or not): a person must look (a member restarting shows so for
   a moment, then ``rebalancing`` while its partitions drain);
2. ``rebalance_storm``: group health says STORM (generation churn while commits stall)
   and one member keeps leaving (``MIN_STORM_LEAVES`` times in the window: a rollout or a
   member joining and leaving moves the generation as often, each member leaving once);
3. ``rebalancing``: the group's generation moved within ``settle_s``, or one of its
   partitions is not consumed at all (STOP: a member restarting, leaving, gone) or was
   within ``settle_s``: its lag is the membership change's own (partitions wait while they
   move, then drain); nothing acts until it settles;
4. ``inflow_burst``: more than a few partitions behind, and the produce rate is
   ``burst_ratio`` times its usual level (a producer's: sustained over two reports) while
   the consumers hold at least ``hold_ratio`` of their usual rate (the producers changed,
   not the consumers);
5. ``broker_skew``: one broker leads at least ``skew_min_partitions`` of the partitions
   behind, and the partitions other brokers lead keep up;
6. ``hotspot``: a few partitions far behind their siblings while the rest keep up
   (``rules.hot_partitions``);
7. ``slow_group``: more than a few partitions are behind (a quarter of the topic's, or
   every partition the summary names) and the group clearly consumes slower than the topic
   is produced (``falls_behind``);
8. ``watching``: a few partitions behind, not (yet) far beyond the rest, or a throttle of
   the topic's producers is held (its steps probe what the consumers absorb): nothing to
   do until it is a hotspot or a slow group, or the throttle's own rule steps it;
9. ``draining``: none of the above: lag is high but shrinking; nothing to do.

"Usual" is a ``Baseline``: an exponential mean of the per-partition produce and consume
rates (over the summary's worst partitions) taken while the group is not in an incident.
From partition rates alone (no ``producer_rates``), a burst needs ``MIN_BASELINE_SAMPLES``
summaries of baseline and no hot partitions (a rise on a few partitions is a hotspot).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from schemas import GroupLag, LagStatus
from schemas.lag import SEVERITY as STATUS_SEVERITY
from schemas.lag import WorstPartition

STALLED, STORM, REBALANCING, BURST, SKEW, HOTSPOT, SLOW, WATCHING, DRAINING = (
    "stalled",
    "rebalance_storm",
    "rebalancing",
    "inflow_burst",
    "broker_skew",
    "hotspot",
    "slow_group",
    "watching",
    "draining",
)
#: Causes in severity order; a cause may be replaced during an incident only by one before it.
CAUSES: tuple[str, ...] = (STALLED, STORM, REBALANCING, BURST, SKEW, HOTSPOT, SLOW, WATCHING,
                           DRAINING)  # fmt: skip
#: a member that left this often in the storm window keeps leaving (the storm's remedy hands
#: off its partitions); one that left once is a restart, a rollout's step
MIN_STORM_LEAVES = 2
#: causes that change nothing: they never replace a ladder that acted (pipeline.decide.remedies)
PASSIVE: frozenset[str] = frozenset({STALLED, REBALANCING, WATCHING, DRAINING})
SEVERITY = {c: i for i, c in enumerate(CAUSES)}
BASELINE_ALPHA = 0.1
#: summaries a usual rate needs before it can name a burst (the model's rates ramp up over
#: its window after a start: an early mean is too low)
MIN_BASELINE_SAMPLES = 60
#: reports (one a second) a producer's usual rate is the plain mean of, before its rate
#: can name a burst (its first second is often partial)
RATE_WARMUP_REPORTS = 5


@dataclass(frozen=True, slots=True)
class DiagnosisConfig:
    burst_ratio: float = 2.0
    hold_ratio: float = 0.7
    skew_min_partitions: int = 2
    hot_ratio: float = 4.0
    min_status: str = "OK"
    settle_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Diagnosis:
    cause: str
    evidence: dict[str, Any]


def behind(w: WorstPartition, level_s: float, min_status: str = "OK") -> bool:
    """Partition ``w`` is at least ``level_s`` behind and the model judges it at least
    ``min_status`` late (``OK``: any partition at that time lag)."""
    return (
        w.time_lag_s >= level_s
        and STATUS_SEVERITY[w.status] >= STATUS_SEVERITY[LagStatus(min_status)]
    )


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def rates(s: GroupLag) -> tuple[float, float]:
    """Mean produce and consume rate per partition (records/s) over the worst partitions."""
    return (
        _mean([w.produce_rate_per_s for w in s.worst]),
        _mean([w.consume_rate_per_s for w in s.worst]),
    )


def update_baseline(baseline: Sequence[float] | None, s: GroupLag) -> list[float]:
    """``[produce, consume, samples]``: an exponential mean of ``rates(s)``."""
    produce, consume = rates(s)
    if not baseline:
        return [produce, consume, 1]
    a = BASELINE_ALPHA
    return [
        (1 - a) * baseline[0] + a * produce,
        (1 - a) * baseline[1] + a * consume,
        min(int(baseline[2]) + 1, 1_000_000),
    ]


def _r(x: float) -> float:
    return round(float(x), 3)


def diagnose(
    s: GroupLag,
    exit_time_lag_s: float,
    hot: Sequence[WorstPartition],
    cfg: DiagnosisConfig,
    *,
    health: Mapping[str, Any] | None = None,
    baseline: Sequence[float] | None = None,
    producers: Mapping[str, Sequence[float]] | None = None,
    now_ms: int | None = None,
    stopped_ms: int | None = None,
    throttled: Sequence[str] = (),
) -> Diagnosis:
    """The cause of ``s``'s lag. ``hot`` is ``rules.hot_partitions(s, ...)``;
    ``producers`` maps client id -> ``[bytes_per_s now, usual bytes_per_s]`` for the topic;
    ``now_ms`` (the summary's time when not given) dates the group's last rebalance and
    ``stopped_ms``, when a partition of it was last seen in STOP; ``throttled``: the
    producers of the topic this policy holds throttled for the group."""
    produce, consume = rates(s)
    lagging = [w for w in s.worst if behind(w, exit_time_lag_s, cfg.min_status)]
    # 1. stalled
    # (a group with no members that still commits is consumed by assign(), not stalled)
    members = None if health is None else health.get("members")
    if isinstance(members, list | tuple):
        members = len(members)
    unconsumed = all(w.consume_rate_per_s <= 0 for w in s.worst) or all(
        w.status is LagStatus.STOP for w in lagging
    )  # the whole group, or every partition behind: nobody consumes them
    if lagging and unconsumed and (health is None or health.get("status") != "STORM"):
        return Diagnosis(STALLED, {"members": members, "health": (health or {}).get("status"),
                                   "lagging_partitions": len(lagging),
                                   "consume_rate_per_s": 0.0})  # fmt: skip
    # 2. rebalance storm
    storm = (health or {}).get("storm") or {}
    if (health or {}).get("status") == "STORM" and storm.get("leaves", 0) >= MIN_STORM_LEAVES:
        parts = [p for a in storm.get("partitions") or () if a.get("topic") == s.topic
                 for p in a.get("partitions") or ()]  # fmt: skip
        return Diagnosis(STORM, {
            "rebalances_per_min": _r((health or {}).get("rebalances_per_min", 0.0)),
            "commits_stalled": bool((health or {}).get("commits_stalled")),
            "member": storm.get("identity", ""), "member_id": storm.get("member_id", ""),
            "client_id": storm.get("client_id", ""), "client_host": storm.get("client_host", ""),
            "leaves": storm.get("leaves", 0), "partitions": sorted(parts),
        })  # fmt: skip
    # 3. rebalancing: the lag of partitions that wait while they move
    moving = _moving(s, cfg, health, now_ms, stopped_ms)
    if moving is not None:
        return Diagnosis(REBALANCING, {**moving, "lagging_partitions": len(lagging)})
    # a throttle held for the topic's producers: its steps probe what the consumers absorb,
    # so lag on a few partitions now is the throttle's own; its renewals step it down
    if throttled:
        return Diagnosis(WATCHING, {"throttled": sorted(throttled),
                                    "lagging_partitions": len(lagging)})  # fmt: skip
    # more than a few partitions behind (a quarter of the topic's, or every one the summary
    # names): the group as a whole falls behind, not a few of its partitions
    many = len(lagging) > max(1, s.topic_partitions // 4) or (
        bool(lagging) and len(lagging) == len(s.worst)
    )
    # 4. inflow burst: from producer rates when known, else from the partitions' rates; only
    # where the group as a whole falls behind: heavy records on a few keys raise their
    # producers' bytes too, and spreading those partitions (cheap, consumer-side) is the fix
    burst = _burst(produce, consume, baseline, producers, cfg) if many and not hot else None
    if burst is not None:
        return Diagnosis(BURST, burst)
    # 5. broker skew
    skew = _skew(s, exit_time_lag_s, cfg)
    if skew is not None:
        return Diagnosis(SKEW, skew)
    # 6. hotspot
    if hot:
        return Diagnosis(HOTSPOT, hotspot_evidence(s, hot, cfg.hot_ratio))
    # 7. slow group: more than a few partitions behind, consumed slower than produced
    evidence = {"lagging_partitions": len(lagging), "topic_partitions": s.topic_partitions,
                "produce_rate_per_s": _r(produce), "consume_rate_per_s": _r(consume)}  # fmt: skip
    if many and falls_behind(s, produce, consume):
        return Diagnosis(SLOW, evidence)
    # 8. a few partitions behind, not (yet) far beyond the rest
    if lagging and not many:
        return Diagnosis(WATCHING, {**evidence, "hot_ratio": cfg.hot_ratio})
    return Diagnosis(DRAINING, evidence)


#: a group falls behind when it consumes less than this share of what is produced (or its lag
#: grows faster than ``1 - SLOW_SHARE`` of the produce rate): rates fitted over the model's
#: window wobble by a few percent around equality in a group that keeps up
SLOW_SHARE = 0.9


def falls_behind(s: GroupLag, produce: float, consume: float) -> bool:
    """The group consumes clearly slower than it is produced, or its lag clearly grows."""
    total_produce = sum(w.produce_rate_per_s for w in s.worst)
    return consume < SLOW_SHARE * produce or s.lag_rate_per_s > (1 - SLOW_SHARE) * total_produce


def _moving(
    s: GroupLag,
    cfg: DiagnosisConfig,
    health: Mapping[str, Any] | None,
    now_ms: int | None,
    stopped_ms: int | None,
) -> dict[str, Any] | None:
    """The evidence that the group's membership is moving (``rebalancing``), or None."""
    if cfg.settle_s <= 0:
        return None
    now, settle_ms = (s.observed_at_ms if now_ms is None else now_ms), cfg.settle_s * 1000
    stopped = [w.partition for w in s.worst if w.status is LagStatus.STOP]
    if stopped or (stopped_ms is not None and now - stopped_ms < settle_ms):
        since = 0.0 if stopped or stopped_ms is None else (now - stopped_ms) / 1000
        return {"stopped_partitions": stopped, "since_stop_s": _r(since),
                "settle_s": cfg.settle_s}  # fmt: skip
    status = (health or {}).get("status")
    if status in ("REBALANCING", "STORM"):  # a storm that names no member leaving again
        return {"health": status, "settle_s": cfg.settle_s}
    # the folded health's generation_ms, or a raw group_health event's last_rebalance_ms
    moved_ms = None if health is None else health.get("generation_ms",
                                                      health.get("last_rebalance_ms"))  # fmt: skip
    if isinstance(moved_ms, int) and now - moved_ms < settle_ms:
        since_s = _r((now - moved_ms) / 1000)
        return {"generation": (health or {}).get("generation"), "since_rebalance_s": since_s,
                "settle_s": cfg.settle_s}  # fmt: skip
    return None


def hotspot_evidence(
    s: GroupLag, hot: Sequence[WorstPartition], hot_ratio: float, *, only: int | None = None
) -> dict[str, Any]:
    """The hot partitions' time lag against the worst partition that is not hot
    (``next_worst``); ``only``: the evidence of that one hot partition."""
    hot_parts = {w.partition for w in hot}
    rest = max((w.time_lag_s for w in s.worst if w.partition not in hot_parts), default=0.0)
    named = [w for w in hot if only is None or w.partition == only]
    return {
        "partitions": [w.partition for w in named],
        "partition_time_lag_s": [_r(w.time_lag_s) for w in named],
        "next_worst_time_lag_s": _r(rest), "hot_ratio": hot_ratio,
    }  # fmt: skip


def _burst(
    produce: float,
    consume: float,
    baseline: Sequence[float] | None,
    producers: Mapping[str, Sequence[float]] | None,
    cfg: DiagnosisConfig,
) -> dict[str, Any] | None:
    if producers:
        now = sum(v[0] for v in producers.values())
        usual = sum(v[1] for v in producers.values())
        if usual > 0 and now >= cfg.burst_ratio * usual:
            culprits = culprits_of(producers)
            return {"source": "producer_rates", "bytes_per_s": _r(now),
                    "usual_bytes_per_s": _r(usual), "ratio": _r(now / usual),
                    "culprits": culprits,
                    "culprit_bytes_per_s": [_r(producers[c][0]) for c in culprits]}  # fmt: skip
    if not baseline or baseline[0] <= 0 or baseline[2] < MIN_BASELINE_SAMPLES:
        return None
    usual_p, usual_c = baseline[0], baseline[1]
    if produce >= cfg.burst_ratio * usual_p and consume >= cfg.hold_ratio * usual_c:
        return {"source": "partition_rates", "produce_rate_per_s": _r(produce),
                "usual_produce_rate_per_s": _r(usual_p), "ratio": _r(produce / usual_p),
                "consume_rate_per_s": _r(consume),
                "usual_consume_rate_per_s": _r(usual_c), "culprits": []}  # fmt: skip
    return None


def culprits_of(producers: Mapping[str, Sequence[float]]) -> list[str]:
    """The client ids whose increase caused the burst: together they make at least 80% of
    the topic's increase, largest first; a client that did not rise is never one."""
    rises = sorted(
        ((v[0] - v[1], cid) for cid, v in producers.items() if v[0] > v[1]), reverse=True
    )
    total = sum(r for r, _ in rises)
    out: list[str] = []
    covered = 0.0
    for rise, cid in rises:
        if covered >= 0.8 * total:
            break
        out.append(cid)
        covered += rise
    return out


def _skew(s: GroupLag, exit_time_lag_s: float, cfg: DiagnosisConfig) -> dict[str, Any] | None:
    led = [w for w in s.worst if w.leader >= 0]
    lagging = [w for w in led if behind(w, exit_time_lag_s, cfg.min_status)]
    counts = Counter(w.leader for w in lagging)
    if not counts or len({w.leader for w in led}) < 2:
        return None
    broker, n = max(counts.items(), key=lambda kv: (kv[1], -kv[0]))
    others = [w for w in led if w.leader != broker]
    if n < cfg.skew_min_partitions or len(counts) > 1 or not others:
        return None
    return {"broker": broker, "lagging_partitions_led": n, "lagging_partitions": len(lagging),
            "others_max_time_lag_s": _r(max(w.time_lag_s for w in others))}  # fmt: skip
