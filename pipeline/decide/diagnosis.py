"""Why a group lags: one cause per incident, with its evidence as numbers (pure, no clock).

``diagnose`` reads what is already on lagpilot's topics: the ``group_lag`` summary (its
worst partitions' lag, rates, time lag and leader), the group's latest ``group_health``
event, and the per-client producer rates of the topic (``producer_rates``, folded by
``ProducerView``). The rules, in severity order (the first that holds wins):

1. ``stalled``: the group lags and none of its partitions is consumed (members or not);
2. ``rebalance_storm``: group health says STORM (generation churn while commits stall);
3. ``inflow_burst``: the produce rate is ``burst_ratio`` times its usual level while the
   consumers hold at least ``hold_ratio`` of their usual rate (the producers changed, not
   the consumers);
4. ``broker_skew``: one broker leads at least ``skew_min_partitions`` of the lagging
   partitions, and the partitions other brokers lead keep up (below the exit level);
5. ``hotspot``: a few partitions far behind their siblings (``policy.hot_partitions``);
6. ``slow_group``: the group consumes slower than the topic is produced;
7. ``draining``: none of the above: lag is high but shrinking; nothing to do.

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

from schemas import GroupLag
from schemas.lag import WorstPartition

STALLED, STORM, BURST, SKEW, HOTSPOT, SLOW, DRAINING = (
    "stalled",
    "rebalance_storm",
    "inflow_burst",
    "broker_skew",
    "hotspot",
    "slow_group",
    "draining",
)
#: Causes in severity order; a cause may be replaced during an incident only by one before it.
CAUSES: tuple[str, ...] = (STALLED, STORM, BURST, SKEW, HOTSPOT, SLOW, DRAINING)
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


@dataclass(frozen=True, slots=True)
class Diagnosis:
    cause: str
    evidence: dict[str, Any]


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
) -> Diagnosis:
    """The cause of ``s``'s lag. ``hot`` is ``policy.hot_partitions(s, ...)``;
    ``producers`` maps client id -> ``[bytes_per_s now, usual bytes_per_s]`` for the topic."""
    produce, consume = rates(s)
    lagging = [w for w in s.worst if w.time_lag_s >= exit_time_lag_s]
    # 1. stalled
    # (a group with no members that still commits is consumed by assign(), not stalled)
    members = None if health is None else health.get("members")
    if isinstance(members, list | tuple):
        members = len(members)
    if (
        lagging
        and all(w.consume_rate_per_s <= 0 for w in s.worst)
        and (health is None or health.get("status") != "STORM")
    ):
        return Diagnosis(STALLED, {"members": members, "health": (health or {}).get("status"),
                                   "lagging_partitions": len(lagging),
                                   "consume_rate_per_s": 0.0})  # fmt: skip
    # 2. rebalance storm
    if health is not None and health.get("status") == "STORM":
        storm = health.get("storm") or {}
        parts = [p for a in storm.get("partitions") or () if a.get("topic") == s.topic
                 for p in a.get("partitions") or ()]  # fmt: skip
        return Diagnosis(STORM, {
            "rebalances_per_min": _r(health.get("rebalances_per_min", 0.0)),
            "commits_stalled": bool(health.get("commits_stalled")),
            "member": storm.get("identity", ""), "member_id": storm.get("member_id", ""),
            "client_id": storm.get("client_id", ""), "client_host": storm.get("client_host", ""),
            "leaves": storm.get("leaves", 0), "partitions": sorted(parts),
        })  # fmt: skip
    # 3. inflow burst: from producer rates when known, else from the partitions' rates
    burst = _burst(produce, consume, None if hot else baseline, producers, cfg)
    if burst is not None:
        return Diagnosis(BURST, burst)
    # 4. broker skew
    skew = _skew(s, exit_time_lag_s, cfg)
    if skew is not None:
        return Diagnosis(SKEW, skew)
    # 5. hotspot
    if hot:
        return Diagnosis(HOTSPOT, hotspot_evidence(s, hot, cfg.hot_ratio))
    # 6. slow group
    evidence = {"lagging_partitions": len(lagging), "topic_partitions": s.topic_partitions,
                "produce_rate_per_s": _r(produce), "consume_rate_per_s": _r(consume)}  # fmt: skip
    if consume < produce or s.lag_rate_per_s > 0:
        return Diagnosis(SLOW, evidence)
    return Diagnosis(DRAINING, evidence)


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
    lagging = [w for w in led if w.time_lag_s >= exit_time_lag_s]
    counts = Counter(w.leader for w in lagging)
    if not counts or len({w.leader for w in led}) < 2:
        return None
    broker, n = max(counts.items(), key=lambda kv: (kv[1], -kv[0]))
    others = [w.time_lag_s for w in led if w.leader != broker]
    if n < cfg.skew_min_partitions or len(counts) > 1 or not others:
        return None
    return {"broker": broker, "lagging_partitions_led": n, "lagging_partitions": len(lagging),
            "others_max_time_lag_s": _r(max(others))}  # fmt: skip
