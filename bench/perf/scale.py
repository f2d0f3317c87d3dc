"""Scale benchmark: how many commits/s one pipeline process (and two replicas) keep up with.

Shape (default, issue 16's target for one replica): 50 topics x 50 partitions = 2,500
partitions, 100 consumer groups (250,000 group-partitions), the watermarks sampled every
250 ms, every group committing every partition it consumes every 5 s = 50,000 commits/s
steady. Everything is real:

- a **generator** process writes ``OffsetCommit`` records (key type 1, value v3: the bytes
  Kafka writes) into this run's own offsets topic (50 partitions, compacted, a group's
  records in one partition, like ``__consumer_offsets``) at a scheduled rate, with offsets
  that reach each partition's acknowledged end: it also produces a trickle (a message
  every 5 s, sent in bursts) into each of the partitions, so the high watermarks move;
- the **pipeline** is ``python -m pipeline`` (policy off) reading that topic as its
  ``LAGPILOT_OFFSETS_TOPIC``, with its watermark sampler on the 2,500 partitions. Its
  internal topics get run-unique names (the runner sets ``schemas.topics.WATERMARKS`` and
  ``LAG`` before start), so the benchmark neither reads nor floods the shared
  ``lagpilot.*`` topics that other pipelines on the same broker use.

The commit rate steps up (doubling from ``--start-rate``, then one step between the last
rate held and the first missed). A step holds when, over its measured window, the
processing delay p99 (``lagpilot_processing_delay_seconds``: sample -> modelled) is
<= 1 s and the model ends the window less than 1 s of commits behind the generator
(``lagpilot_model_inputs_total{event="commit"}`` against commits produced), and no
healthy group was reported in trouble (0 non-OK lag events: every group of the load
commits on time, so each is a false alarm). CPU is
utime+stime of the pipeline's process tree (the Quix source and the metrics renderer run
in child processes, the sampler in a grandchild) over the window, RSS the sum over the
tree; each step records the machine's load average (the cores are shared). Like Prometheus, the
benchmark scrapes each replica's whole ``/metrics`` every ``--prometheus-interval-s``
(15 s, on a fixed grid; each window starts midway between two scrapes, so a 30 s window
holds exactly two and the model pays for them at Prometheus' rate); its own
reads of the counters ask for those families only (``/metrics?name[]=...``). Then the
same with two replicas (same consumer group, distinct instance ids, state dirs and
metrics ports), starting at the shape's steady rate: there each replica's CPU says how
evenly two split the work (``scaling_by_cpu``: one replica's CPU over the busier of the
two's), and the ladder climbs as far as the host lets it (``scaling_ratio``: the highest
rate two held over one's).

Writes ``bench/results/scale.json``. ``--smoke``: 2 topics x 4 partitions x 3 groups, one
10 s step (the test suite runs it).

    .venv/bin/python -m bench.perf.scale [--smoke] [--out PATH] [--rates 10000,20000]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import platform
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from bench.support import broker
from bench.support.host_probe import HostProbe
from bench.support.results import run_stamp, write_result
from bench.support.scale_load import OFFSETS_PARTITIONS, generate
from bench.support.scale_replicas import SAMPLE_INTERVAL_MS, Pipeline, wait_modelling
from bench.support.scale_result import (
    estimate,
    false_alarms,
    max_held,
    per_core,
    scaling_by_cpu,
)
from bench.support.scale_steps import (
    MAX_BEHIND_S,
    MAX_DELAY_P99_S,
    MAX_DROPPED_SHARE,
    MAX_FALSE_ALARMS,
    MIN_SAMPLES_SHARE,
    ladder,
    load_average,
)

ROOT = Path(__file__).resolve().parents[2]


def run_phase(
    args: argparse.Namespace,
    run: str,
    n_replicas: int,
    start: int,
    fixed: list[int] | None,
    probe: HostProbe | None = None,
) -> list[dict[str, Any]]:
    """Fresh offsets topic and group; generator + replicas; the step ladder."""
    phase = f"{run}-x{n_replicas}"
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    offsets_topic = f"{phase}.offsets"
    admin.create_topics(
        [NewTopic(offsets_topic, OFFSETS_PARTITIONS, 1, config={"cleanup.policy": "compact"})]
    )[offsets_topic].result(timeout=30)
    ctx = mp.get_context("spawn")
    rate, sent = ctx.Value("d", 0.0, lock=False), ctx.Value("q", 0, lock=False)
    ready, stop = ctx.Event(), ctx.Event()
    data_topics = [f"{run}-t{i}" for i in range(args.topics)]
    gen = ctx.Process(
        target=generate,
        args=(
            args.bootstrap,
            offsets_topic,
            data_topics,
            args.partitions,
            args.groups,
            f"{run}-g",
            rate,
            sent,
            ready,
            stop,
        ),
        daemon=True,
    )
    gen.start()
    if not ready.wait(60):
        raise SystemExit("generator did not start in 60 s")

    def start_replicas(generation: int) -> list[Pipeline]:
        name = f"{phase}-{generation}"
        reset = "earliest" if generation == 0 else "latest"
        replicas = [
            Pipeline(
                args.bootstrap,
                run,
                name,
                offsets_topic,
                i,
                args.profile,
                reset,
                cpu_cores=args.cpu_per_replica,
                replicas=n_replicas,
            )
            for i in range(n_replicas)
        ]
        try:
            wait_modelling(replicas, 180, args.bootstrap, name, offsets_topic)
        except BaseException:  # never leave them running: they would load the next benches
            for r in replicas:
                r.stop()
            raise
        grid = time.monotonic()  # one scrape grid for the replicas, as one Prometheus
        for r in replicas:
            r.start_prometheus(args.prometheus_interval_s, grid)
        return replicas

    try:
        steps = ladder(
            start_replicas,
            rate,
            sent,
            start,
            fixed,
            args.warmup_s,
            args.window_s,
            args.max_steps,
            ticks_per_s=args.topics * 1000 / SAMPLE_INTERVAL_MS,  # one sample a topic a tick
            group_partitions=args.topics * args.partitions * args.groups,
            sample_hz=1000 / SAMPLE_INTERVAL_MS,
            probe=probe.us_per_group_partition if probe is not None else None,
        )
        stop.set()
        gen.join(60)
        written = offsets_written(args.bootstrap, offsets_topic)
        print(f"  offsets topic holds {written:,} records; the generator sent {sent.value:,}")
        if steps:
            steps[-1]["offsets_topic_records"], steps[-1]["generator_sent"] = written, sent.value
        return steps
    finally:
        stop.set()
        gen.join(60)
        if gen.is_alive():
            gen.kill()
        if not os.environ.get("SCALE_KEEP_TOPICS"):
            # the phase's offsets topic and its replicas' internal topics (their names hold
            # the phase's): the next phase starts on a broker without their load
            mine = [t for t in admin.list_topics(timeout=10).topics if phase in t]
            admin.delete_topics(sorted({offsets_topic, *mine}))


def offsets_written(bootstrap: str, topic: str) -> int:
    """Records in the offsets topic (sum of its high watermarks): a check that what the
    model counts was written once (no compaction has run in a benchmark's minutes)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"scale-check-{uuid.uuid4().hex}"})
    try:
        return sum(
            c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(OFFSETS_PARTITIONS)
        )
    finally:
        c.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--topics", type=int, default=50)
    ap.add_argument("--partitions", type=int, default=50)
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--commit-interval-s", type=float, default=5.0)
    # 40 s: a step starts with the jump to its rate (every group-partition learnt, the
    # backlog of the jump drained); the window measures what follows, the steady state
    ap.add_argument("--warmup-s", type=float, default=40.0)
    # 30 s: two full scrapes at the default 15 s, each inside the window (see
    # ``scrape_phase``): every window pays for the scrapes at Prometheus' rate, no more
    ap.add_argument("--window-s", type=float, default=30.0)
    ap.add_argument("--max-steps", type=int, default=5)
    ap.add_argument(
        "--prometheus-interval-s",
        type=float,
        default=15.0,
        help="a full /metrics scrape of each replica this often, as Prometheus would",
    )
    ap.add_argument("--rates", help="fixed one-replica steps, e.g. 10000,20000 (no ladder)")
    ap.add_argument("--profile", default="", help="cProfile the model to <PATH>.<i>.prof")
    ap.add_argument("--no-two", action="store_true", help="skip the two-replica phase")
    ap.add_argument(
        "--no-one",
        action="store_true",
        help="skip the one-replica phase (the two-replica phase takes --rates, if given)",
    )
    ap.add_argument(
        "--cpu-per-replica",
        type=float,
        default=None,
        help="hold each replica's process tree to this many cores (cgroup v1 cpu quota): "
        "scaling measured where the host, shared with the broker and the generator, "
        "cannot be what gives out",
    )

    ap.add_argument("--smoke", action="store_true", help="tiny run for the test suite")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "scale.json"))
    args = ap.parse_args(argv)
    stamp = run_stamp()
    args.bootstrap = broker.bootstrap(args.bootstrap)
    if args.smoke:
        args.topics, args.partitions, args.groups = 2, 4, 3
        args.warmup_s, args.window_s, args.no_two = 3.0, 10.0, True
        args.prometheus_interval_s = 5.0  # two full scrapes in the window
    steady = round(args.topics * args.partitions * args.groups / args.commit_interval_s)
    fixed = [int(x) for x in args.rates.split(",")] if args.rates else None
    if args.smoke:
        fixed = [steady]
    run = f"scale-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    data_topics = [f"{run}-t{i}" for i in range(args.topics)]
    for f in admin.create_topics([NewTopic(t, args.partitions, 1) for t in data_topics]).values():
        f.result(timeout=60)
    print(
        f"{args.topics} topics x {args.partitions} partitions x {args.groups} groups, "
        f"steady {steady:,} commits/s",
        flush=True,
    )
    probe = HostProbe()  # the host's speed next to each step (changes no verdict)
    try:
        one = [] if args.no_one else run_phase(args, run, 1, steady, fixed, probe)
        one_max = max_held(one)
        two: list[dict[str, Any]] = []
        if not args.no_two:
            # from the shape's steady rate (how two replicas split its work), up
            two = run_phase(args, run, 2, steady, fixed if args.no_one else None, probe)
    finally:
        leftovers = [
            t for t in admin.list_topics(timeout=10).topics if t.startswith(run) or run in t
        ]
        with contextlib.suppress(Exception):
            if not os.environ.get("SCALE_KEEP_TOPICS"):  # kept to inspect a run's events
                admin.delete_topics(leftovers)
    at_steady = next((s for s in one if s["commits_per_s"] == steady), one[0] if one else {})
    two_max = max_held(two) if two else None
    shape_gp = args.topics * args.partitions * args.groups
    result: dict[str, Any] = {
        "partitions": args.topics * args.partitions,
        "groups": args.groups,
        "topics": args.topics,
        "sample_interval_ms": SAMPLE_INTERVAL_MS,
        "steady_commit_rate": steady,
        "one_replica": {
            "max_sustained_commits_per_s": one_max,
            "cpu_cores": at_steady.get("cpu_cores"),
            "rss_mib": at_steady.get("rss_mib"),
            "delay_p99_s": at_steady.get("delay_p99_s"),
            "last_sample_age_s": at_steady.get("last_sample_age_s"),
            "scrape_s": at_steady.get("scrape_s"),
            "steady_held": at_steady.get("sustained"),
            "false_alarms": at_steady.get("false_alarms"),
            # bench.perf.model's tick on the host as the shape's window began (the unit of
            # bench/results/model.json's columnar_us_per_group_partition, an idle host's)
            "host_probe_us_per_group_partition": at_steady.get("host_probe_us_per_group_partition"),
            "steps": one,
        },
        "two_replicas": {"max_sustained_commits_per_s": two_max, "steps": two},
        "scaling_ratio": round(two_max / one_max, 2) if two_max and one_max else None,
        "scaling_by_cpu": scaling_by_cpu(one, two, steady),
        **per_core(one, steady),
        "false_alarms": false_alarms(one) + false_alarms(two),
        **estimate(one, two, steady, shape_gp, args.commit_interval_s),
        "criteria": {
            "delay_p99_s_max": MAX_DELAY_P99_S,
            "behind_s_max": MAX_BEHIND_S,
            "samples_dropped_share_max": MAX_DROPPED_SHARE,
            "samples_modelled_share_min": MIN_SAMPLES_SHARE,
            "false_alarms_max": MAX_FALSE_ALARMS,
        },
        "load_average_at_end": load_average(),
        "window_s": args.window_s,
        "cpu_per_replica": args.cpu_per_replica,
        "pipeline_env": {  # pipeline settings this run overrode (LAGPILOT_* in its env)
            k: v for k, v in sorted(os.environ.items()) if k.startswith("LAGPILOT_")
        },
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    result = write_result(args.out, result, stamp)
    split = result["scaling_by_cpu"] or {}
    print(
        f"one replica: {one_max:,} commits/s held; two replicas: {two_max}; "
        f"ratio {result['scaling_ratio']}; by CPU at the shape {split.get('ratio')} "
        f"(topics {split.get('topics_by_replica')}; if even {split.get('ratio_if_even')}); "
        f"10k x 100 needs {result['replicas_for_10k_x_100']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
