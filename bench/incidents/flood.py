"""The ``flood`` incident: one of several agents floods a topic beyond what its workers
process, under the shipped policy (``deploy/policy.default.toml``, byte for byte).

``producers`` agents (``RateProducer`` clients ``agent-<run>-<i>``, bench/support/agents.py)
each send ``rate_per_s`` records of a few KiB (lognormal sizes and work) to the topic
``agents.flood.<arm>-<run>``, keyed by session; from ``warmup_s``, agent 0 sends
``flood_factor`` times that for ``flood_s``. One SDK worker (``max_workers`` threads)
processes more than the usual inflow and less than the flood (2 threads: ~170 records/s
measured here, against 100 usual and 325 in the flood). Off: the pipeline models lag,
the policy is off. On: the policy acts (the actuator applies quotas through the Kafka
protocol, leased); the pipeline reads the run's producer rates and outcomes topics.

Nothing is dropped: a throttled agent's records wait in its client's queue (librdkafka's, at
its default limits), and a full queue blocks the agent, which sends the same record again.
Each record's latency counts from when the agent meant to send it (``intended_ms``). The run
waits until every intended record is processed, or ``drain_timeout_s`` (``drain_s``: from the
schedule's end until then; a throttled flooder's queue drains only once its throttle is
raised or released, so the wait is part of the measurement).

Reported: ``others_p99_ms`` (the agents that do not flood) off and on and ``others_p99_ratio``
(off/on, target >= 5), ``flooder_p99_ms``, ``flooder_delivered``, each producer's p99 and its
acknowledged rate, ``dropped`` (records the harness gave up on), ``lost`` (intended and not
processed), ``duplicates``; the loop's actions judged against the injected cause
(``inflow_burst`` on the flooder's client id), ``wrong_actions``, ``applied_actions``,
``verified`` (the product's verdicts), ``released_while_flooding`` (a release of the
flooder's throttle issued before the flood's end) and ``policy_sha256``.
"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path
from typing import Any

from bench.support.agents import (
    Agent,
    Agents,
    tally,
)
from bench.support.control_loop import both_arms, read_topic
from bench.support.flood_load import FloodShape, flood_agents
from bench.support.groups import WorkerGroup
from bench.support.harness import LagReader
from bench.support.judge import Injected
from bench.support.plots import action_lines, pyplot, time_lag_lines
from bench.support.scenario_cli import scenario_main, shape_dict
from bench.support.shipped import (
    first_non_ok,
    judged,
    pool_name,
    remedy,
    start_loop,
)
from bench.support.swarm import ensure_topic
from bench.support.verdicts import timeline


def producer_report(
    agent: Agent, rows: list[Any], end_ms: int, shape: FloodShape, flood_from_s: float
) -> dict[str, Any]:
    """One agent's counts, latency, and acknowledged records/s before and during the flood
    (its edges left out)."""
    before = range(2, int(flood_from_s))
    during = range(int(flood_from_s) + 2, int(flood_from_s + shape.flood_s))
    return {
        **agent.counts(),
        **tally(agent.snapshot(), rows, end_ms),
        "before_per_s": agent.rate_per_s(before),
        "during_per_s": agent.rate_per_s(during),
    }


def one_flood(bootstrap: str, shape: FloodShape, workdir: Path, *, on: bool) -> dict[str, Any]:
    run = f"fl{uuid.uuid4().hex[:6]}"
    topic, group = f"agents.flood.{'on' if on else 'off'}-{run}", f"agents-flood-{run}"
    rates_topic = f"lagpilot.producers.{run}"
    ensure_topic(bootstrap, topic, shape.partitions)
    ensure_topic(bootstrap, rates_topic, 1)
    loop = start_loop(bootstrap, re.escape(topic), run, workdir, on=on, rates_topic=rates_topic)
    agents = Agents(flood_agents(bootstrap, topic, rates_topic, run, shape))
    flooder = agents.agents[0]
    workers = WorkerGroup(
        bootstrap,
        group,
        [topic],
        workdir,
        control=loop.control,
        outcomes=loop.outcomes,
        max_workers=shape.max_workers,
        pool=pool_name() if on else None,
    )
    reader = LagReader(bootstrap, {group}).start()
    drained = stable = False
    drain_s = None
    try:
        loop.wait_modelling()
        workers.start()
        stable = workers.wait_stable(shape.partitions)  # the clock starts there
        start_ms = agents.start(shape.end_s + shape.drain_timeout_s)
        agents.wait_scheduled()
        scheduled = time.monotonic()
        drained = agents.wait_processed(workers.effects.done_ids, shape.drain_timeout_s)
        drain_s = round(time.monotonic() - scheduled, 1)
        time.sleep(1.0)
    finally:
        agents.stop()
        workers.stop()
        reader.close()
        loop.stop()
    end_ms = int(time.time() * 1000)
    rows = workers.effects.rows()
    flood_ms = start_ms + int(shape.warmup_s * 1000)
    events = reader.select(lambda e: e["event"] == "partition_lag")
    judge = judged(loop, [Injected("inflow_burst", (f"client-id:{flooder.client_id}",))], flood_ms)
    target = f"client-id:{flooder.client_id}"
    releases = [
        r["at_ms"]
        for r in judge["actions"]
        if r["type"] == "release_producer" and r["target"] == target
    ]
    throttles = [r for r in judge["actions"] if r["type"] == "throttle_producer"]
    per_client: dict[str, int] = {}
    for r in throttles:
        name = r["target"].split(":", 1)[1]
        per_client[name] = per_client.get(name, 0) + 1
    others = {m: t for a in agents.agents[1:] for m, t in a.snapshot().items()}
    everything = tally(agents.intended(), rows, end_ms)
    return {
        **everything,
        "drained": drained,
        "stable_at_start": stable,
        "drain_s": drain_s,
        "dropped": agents.dropped(),
        "others": tally(others, rows, end_ms),
        "flooder_records": tally(flooder.snapshot(), rows, end_ms),
        "producers": {
            a.client_id: producer_report(a, rows, end_ms, shape, shape.warmup_s)
            for a in agents.agents
        },
        "max_time_lag_s": max((e["time_lag_s"] for e in events), default=0.0),
        "detection_ms": first_non_ok(events, group, flood_ms),
        **judge,
        "policy_sha256": loop.policy_sha256,
        "throttled": sorted(per_client),
        "throttle_actions_per_client": per_client,
        "released_at_ms": releases,
        "released_while_flooding": any(0 <= t < shape.flood_s * 1000 for t in releases),
        "reported_rates_events": len(read_topic(bootstrap, rates_topic)),
        "worker": workers.stats(),
        "flooder": flooder.client_id,
        "client_ids": [a.client_id for a in agents.agents],
        "timeline": timeline(events, flood_ms),
        "rates_timeline": {a.client_id: list(a.acked_per_s) for a in agents.agents},
        "warmup_s": shape.warmup_s,
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


def flood(
    bootstrap: str, shape: FloodShape, workdir: Path, *, parallel: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both arms; returns (summary, runs for the plot)."""
    off, on = both_arms(one_flood, bootstrap, shape, workdir, parallel=parallel)
    fl = on["flooder"]
    kept = {
        c: _ratio(on["producers"][c]["during_per_s"], shape.rate_per_s)
        for c in on["client_ids"]
        if c != fl
    }
    arms = {"off": off, "on": on}
    summary = {
        "remedy": remedy(on["actions"]),
        "cause": sorted({a["cause"] for a in on["actions"] if a.get("cause")}),
        "detection_ms": on["detection_ms"],
        "first_action_ms": min((a["at_ms"] for a in on["actions"]), default=None),
        "verified": on["verified"],
        "wrong_actions": on["wrong_actions"],
        "wrong_undos": on["wrong_undos"],
        "applied_actions": on["applied_actions"],
        "actions": on["actions"],
        "policy_sha256": on["policy_sha256"],
        "dropped": off["dropped"] + on["dropped"],
        "lost": on["lost"],
        "duplicates": on["duplicates"],
        "others_p99_ms": {k: r["others"]["p99_ms"] for k, r in arms.items()},
        "others_p99_ratio": _ratio(off["others"]["p99_ms"], on["others"]["p99_ms"]),
        "flooder_p99_ms": {k: r["flooder_records"]["p99_ms"] for k, r in arms.items()},
        "flooder_delivered": on["flooder_records"]["lost"] == 0,
        "drain_s": {k: r["drain_s"] for k, r in arms.items()},
        "released_while_flooding": on["released_while_flooding"],
        "off_p99_ms": off["p99_ms"],
        "on_p99_ms": on["p99_ms"],
        "ratio": _ratio(off["p99_ms"], on["p99_ms"]),  # every record's p99, off / on
        "off_max_time_lag_s": off["max_time_lag_s"],
        "on_max_time_lag_s": on["max_time_lag_s"],
        "time_lag_ratio": _ratio(off["max_time_lag_s"], on["max_time_lag_s"]),
        "flooder": fl,
        "throttled": on["throttled"],
        "only_flooder_throttled": on["throttled"] == [fl],
        "released": on["released_at_ms"],
        "others_rate_kept": kept,
        "off": {k: v for k, v in off.items() if k not in ("timeline", "rates_timeline")},
        "on": {k: v for k, v in on.items() if k not in ("timeline", "rates_timeline")},
        "shape": shape_dict(shape),
        "targets": {
            "others_p99_ratio": 5,
            "flooder_delivered": True,
            "dropped": 0,
            "lost": 0,
            "duplicates": 0,
            "wrong_actions": 0,
            "released_while_flooding": False,
        },
    }
    return summary, arms


def plot_flood(runs: dict[str, dict[str, Any]], out: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(13, 7), sharex="col")
    for col, name in enumerate(("off", "on")):
        res = runs[name]
        ax = axes[0][col]
        time_lag_lines(ax, res["timeline"])
        action_lines(ax, res["actions"], lw=0.6)
        others = res["others"]["p99_ms"]
        ax.set_title(
            f"lagpilot {name}: worst time lag {res['max_time_lag_s']:.1f} s, "
            f"others' p99 {others} ms"
        )
        ax.set_ylabel("time lag (s)")
        ax.grid(alpha=0.3)
        ax = axes[1][col]
        warm = res["warmup_s"]
        for c, ys in res["rates_timeline"].items():
            xs = [t - warm for t in range(len(ys))]
            ax.plot(xs, ys, label=c + (" (floods)" if c == res["flooder"] else ""))
        ax.set_ylabel("records/s acknowledged")
        ax.set_xlabel("seconds since the flood began")
        ax.set_yscale("symlog", linthresh=1.0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("flood: one agent floods (top: time lag per partition; bottom: its writes)")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


FLOOD_HEADLINE = (
    "others_p99_ms",
    "others_p99_ratio",
    "flooder_p99_ms",
    "flooder_delivered",
    "drain_s",
    "released_while_flooding",
    "throttled",
    "detection_ms",
)


def main(argv: list[str] | None = None) -> int:
    return scenario_main(
        argv,
        name="flood",
        doc=__doc__,
        shape=FloodShape,
        run=flood,
        plot=plot_flood,
        headline=FLOOD_HEADLINE,
    )


if __name__ == "__main__":
    raise SystemExit(main())
