"""The decide stage's inputs besides ``group_lag``, folded into ``PolicyState`` (pure).

- ``outcome`` events (actuator, SDK workers) of the ladder's actions start a step's watch
  or give it up (``fold_outcome``);
- ``group_health`` events keep each group's latest health for the diagnosis
  (``fold_health``);
- ``producer_rates`` events keep each client's current and usual rate per topic
  (``fold_producer_rate``): who is producing, and who rose, for ``inflow_burst``.
"""

from __future__ import annotations

from typing import Any

from pipeline.decide import diagnosis as dg
from pipeline.decide.context import Ctx
from pipeline.decide.policy_config import Producer
from pipeline.decide.state import PolicyState


def fold_outcome(state: PolicyState, outcome: dict[str, Any]) -> PolicyState:
    """An actuator's (or workers') outcome of one of our actions: start the watch, or give
    up on the step. Outcomes of other actions change nothing (returns ``state`` itself)."""
    action_id, result = outcome.get("action_id"), outcome.get("result")
    at = outcome.get("at")
    for key, lad in state.ladders.items():
        if lad.get("phase") != "issued" or action_id not in lad.get("ids", ()):
            continue
        s = state.copy()
        lad = s.ladders[key] = dict(lad)
        if result in ("applied", "recorded", "delegated"):  # delegated: for the SDK workers
            applied = at if isinstance(at, int) else s.clock_ms
            lad.update(
                phase="watching",
                applied_ms=applied,
                deadline_ms=applied + lad["deadline_len_ms"],
                lag_at_apply_s=lad["last_lag_s"],
            )
            lad["applied_by"] = int(outcome.get("applied_by", 1) or 1)
        elif result in ("failed", "rejected", "expired"):
            lad.update(phase="failed", why=f"outcome {result}")
        else:
            return state
        return s
    return state


def fold_health(state: PolicyState, event: dict[str, Any]) -> PolicyState:
    """Keep the group's latest health: what the diagnosis reads (status, members, storm)."""
    group = event.get("group")
    if not isinstance(group, str) or not group:
        return state
    s = state.copy()
    at = event.get("observed_at_ms", 0)
    moved_ms = event.get("last_rebalance_ms")  # the record that last moved the generation
    s.health[group] = {
        "status": event.get("status"),
        "members": len(event.get("members") or ()),
        "rebalances_per_min": event.get("rebalances_per_min", 0.0),
        "commits_stalled": bool(event.get("commits_stalled")),
        "storm": event.get("storm"), "at": at,
        "generation": event.get("generation"),
        "generation_ms": moved_ms if isinstance(moved_ms, int) else None,
    }  # fmt: skip
    return s


def fold_producer_rate(
    state: PolicyState, event: dict[str, Any], burst_ratio: float
) -> PolicyState:
    """One ``producer_rates`` event: the client's current rate, and its usual rate (an
    exponential mean that a burst does not move, so a flood stays a flood).

    The first ``dg.RATE_WARMUP_REPORTS`` reports of a client are its warm-up: the usual
    rate is their plain mean, whatever they are, and the client names no burst yet
    (``topic_producers`` leaves it out). Without it, a first report of a partial second
    (a producer that just started) would be "usual", and every later full second a
    burst that never moves it: every producer of the topic would be a culprit."""
    cid, topic, rate, at = (event.get(k) for k in ("client_id", "topic", "bytes_per_s", "at_ms"))
    if not (isinstance(cid, str) and isinstance(topic, str) and isinstance(at, int)):
        return state
    if not isinstance(rate, int | float) or rate < 0 or rate != rate:
        return state
    s = state.copy()
    key = f"{cid}|{topic}"
    old = s.producer_rates.get(key)
    # [rate, usual, at_ms, reports]; a state saved before warm-up was kept has no count
    seen = 0 if old is None else int(old[3]) if len(old) > 3 else dg.RATE_WARMUP_REPORTS
    usual = float(rate) if old is None else old[1]
    if 0 < seen < dg.RATE_WARMUP_REPORTS:
        usual = (usual * seen + float(rate)) / (seen + 1)
    elif old is not None and rate <= burst_ratio * max(usual, 1.0):
        usual = (1 - dg.BASELINE_ALPHA) * usual + dg.BASELINE_ALPHA * float(rate)
    # [rate, usual, at_ms, reports, pushing, the rate before]
    before = float(rate) if old is None else old[0]
    s.producer_rates[key] = [float(rate), usual, at, min(seen + 1, 1_000_000),
                             _pushing(event), before]  # fmt: skip
    return s


def _pushing(event: dict[str, Any]) -> float:
    """1.0 if the report shows its producer pushing against a quota (the brokers delayed it,
    or at least a second of its own rate waits in its queue), 0.0 if not, -1.0 if the
    report cannot say (a v1 report has neither field)."""
    throttle_ms, queued = event.get("throttle_ms"), event.get("queued")
    if not isinstance(throttle_ms, int | float) or not isinstance(queued, int):
        return -1.0
    per_s = event.get("records_per_s")
    backlog = queued > 0 and queued >= (per_s if isinstance(per_s, int | float) else 0)
    return 1.0 if throttle_ms > 0 or backlog else 0.0


def pressure(c: Ctx, client_id: str) -> bool | None:
    """Whether ``client_id`` pushes against its quota by its freshest report (any topic: a
    quota is the client's), or None when no fresh report can say."""
    stale_ms = c.config.rates_stale_s * 1000
    best: list[float] | None = None
    for key, entry in c.state.producer_rates.items():
        mine = key.rpartition("|")[0] == client_id and len(entry) > 4 and entry[4] >= 0
        if mine and c.now - entry[2] <= stale_ms and (best is None or entry[2] > best[2]):
            best = entry
    return None if best is None else best[4] > 0


def topic_producers(c: Ctx) -> dict[str, list[float]]:
    """client id -> [bytes_per_s, usual] of the summary's topic, fresh ones only; the rate
    is the lower of the client's last two reports (what it sustained)."""
    stale_ms = c.config.rates_stale_s * 1000
    out: dict[str, list[float]] = {}
    for key, entry in c.state.producer_rates.items():
        rate, usual, at = entry[:3]
        if len(entry) > 5:  # sustained: the lower of its last two reports (one heavy record
            rate = min(rate, entry[5])  # in a second is no burst; a flood lasts)
        warm = len(entry) < 4 or entry[3] >= dg.RATE_WARMUP_REPORTS
        cid, _, topic = key.rpartition("|")
        if topic == c.summary.topic and c.now - at <= stale_ms and warm:
            out[cid] = [rate, usual]
    return out


def reporters(c: Ctx) -> set[str]:
    """Client ids that have reported rates for the summary's topic (fresh or not, until the
    state forgets them): producers that embed the SDK's wrapper."""
    out = set()
    for key in c.state.producer_rates:
        cid, _, topic = key.rpartition("|")
        if topic == c.summary.topic:
            out.add(cid)
    return out


def _reports(p: Producer, reporting: set[str]) -> bool:
    if p.entity == "client-id-prefix":
        return any(cid.startswith(p.name) for cid in reporting)
    return p.name in reporting
