"""Soak: the pipeline under a realistic load for an hour, with an incident every few minutes.

The load (``bench/support/soak_load.py``): ``--topics`` x ``--partitions`` partitions
(20 x 50 = 1,000), ``--groups`` consumer groups (20) that each read every partition and
commit every partition every second (20,000 commits/s through the broker's own
``__consumer_offsets``), the first ``--progress-groups`` of them reporting worker progress
as the SDK does. The pipeline is ``python -m pipeline`` with the shipped defaults and the
shipped policy (``deploy/policy.default.toml``, byte for byte) on its own consumer group
and topics (``<run>.watermarks``, ``<run>.lag``, ``lagpilot.control.<run>``); no actuator
runs, so the policy's actions are recorded, not applied, and the load stays what the
benchmark drives.

From ``--first-incident-s`` on, every ``--incident-every-s`` an incident starts for
``--incident-s``, in turn: a **stall** (a group processes and commits nothing), a
**hotspot** (one partition's produce rate x ``HOT_FACTOR``, beyond what its consumers
process) and a **flood** (every partition of one topic x ``HOT_FACTOR``). Reported
(``bench/support/soak_judge.py``): each incident's verdict (kind, injected_at,
detected_after_s, action, recovered), ``false_alarms`` (non-OK statuses of cells no
incident explains), ``missed_incidents``, detection p99 overall and over the incidents of
the first and the last window, and ``rss_growth_pct`` of the pipeline's process tree
(sampled every ``RSS_EVERY_S``): the last window's median against the first window's,
the first starting after ``--warmup-s``. It starts a broker of its own (port
``OWN_BROKER_PORT``, its own run folder, stopped at the end), so its ``__consumer_offsets``
holds its own commits alone, unless ``--bootstrap`` names one. Windows are 10 minutes,
less for short runs (``soak_judge.windows``). Targets: RSS growth < 10 %, 0 false alarms,
0 missed, the last window's detection p99 <= the first's x 1.5 + 0.5 s.

    .venv/bin/python -m bench.perf.soak [--minutes 60] [--out PATH]   # soak.json in bench/results
    .venv/bin/python -m bench.perf.soak --smoke        # ~1.5 minutes, a tiny load, one stall
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer

from bench.faults.doc import RELIABILITY_MD, SOAK_JSON, write_page
from bench.support import broker
from bench.support.control_loop import DEFAULT_POLICY, DEMO_KEY, policy_sha256, read_topic
from bench.support.harness import free_port
from bench.support.results import run_stamp, write_result
from bench.support.scale_probes import process_tree, rss_bytes
from bench.support.soak_judge import (
    Incident,
    StatusEvent,
    detection,
    false_alarms,
    rss_growth_pct,
    targets_met,
    verdict,
    windows,
)
from bench.support.soak_load import SoakLoad
from bench.support.swarm import ensure_topic

ROOT = Path(__file__).resolve().parents[2]
#: the soak's own broker (stopped at the end), unless --bootstrap names one
OWN_BROKER_PORT = 28092
RSS_EVERY_S = 10.0
HOT_FACTOR = 8.0  # a hotspot's or a flood's produce rate, x the usual; consumers do 5x
KINDS = ("stall", "hotspot", "flood")
#: runs the pipeline entry point with this run's watermarks and lag topics
RUNNER = """
import sys
from schemas import topics
topics.WATERMARKS, topics.LAG = sys.argv[1], sys.argv[2]
from pipeline.__main__ import main
sys.exit(main(["--log-level", "WARNING"]))
"""


class StatusReader:
    """Reads ``<run>.lag`` in a thread and keeps each cell's status changes (a cell's
    first status, then each change): an hour of events holds no more than that."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.changes: list[StatusEvent] = []
        self.last: dict[tuple[str, str, int], str] = {}
        self.events = 0
        self._stop = threading.Event()
        self._c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"soak-{uuid.uuid4().hex}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                # the topic appears once the pipeline starts: look for it again soon
                "topic.metadata.refresh.interval.ms": 2000,
            }
        )
        self._t = threading.Thread(target=self._run, daemon=True)

    def start(self) -> StatusReader:
        self._c.subscribe([self.topic])
        self._t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._t.join(30)
        self._c.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            for msg in self._c.consume(500, timeout=0.5):
                if msg.error():
                    continue
                now = time.time()
                try:
                    e = orjson.loads(msg.value())
                except orjson.JSONDecodeError:
                    continue
                kind = e.get("event")
                if kind == "partition_lag":
                    cell = (e["group"], e["topic"], int(e["partition"]))
                elif kind == "group_lag":
                    cell = (e["group"], e["topic"], -1)
                else:
                    continue
                self.events += 1
                status = str(e.get("status"))
                if self.last.get(cell) != status:
                    self.last[cell] = status
                    self.changes.append(StatusEvent(now, cell, status))


def start_pipeline(bootstrap: str, run: str, state: Path, include: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP": bootstrap,
        "LAGPILOT_CONSUMER_GROUP": f"soak-{run}",
        "LAGPILOT_STATE_DIR": str(state / "state"),
        "LAGPILOT_INCLUDE": include,
        "LAGPILOT_METRICS_PORT": str(free_port()),
        "LAGPILOT_POLICY_FILE": str(DEFAULT_POLICY),
        "LAGPILOT_CONTROL_TOPIC": f"lagpilot.control.{run}",
        "LAGPILOT_OUTCOMES_TOPIC": f"lagpilot.outcomes.{run}",
        "LAGPILOT_SIGNING_KEY": os.environ.get("LAGPILOT_SIGNING_KEY", DEMO_KEY),
    }
    with open(state / "pipeline.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-c", RUNNER, f"{run}.watermarks", f"{run}.lag"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def cells_of(load: SoakLoad, kind: str, group: str, topic: str, partition: int) -> frozenset[Any]:
    """The cells an incident troubles (``soak_judge``: group summaries as partition -1)."""
    if kind == "stall":
        parts = [(group, t, p) for t, p in load.tps] + [(group, t, -1) for t in load.topics]
    elif kind == "hotspot":
        parts = [(g, topic, q) for g in load.groups for q in (partition, -1)]
    else:
        parts = [(g, topic, q) for g in load.groups for q in [*range(load.partitions), -1]]
    return frozenset(parts)


def inject(load: SoakLoad, kind: str, group: str, topic: str, partition: int, on: bool) -> None:
    if kind == "stall":
        load.stall(group, on)
    elif kind == "hotspot":
        load.set_multiplier([(topic, partition)], HOT_FACTOR if on else 1.0)
    else:
        load.set_multiplier([(topic, p) for p in range(load.partitions)], HOT_FACTOR if on else 1.0)


def run(args: argparse.Namespace, bootstrap: str) -> dict[str, Any]:
    run_id = f"soak-{uuid.uuid4().hex[:6]}"
    rng = random.Random(args.seed)
    load = SoakLoad(
        bootstrap,
        run_id,
        topics=args.topics,
        partitions=args.partitions,
        groups=args.groups,
        rate=args.rate,
        progress_groups=args.progress_groups,
    )
    load.create_topics()
    ensure_topic(bootstrap, f"lagpilot.control.{run_id}", 1)
    ensure_topic(bootstrap, f"lagpilot.outcomes.{run_id}", 1)
    digest = policy_sha256(DEFAULT_POLICY)
    work = Path(tempfile.mkdtemp(prefix="lagpilot-soak-"))
    duration_s = args.minutes * 60
    warmup_s = min(args.warmup_s, duration_s * 0.2)
    wins = windows(duration_s, warmup_s, args.window_s)
    load.start()
    pipe = start_pipeline(bootstrap, run_id, work, f"{run_id}-t.*")
    reader = StatusReader(bootstrap, f"{run_id}.lag").start()
    incidents: list[Incident] = []
    rss: list[tuple[float, int]] = []
    t0 = time.time()
    try:
        next_rss = 0.0
        next_incident = args.first_incident_s
        current: tuple[Incident, Any] | None = None
        k = 0
        while (elapsed := time.time() - t0) < duration_s:
            time.sleep(0.2)
            if pipe.poll() is not None:
                raise RuntimeError(f"the pipeline exited ({pipe.returncode}); see {work}")
            if elapsed >= next_rss:
                next_rss += RSS_EVERY_S
                rss.append((round(elapsed, 1), rss_bytes(process_tree(pipe.pid))))
            if current and elapsed >= current[0].injected_at - t0 + args.incident_s:
                inc, where = current
                inject(load, inc.kind, *where, on=False)
                inc.ended_at = time.time()
                current = None
            ends_by = elapsed + args.incident_s + args.recover_s
            if current is None and elapsed >= next_incident and ends_by <= duration_s:
                kind = KINDS[k % len(KINDS)]
                k += 1
                where = (
                    rng.choice(load.groups),
                    rng.choice(load.topics),
                    rng.randrange(load.partitions),
                )
                named = {"group": where[0], "topic": where[1], "partition": where[2]}
                keys = {"stall": ("group",), "hotspot": ("topic", "partition")}
                target = {k: named[k] for k in keys.get(kind, ("topic",))}
                inc = Incident(kind, time.time(), None, cells_of(load, kind, *where), target)
                inject(load, kind, *where, on=True)
                incidents.append(inc)
                current = (inc, where)
                next_incident += args.incident_every_s
                print(f"  {elapsed:7.1f}s  {kind} {inc.target}", flush=True)
    finally:
        reader.stop()
        pipe.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            pipe.wait(30)
        if pipe.poll() is None:
            pipe.kill()
        load.stop()
    actions = []
    for a in read_topic(bootstrap, f"lagpilot.control.{run_id}"):
        if a.get("event") == "action":
            a["_received"] = float(a.get("issued_at", 0)) / 1000
            a["_about"] = f"{a.get('target')} {orjson.dumps(a.get('reason')).decode()}"
            actions.append(a)
    end = time.time()
    verdicts = [verdict(i, reader.changes, actions, end) for i in incidents]
    alarms = false_alarms(reader.changes, incidents)
    result: dict[str, Any] = {
        "minutes": args.minutes,
        "shape": {
            "topics": args.topics,
            "partitions": args.partitions,
            "groups": args.groups,
            "rate_per_partition": args.rate,
            "progress_groups": load.progress_groups,
            "commit_every_s": load.commit_every_s,
        },
        "commits_per_s": round(load.commits / duration_s),
        "commit_errors": load.commit_errors,
        "produced": load.produced,
        "policy_sha256": digest,
        "warmup_s": warmup_s,
        "windows_s": wins,
        "incidents": verdicts,
        "incidents_injected": len(verdicts),
        "missed_incidents": sum(1 for v in verdicts if not v["detected"]),
        "not_recovered": sum(1 for v in verdicts if not v["recovered"]),
        "false_alarms": len(alarms),
        "false_alarm_cells": sorted({"/".join(map(str, e.cell)) for e in alarms})[:20],
        # which groups and statuses: a progress group's alarms with none elsewhere point at
        # its reports (the harness) rather than the pipeline
        "false_alarms_by_group": dict(Counter(e.cell[0] for e in alarms).most_common()),
        "false_alarms_by_status": dict(Counter(e.status for e in alarms)),
        "progress_group_names": load.groups[: load.progress_groups],
        "lag_events_read": reader.events,
        "actions": len(actions),
        "rss_samples": [{"t_s": t, "rss_mib": round(b / 2**20, 1)} for t, b in rss],
        **rss_growth_pct(rss, *wins.values()),
        **detection(verdicts, t0, wins),
    }
    result["targets_met"] = targets_met(result)
    with contextlib.suppress(Exception):
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": bootstrap})
        mine = [t for t in admin.list_topics(timeout=10).topics if run_id in t]
        admin.delete_topics(sorted(mine))
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=float(os.environ.get("SOAK_MINUTES", "60")))
    ap.add_argument("--topics", type=int, default=20)
    ap.add_argument("--partitions", type=int, default=50)
    ap.add_argument("--groups", type=int, default=20)
    ap.add_argument("--rate", type=float, default=1.0, help="messages/s per partition")
    ap.add_argument("--progress-groups", type=int, default=2)
    ap.add_argument("--warmup-s", type=float, default=300.0)
    ap.add_argument("--window-s", type=float, default=600.0)
    ap.add_argument("--first-incident-s", type=float, default=120.0)
    ap.add_argument("--incident-every-s", type=float, default=180.0)
    ap.add_argument("--incident-s", type=float, default=45.0)
    ap.add_argument(
        "--recover-s",
        type=float,
        default=60.0,
        help="no incident starts later than this before the end",
    )
    ap.add_argument("--seed", type=int, default=47)
    ap.add_argument(
        "--bootstrap",
        default=None,
        help=f"a running broker (default: one of its own on port {OWN_BROKER_PORT})",
    )
    ap.add_argument("--smoke", action="store_true", help="~1.5 minutes, tiny load, one stall")
    ap.add_argument("--out", type=Path, default=SOAK_JSON)
    args = ap.parse_args(argv)
    if args.smoke:
        args.minutes, args.topics, args.partitions, args.groups = 1.5, 2, 4, 2
        args.rate, args.progress_groups = 5.0, 1
        args.warmup_s, args.window_s = 20.0, 30.0
        args.first_incident_s, args.incident_s, args.recover_s = 35.0, 15.0, 35.0
    stamp = run_stamp()
    if args.bootstrap:
        got = run(args, broker.bootstrap(args.bootstrap))
    else:  # a fresh broker: its __consumer_offsets holds this run's commits alone
        with broker.own_broker(OWN_BROKER_PORT) as own:
            got = run(args, own.bootstrap)
    result = write_result(args.out, got | {"smoke": args.smoke}, stamp)
    if args.out.resolve() == SOAK_JSON.resolve():
        write_page()  # docs/reliability.md's soak section is written from this file
        print(f"rewrote {RELIABILITY_MD}")
    for v in result["incidents"]:
        print(
            f"  {v['kind']:<8} detected after {v['detected_after_s']} s, action "
            f"{v['action']}, recovered {v['recovered']}"
        )
    print(
        f"rss growth {result['rss_growth_pct']} %, false alarms {result['false_alarms']}, "
        f"missed {result['missed_incidents']} of {result['incidents_injected']}, detection p99 "
        f"{result['detection_p99_s']} s (first {result['detection_p99_first_s']}, last "
        f"{result['detection_p99_last_s']}); targets {result['targets_met']}; wrote {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
