"""Scale benchmark: how many commits/s one pipeline process (and two replicas) keep up with.

Shape (default): 20 topics x 50 partitions = 1,000 partitions, 50 consumer groups, the
watermarks sampled every 250 ms, every group committing every partition it consumes every
5 s = 10,000 commits/s steady. Everything is real:

- a **generator** process writes ``OffsetCommit`` records (key type 1, value v3: the bytes
  Kafka writes) into this run's own offsets topic (50 partitions, compacted, a group's
  records in one partition, like ``__consumer_offsets``) at a scheduled rate, with offsets
  that advance below each partition's high watermark: it also produces a trickle (1
  message/s) into each of the 1,000 partitions, so the high watermarks move;
- the **pipeline** is ``python -m pipeline`` (policy off) reading that topic as its
  ``LAGPILOT_OFFSETS_TOPIC``, with its watermark sampler on the 1,000 partitions. Its
  internal topics get run-unique names (the runner sets ``schemas.topics.WATERMARKS`` and
  ``LAG`` before start), so the benchmark neither reads nor floods the shared
  ``lagpilot.*`` topics that other pipelines on the same broker use.

The commit rate steps up (doubling from ``--start-rate``, then one step between the last
rate held and the first missed). A step holds when, over its measured window, the
processing delay p99 (``lagpilot_processing_delay_seconds``: sample -> modelled) is
<= 1 s and the model ends the window less than 1 s of commits behind the generator
(``lagpilot_model_inputs_total{event="commit"}`` against commits produced). CPU is
utime+stime of the pipeline's process tree (the Quix source and the metrics renderer run
in child processes) over the window, RSS the sum over the tree. Like Prometheus, the
benchmark scrapes each replica's whole ``/metrics`` every ``--prometheus-interval-s``
(15 s: one or two full scrapes land in each window, and the model pays for them); its own
reads of the counters ask for those families only (``/metrics?name[]=...``). Then the
same with two replicas (same consumer group, distinct instance ids, state dirs and
metrics ports), starting at one's rate.

Writes ``bench/results/scale.json``. ``--smoke``: 2 topics x 4 partitions x 3 groups, one
10 s step (the test suite runs it).

    .venv/bin/python -m bench.scale [--smoke] [--out PATH] [--rates 10000,20000]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import multiprocessing as mp
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parents[1]

from bench.scale_support import (  # noqa: E402
    CLK_TCK,
    OFFSETS_PARTITIONS,
    Scrape,
    cpu_ticks,
    generate,
    process_tree,
    quantile,
    rss_bytes,
    scrape,
)
from bench.support import broker  # noqa: E402

MAX_DELAY_P99_S = 1.0
MAX_BEHIND_S = 1.0
MAX_DROPPED_SHARE = 0.01  # samples dropped because the commits reader was behind
SAMPLE_INTERVAL_MS = 250
MIN_SAMPLES_SHARE = 0.95  # samples modelled, of one per topic per tick (a starved sampler skips)

#: Runs the real pipeline entry point with this run's internal topic names; with
#: ``SCALE_PROFILE=<path>`` in its environment, under cProfile (the main thread: the model)
#: until SIGUSR1 writes the profile.
_RUNNER = """
import cProfile, os, signal, sys
from schemas import topics
topics.WATERMARKS, topics.LAG = sys.argv[1], sys.argv[2]
from pipeline.__main__ import main
out = os.environ.get("SCALE_PROFILE")
prof = cProfile.Profile() if out else None
def dump(*_):
    prof.disable()
    prof.dump_stats(out)
if prof:
    signal.signal(signal.SIGUSR1, dump)  # the bench sends it before it stops the pipeline
    prof.enable()
sys.exit(main(["--log-level", "WARNING"]))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- the run


class Pipeline:
    """One ``python -m pipeline`` replica with this run's topic names."""

    def __init__(
        self,
        bootstrap: str,
        run: str,
        name: str,
        offsets_topic: str,
        i: int,
        profile: str = "",
        reset: str = "earliest",
    ) -> None:
        """``name`` names its consumer group and internal topics (not ``lagpilot*``: the
        commits it reads are not its own); ``reset`` where a new group starts."""
        self.state = tempfile.mkdtemp(prefix=f"scale-{i}-")
        self.port = _free_port()
        self.log = Path(self.state) / "pipeline.log"
        self.profile, self.i = profile, i
        env = {
            **os.environ,
            "KAFKA_BOOTSTRAP": bootstrap,
            "LAGPILOT_OFFSETS_TOPIC": offsets_topic,
            "LAGPILOT_CONSUMER_GROUP": name,
            "LAGPILOT_INSTANCE_ID": f"{name}-r{i}",
            "LAGPILOT_STATE_DIR": self.state,
            "LAGPILOT_INCLUDE": f"{run}-t.*",
            "LAGPILOT_METRICS_PORT": str(self.port),
            "LAGPILOT_RUN_POLICY": "false",
            "LAGPILOT_SAMPLE_INTERVAL_MS": str(SAMPLE_INTERVAL_MS),
            "LAGPILOT_AUTO_OFFSET_RESET": reset,
        }
        if profile:
            env["SCALE_PROFILE"] = f"{profile}.{i}.prof"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _RUNNER, f"{name}.watermarks", f"{name}.lag"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def scrape(self) -> Scrape:
        return scrape(self.port)

    def start_prometheus(self, interval_s: float) -> None:
        """Scrape the whole /metrics every ``interval_s`` from now on, as Prometheus does
        (every lag family rendered: the model pays for it while the step is measured)."""
        self._prom_stop = threading.Event()
        self.prom_scrape_s: list[tuple[float, float]] = []  # (when, seconds it took)

        def loop() -> None:
            while not self._prom_stop.wait(interval_s):
                t0 = time.monotonic()
                with contextlib.suppress(OSError):
                    scrape(self.port, full=True)
                    self.prom_scrape_s.append((t0, time.monotonic() - t0))

        threading.Thread(target=loop, daemon=True).start()

    def stop(self) -> None:
        if getattr(self, "_prom_stop", None) is not None:
            self._prom_stop.set()
        tree = process_tree(self.proc.pid)
        if self.profile:
            out = Path(f"{self.profile}.{self.i}.prof")
            out.unlink(missing_ok=True)
            self.proc.send_signal(signal.SIGUSR1)
            deadline = time.monotonic() + 60
            while not out.exists() and time.monotonic() < deadline:
                time.sleep(0.5)
            time.sleep(2)  # written through
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            for pid in tree:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, 9)
            self.proc.wait()
        shutil.rmtree(self.state, ignore_errors=True)

    def tail(self) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])
        return ""


def sources_assigned(bootstrap: str, group: str, members: int, offsets_topic: str) -> bool:
    """The commits sources' consumer group is stable, ``members`` strong, and holds every
    partition of the offsets topic."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        d = admin.describe_consumer_groups([group])[group].result(timeout=5)
    except Exception:  # not created yet, or the coordinator is moving: ask again
        return False
    parts = {
        tp.partition
        for m in d.members
        for tp in m.assignment.topic_partitions
        if tp.topic == offsets_topic
    }
    return len(d.members) == members and len(parts) == OFFSETS_PARTITIONS


def wait_modelling(
    replicas: list[Pipeline], timeout_s: float, bootstrap: str, name: str, offsets_topic: str
) -> None:
    """Until every replica's model has taken in watermark samples for 3 s in a row and the
    commits sources hold every offsets partition.

    Nothing is committed yet: every commit the generator writes afterwards is then read
    by a running source (a fresh replica set reads from the end), so none is coalesced
    away in a start-up backlog and the count of commits modelled can be held against the
    count produced."""
    deadline, steady_since = time.monotonic() + timeout_s, None
    last = [0.0] * len(replicas)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        try:
            now = [r.scrape().watermarks for r in replicas]
        except OSError:
            now = [0.0] * len(replicas)
        if all(n > prev > 0 for n, prev in zip(now, last, strict=True)):
            steady_since = steady_since or time.monotonic()
            if time.monotonic() - steady_since >= 3 and sources_assigned(
                bootstrap, f"{name}.offsets", len(replicas), offsets_topic
            ):
                time.sleep(1)  # positions are resolved just after the assignment
                return
        else:
            steady_since = None
        last = now
        for r in replicas:
            if r.proc.poll() is not None:
                raise SystemExit(f"pipeline exited ({r.proc.returncode}):\n{r.tail()}")
    raise SystemExit(f"pipeline not modelling after {timeout_s}s:\n{replicas[0].tail()}")


def measure_step(
    replicas: list[Pipeline],
    rate: Any,
    sent: Any,
    commits_per_s: int,
    warmup_s: float,
    window_s: float,
    deficit0: float = 0.0,
    ticks_per_s: float = 0.0,
) -> dict[str, Any]:
    """Set the rate, let it settle for ``warmup_s``, then measure ``window_s``.

    ``deficit0``: commits produced but not modelled when the previous step had drained
    (commits coalesced in a backlog, or never caught up): not this step's doing."""
    rate.value = float(commits_per_s)
    time.sleep(warmup_s)
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
    ticks = sum(c1[p] - c0[p] for c0, c1 in zip(cpu0, cpu1, strict=True) for p in c1 if p in c0)
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
    sustained = (
        not math.isnan(p99)
        and p99 <= MAX_DELAY_P99_S
        and behind <= max(commits_per_s * MAX_BEHIND_S, 1)
        and dropped <= MAX_DROPPED_SHARE * (samples + dropped)
        and samples / elapsed >= MIN_SAMPLES_SHARE * ticks_per_s
    )
    return {
        "commits_per_s": commits_per_s,
        "produced_per_s": round((sent1 - sent0) / elapsed),
        "consumed_per_s": round(consumed / elapsed),
        "produced": sent1 - sent0,
        "consumed": round(consumed),
        "behind_commits": round(behind),
        "delay_p50_s": round(quantile(0.5, before, after), 3),
        "delay_p99_s": round(p99, 3),
        "last_sample_age_s": round(max(b.sample_age_s for b in s1), 3),
        "scrape_s": round(scrape_s, 2),  # the slowest full scrape in the window
        "full_scrapes": len(full),
        "cpu_cores": round(ticks / CLK_TCK / elapsed, 3),
        "cpu_cores_model_process": round(main_ticks / CLK_TCK / elapsed, 3),
        "rss_mib": round(rss / 2**20, 1),
        "samples_modelled_per_s": round(samples / elapsed, 1),
        "samples_dropped": round(dropped),
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
            step = measure_step(replicas, rate, sent, r, warmup_s, window_s, deficit, ticks_per_s)
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
        f"age {s['last_sample_age_s']} s, scrape {s['scrape_s']} s, "
        f"samples {s['samples_modelled_per_s']}/s ({s['samples_dropped']} dropped), "
        f"cpu {s['cpu_cores']}, rss {s['rss_mib']} MiB"
        f", caught up {s['caught_up_after_s']} s after -> {'held' if s['sustained'] else 'MISSED'}"
    )


def run_phase(
    args: argparse.Namespace,
    run: str,
    n_replicas: int,
    start: int,
    fixed: list[int] | None,
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
            Pipeline(args.bootstrap, run, name, offsets_topic, i, args.profile, reset)
            for i in range(n_replicas)
        ]
        wait_modelling(replicas, 90, args.bootstrap, name, offsets_topic)
        for r in replicas:
            r.start_prometheus(args.prometheus_interval_s)
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


def max_held(steps: list[dict[str, Any]]) -> int:
    """The highest rate held, below every rate missed (a lucky step above a miss
    does not count)."""
    missed = min((s["commits_per_s"] for s in steps if not s["sustained"]), default=math.inf)
    held = [s["commits_per_s"] for s in steps if s["sustained"] and s["commits_per_s"] < missed]
    return max(held, default=0)


def pipeline_replicas_needed(
    group_partitions_per_replica: float,
    commits_per_replica: float,
    partitions: int,
    groups: int,
    commit_s: float,
    headroom: float = 0.7,
) -> int:
    """Replicas for ``partitions`` x ``groups`` committing every ``commit_s``: whichever
    binds, the group-partitions a replica models at the sampling rate or the commits it
    takes in, each replica loaded to ``headroom`` of what it was measured to hold."""
    group_partitions = partitions * groups
    by_model = group_partitions / (group_partitions_per_replica * headroom)
    by_commits = group_partitions / commit_s / (commits_per_replica * headroom)
    return max(1, math.ceil(max(by_model, by_commits)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--topics", type=int, default=20)
    ap.add_argument("--partitions", type=int, default=50)
    ap.add_argument("--groups", type=int, default=50)
    ap.add_argument("--commit-interval-s", type=float, default=5.0)
    ap.add_argument("--warmup-s", type=float, default=8.0)
    ap.add_argument("--window-s", type=float, default=20.0)
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
    ap.add_argument("--smoke", action="store_true", help="tiny run for the test suite")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "scale.json"))
    args = ap.parse_args(argv)
    args.bootstrap = broker.bootstrap(args.bootstrap)
    if args.smoke:
        args.topics, args.partitions, args.groups = 2, 4, 3
        args.warmup_s, args.window_s, args.no_two = 3.0, 10.0, True
        args.prometheus_interval_s = 4.0  # full scrapes land in the window
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
    try:
        one = run_phase(args, run, 1, steady, fixed)
        one_max = max_held(one)
        two: list[dict[str, Any]] = []
        if not args.no_two:
            two = run_phase(args, run, 2, max(one_max, steady), None)
    finally:
        leftovers = [
            t for t in admin.list_topics(timeout=10).topics if t.startswith(run) or run in t
        ]
        with contextlib.suppress(Exception):
            if not os.environ.get("SCALE_KEEP_TOPICS"):  # kept to inspect a run's events
                admin.delete_topics(leftovers)
    at_steady = next((s for s in one if s["commits_per_s"] == steady), one[0])
    two_max = max_held(two) if two else None
    # what a replica holds, from measured runs only: if one replica held the shape, the
    # lower of one alone and half of two together; if it took two, half of what they held
    # (each models half the topics: the sampling is split by topic)
    shape_gp = args.topics * args.partitions * args.groups
    two_steady = next((s for s in two if s["commits_per_s"] == steady), None)
    per_replica, gp_per_replica, basis = 0.0, 0.0, None
    if at_steady["sustained"]:
        per_replica = min(one_max, two_max / 2) if two_max else float(one_max)
        gp_per_replica, basis = shape_gp, "one replica held the shape"
    elif two_max and two_steady is not None and two_steady["sustained"]:
        per_replica, gp_per_replica = two_max / 2, shape_gp / 2
        basis = "two replicas held the shape (one did not): each counted as half of them"
    result: dict[str, Any] = {
        "partitions": args.topics * args.partitions,
        "groups": args.groups,
        "sample_interval_ms": SAMPLE_INTERVAL_MS,
        "steady_commit_rate": steady,
        "one_replica": {
            "max_sustained_commits_per_s": one_max,
            "cpu_cores": at_steady["cpu_cores"],
            "rss_mib": at_steady["rss_mib"],
            "delay_p99_s": at_steady["delay_p99_s"],
            "last_sample_age_s": at_steady["last_sample_age_s"],
            "scrape_s": at_steady["scrape_s"],
            "steady_held": at_steady["sustained"],
            "steps": one,
        },
        "two_replicas": {"max_sustained_commits_per_s": two_max, "steps": two},
        "scaling_ratio": round(two_max / one_max, 2) if two_max and one_max else None,
        "replicas_for_10k_x_100": (
            pipeline_replicas_needed(
                gp_per_replica, per_replica, 10_000, 100, args.commit_interval_s
            )
            if basis
            else None
        ),
        "replicas_basis": basis,
        "criteria": {
            "delay_p99_s_max": MAX_DELAY_P99_S,
            "behind_s_max": MAX_BEHIND_S,
            "samples_dropped_share_max": MAX_DROPPED_SHARE,
            "samples_modelled_share_min": MIN_SAMPLES_SHARE,
        },
        "window_s": args.window_s,
        "pipeline_env": {  # pipeline settings this run overrode (LAGPILOT_* in its env)
            k: v for k, v in sorted(os.environ.items()) if k.startswith("LAGPILOT_")
        },
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    print(
        f"one replica: {one_max:,} commits/s held; two replicas: {two_max}; "
        f"ratio {result['scaling_ratio']}; 10k x 100 needs {result['replicas_for_10k_x_100']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
