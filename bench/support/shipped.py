"""The shipped policy as the flood, mixed and calm scenarios run it, and what they read back.

Every scenario runs ``deploy/policy.default.toml`` byte for byte (``ControlLoop``'s default;
``loop.policy_sha256`` is recorded with the results) and names its topics
``agents.<scenario>.<arm>-<run>...`` and its producers ``agent-<run>-<i>``, so the file's
allow-lists cover them. ``judged`` lists every action the loop issued with the product's
own outcome and verdict, judged against what the scenario injected (bench/support/judge.py).
``first_non_ok`` and ``statuses`` read the model's events (``lagpilot.lag``) of a group.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from bench.support import judge
from bench.support.control_loop import DEFAULT_POLICY, ControlLoop, policy_config
from bench.support.verdicts import outcome_rows, verdict_rows


def pool_name() -> str | None:
    """The dedicated pool the shipped policy hands partitions off to (``hotspot.pool``)."""
    return policy_config(DEFAULT_POLICY).spread_pool


def start_loop(
    bootstrap: str, topics_regex: str, run: str, workdir: Path, *, on: bool, rates_topic: str
) -> ControlLoop:
    """The run's control loop under the shipped file; the only setting it is given names the
    run's producer-rates topic (the policy reads the producers' rates there)."""
    return ControlLoop.start(
        bootstrap,
        topics_regex,
        run,
        workdir,
        DEFAULT_POLICY,
        on=on,
        LAGPILOT_PRODUCERS_TOPIC=rates_topic,
    )


def judged(loop: ControlLoop, injected: Sequence[judge.Injected], start_ms: int) -> dict[str, Any]:
    """``judge.summary`` of every action the run's loop issued (times from ``start_ms``), with
    the actuator's outcomes and the policy's verdicts."""
    reported = loop.reported()
    out = judge.judge_run(loop.actions(), reported, injected, start_ms)
    out["outcomes"] = outcome_rows(reported)
    out["verifications"] = verdict_rows(reported, start_ms)
    out["worker_outcomes"] = sum(1 for o in reported if o.get("event") == "worker_outcome")
    return out


def partition_targets(group: str, topic: str, partitions: Iterable[int]) -> tuple[str, ...]:
    """The targets of ``partitions`` of ``topic`` in ``group``, and in the group the shipped
    policy's pool consumes a handed-off partition in (judged there from then on)."""
    return judge.partition_targets(group, topic, partitions, pool_name())


def remedy(rows: Iterable[dict[str, Any]]) -> list[str]:
    """Action types in the order first issued."""
    seen: list[str] = []
    for r in rows:
        if r["type"] not in seen:
            seen.append(r["type"])
    return seen


def first_non_ok(events: Iterable[dict[str, Any]], group: str, since_ms: int) -> int | None:
    """When (ms after ``since_ms``, as read back) the group's first partition was judged not
    OK at or after ``since_ms``."""
    seen = [
        e["_received_ms"]
        for e in events
        if e["event"] == "partition_lag"
        and e["group"] == group
        and e["status"] != "OK"
        and e["observed_at_ms"] >= since_ms
    ]
    return min(seen) - since_ms if seen else None


def statuses(events: Iterable[dict[str, Any]], group: str) -> dict[str, dict[str, int]]:
    """How many of the group's events of each kind said each status."""
    out: dict[str, Counter[str]] = {}
    for e in events:
        if e.get("group") == group and "status" in e:
            out.setdefault(e["event"], Counter())[str(e["status"])] += 1
    return {kind: dict(c) for kind, c in sorted(out.items())}
