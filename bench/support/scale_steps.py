"""The scale benchmark's steps: one measured step, the drain after it, the ladder of
steps, and what a replica holds."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.support.scale_probes import (
    CLK_TCK,
    cpu_ticks,
    process_tree,
    quantile,
    rss_bytes,
)
from bench.support.scale_replicas import Pipeline

MAX_DELAY_P99_S = 1.0
MAX_BEHIND_S = 1.0
MAX_DROPPED_SHARE = 0.01  # samples dropped because the commits reader was behind
MIN_SAMPLES_SHARE = 0.95  # samples modelled, of one per topic per tick (a starved sampler skips)
MAX_FALSE_ALARMS = 0  # every group of the load is healthy: any non-OK lag event is false


def load_average() -> list[float]:
    """The machine's 1, 5 and 15 min load (``uptime``): the cores are shared, and a
    delay measured while others load them says as much about them as about the pipeline."""
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def false_alarm_events(events: dict[str, float]) -> dict[str, float]:
    """The non-OK lag events (``event/status`` -> count): the load's groups all commit on
    time and commit their partitions' acknowledged ends, so each one is a false alarm."""
    return {k: v for k, v in events.items() if v > 0 and not k.endswith("/OK")}


def scrape_phase(replicas: list[Pipeline], window_s: float, now: float | None = None) -> float:
    """Seconds to wait so that a window starts midway between two full scrapes of the
    replicas' grid (``Pipeline.start_prometheus``): a window of k scrape intervals then
    holds exactly k of them, each half an interval from its edges, where one started at
    any time held k or k + 1 (a 20 s window at 15 s: one or two, each ~0.4 core-second of
    the tree at the shape). 0 without a grid, or with scrapes rarer than the window."""
    grids = [r for r in replicas if getattr(r, "prom_grid_t0", None) is not None]
    if not grids:
        return 0.0
    interval, t0 = grids[0].prom_interval_s, grids[0].prom_grid_t0
    if interval <= 0 or interval > window_s:
        return 0.0
    now = time.monotonic() if now is None else now
    return (t0 + interval / 2 - now) % interval


#: a step whose generator wrote less than this share of its rate measures the host
GENERATOR_ON_RATE = 0.97


def measure_step(
    replicas: list[Pipeline],
    rate: Any,
    sent: Any,
    commits_per_s: int,
    warmup_s: float,
    window_s: float,
    deficit0: float = 0.0,
    ticks_per_s: float = 0.0,
    group_partitions: int = 0,
    sample_hz: float = 4.0,
    probe: Callable[[], float] | None = None,
) -> dict[str, Any]:
    """Set the rate, let it settle for ``warmup_s``, then measure ``window_s`` (``probe``:
    the host's speed, read at the end of the warm-up: ``bench.support.host_probe``).

    ``deficit0``: commits produced but not modelled when the previous step had drained
    (commits coalesced in a backlog, or never caught up): not this step's doing."""
    rate.value = float(commits_per_s)
    time.sleep(warmup_s)
    host_us = probe() if probe is not None else None
    time.sleep(scrape_phase(replicas, window_s))
    load0 = load_average()
    trees = [process_tree(r.proc.pid) for r in replicas]
    cpu0 = [cpu_ticks(t) for t in trees]
    sent0, t0 = sent.value, time.monotonic()
    s0 = [r.scrape() for r in replicas]
    rss = 0
    end = t0 + window_s
    while time.monotonic() < end:
        time.sleep(min(1.0, max(0.0, end - time.monotonic())))
        rss = max(rss, sum(rss_bytes(process_tree(r.proc.pid)) for r in replicas))
    sent1, elapsed = sent.value, time.monotonic() - t0
    s1 = [r.scrape() for r in replicas]
    # the full scrapes (every lag family, as Prometheus) that ran in the window
    full = [d for r in replicas for at, d in getattr(r, "prom_scrape_s", []) if at >= t0]
    scrape_s = max(full, default=0.0)
    cpu1 = [cpu_ticks(process_tree(r.proc.pid)) for r in replicas]
    by_replica = [
        sum(c1[p] - c0[p] for p in c1 if p in c0) for c0, c1 in zip(cpu0, cpu1, strict=True)
    ]
    ticks = sum(by_replica)
    main_ticks = sum(
        c1.get(r.proc.pid, 0) - c0.get(r.proc.pid, 0)
        for r, c0, c1 in zip(replicas, cpu0, cpu1, strict=True)
    )
    before: dict[float, float] = {}
    after: dict[float, float] = {}
    for a, b in zip(s0, s1, strict=True):
        for le, v in a.buckets.items():
            before[le] = before.get(le, 0.0) + v
        for le, v in b.buckets.items():
            after[le] = after.get(le, 0.0) + v
    consumed = sum(b.commits - a.commits for a, b in zip(s0, s1, strict=True))
    events: dict[str, float] = {}
    for a, b in zip(s0, s1, strict=True):
        for kind, v in b.events.items():
            events[kind] = events.get(kind, 0.0) + v - a.events.get(kind, 0.0)
    behind = sent1 - sum(b.commits for b in s1) - deficit0
    p99 = quantile(0.99, before, after)
    samples = sum(b.samples - a.samples for a, b in zip(s0, s1, strict=True))
    dropped = sum(b.samples_dropped - a.samples_dropped for a, b in zip(s0, s1, strict=True))
    false = false_alarm_events(events)
    cores = ticks / CLK_TCK / elapsed
    sustained = (
        not math.isnan(p99)
        and p99 <= MAX_DELAY_P99_S
        and behind <= max(commits_per_s * MAX_BEHIND_S, 1)
        and dropped <= MAX_DROPPED_SHARE * (samples + dropped)
        and samples / elapsed >= MIN_SAMPLES_SHARE * ticks_per_s
        and sum(false.values()) <= MAX_FALSE_ALARMS
    )
    produced_per_s = (sent1 - sent0) / elapsed
    return {
        "commits_per_s": commits_per_s,
        "produced_per_s": round(produced_per_s),
        # the generator wrote what the step offered (else the host, not the pipeline, is
        # what gave out: the step is not a measurement of the pipeline's capacity)
        "generator_on_rate": produced_per_s >= GENERATOR_ON_RATE * commits_per_s,
        "consumed_per_s": round(consumed / elapsed),
        "produced": sent1 - sent0,
        "consumed": round(consumed),
        "behind_commits": round(behind),
        "delay_p50_s": round(quantile(0.5, before, after), 3),
        "delay_p99_s": round(p99, 3),
        "last_sample_age_s": round(max(b.sample_age_s for b in s1), 3),
        "scrape_s": round(scrape_s, 2),  # the slowest full scrape in the window
        "full_scrapes": len(full),
        "cpu_cores": round(cores, 3),
        "cpu_cores_model_process": round(main_ticks / CLK_TCK / elapsed, 3),
        # each replica's process tree: how evenly replicas split the work
        "cpu_cores_by_replica": [round(t / CLK_TCK / elapsed, 3) for t in by_replica],
        # ...and the topics each models: a topic's samples and commits go to the partition
        # of the watermarks topic its name hashes to, so N replicas split the topics as
        # the hash falls, not evenly (50 topics into two halves: typically 25 +/- 3.5)
        "topics_by_replica": [round(b.topics) for b in s1],
        "rss_mib": round(rss / 2**20, 1),
        "samples_modelled_per_s": round(samples / elapsed, 1),
        "samples_dropped": round(dropped),
        # per core of the replicas' whole process trees (each figure charged the whole CPU)
        "commits_per_core_s": round(consumed / elapsed / cores) if cores else None,
        "cpu_us_per_commit": round(cores * 1e6 / (consumed / elapsed), 1) if consumed else None,
        "group_partition_ticks_per_core_s": (
            round(group_partitions * sample_hz / cores) if cores else None
        ),
        "false_alarms": round(sum(false.values())),
        "false_alarms_by_kind": {k: round(v) for k, v in sorted(false.items())},
        "load_average": [load0, load_average()],  # 1/5/15 min, at the window's start and end
        # bench.perf.model's tick on this host just before the window (us per group-partition)
        "host_probe_us_per_group_partition": host_us,
        "sustained": sustained,
        "lag_events_per_s": {k: round(v / elapsed, 1) for k, v in sorted(events.items()) if v},
    }


def drain(
    replicas: list[Pipeline], rate: Any, sent: Any, timeout_s: float, deficit0: float = 0.0
) -> tuple[float | None, float]:
    """Stop committing; seconds until the model has taken in every commit produced (None
    if it has not within ``timeout_s``), and the commits still missing then (``deficit0``:
    those sent before these replicas started reading at the end)."""
    rate.value = 0.0
    time.sleep(0.05)  # the generator's current tick ends
    t0 = time.monotonic()
    missing = 0.0
    while time.monotonic() - t0 < timeout_s:
        missing = sent.value - sum(r.scrape().commits for r in replicas) - deficit0
        if missing <= 0:
            return round(time.monotonic() - t0, 2), missing
        time.sleep(0.5)
    return None, missing


def ladder(
    start_replicas: Callable[[int], list[Pipeline]],
    rate: Any,
    sent: Any,
    start: int,
    fixed: list[int] | None,
    warmup_s: float,
    window_s: float,
    max_steps: int,
    drain_s: float = 15.0,
    ticks_per_s: float = 0.0,
    group_partitions: int = 0,
    sample_hz: float = 4.0,
    probe: Callable[[], float] | None = None,
) -> list[dict[str, Any]]:
    """Doubling steps from ``start`` (the shape's steady rate: every group commits every
    ``--commit-interval-s``) until one is missed, then one between the two held and
    missed. Missed at once: no lower step, since below the steady rate the groups commit
    less often, a different workload (a fresh model takes them for stopped until it has
    learned their slower cadence), not an easier one. A step the model did not catch up
    with is followed by fresh replicas (new group, reading from the end), so its backlog
    does not weigh on the next step."""
    steps: list[dict[str, Any]] = []
    todo = list(fixed) if fixed else [start]
    deficit, generation = 0.0, 0
    replicas = start_replicas(generation)
    try:
        while todo and len(steps) < max_steps:
            r = todo.pop(0)
            step = measure_step(
                replicas,
                rate,
                sent,
                r,
                warmup_s,
                window_s,
                deficit,
                ticks_per_s,
                group_partitions,
                sample_hz,
                probe,
            )
            steps.append(step)
            step["caught_up_after_s"], missing = drain(replicas, rate, sent, drain_s, deficit)
            deficit += max(0.0, missing)
            step["not_modelled_after_drain"] = round(missing)
            print(f"  {len(replicas)} replica(s) {r:>7,}/s: {_brief(step)}", flush=True)
            if not fixed:
                held = [s["commits_per_s"] for s in steps if s["sustained"]]
                missed = [s["commits_per_s"] for s in steps if not s["sustained"]]
                if not missed:
                    todo.append(r * 2)
                elif held and min(missed) / max(held) > 1.2:
                    mid = (max(held) + min(missed)) // 2
                    if mid not in (s["commits_per_s"] for s in steps):
                        todo.append(mid)
            if todo and len(steps) < max_steps and step["caught_up_after_s"] is None:
                for p in replicas:
                    p.stop()
                generation += 1
                replicas = start_replicas(generation)
                deficit = float(sent.value)  # the new group starts at the end: all before
    finally:
        rate.value = 0.0
        for p in replicas:
            p.stop()
    return steps


def _brief(s: dict[str, Any]) -> str:
    return (
        f"consumed {s['consumed_per_s']:,}/s of {s['produced_per_s']:,}/s, "
        f"behind {s['behind_commits']:,}, p99 {s['delay_p99_s']} s, "
        f"age {s['last_sample_age_s']} s, scrape {s['scrape_s']} s "
        f"({s['full_scrapes']} in the window), host probe "
        f"{s.get('host_probe_us_per_group_partition')} us, "
        f"samples {s['samples_modelled_per_s']}/s ({s['samples_dropped']} dropped), "
        f"cpu {s['cpu_cores']} ({s['cpu_us_per_commit']} us/commit; by replica "
        f"{s['cpu_cores_by_replica']}, topics {s.get('topics_by_replica')}), "
        f"rss {s['rss_mib']} MiB, "
        f"false alarms {s['false_alarms']}, load {s['load_average'][1][0]}"
        f", caught up {s['caught_up_after_s']} s after -> {'held' if s['sustained'] else 'MISSED'}"
    )
