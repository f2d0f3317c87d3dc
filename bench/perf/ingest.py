"""End-to-end throughput of one pipeline process on offset commits, against a raw consume.

A topic is filled with N real ``__consumer_offsets`` records (OffsetCommitKey v1 +
OffsetCommitValue v3, the bytes Kafka writes) from G groups over T topics of P partitions.
Then, in one run:

- ``raw``: a plain confluent-kafka consume loop reads the N records (no decoding): what the
  client alone costs;
- ``pipeline``: ``python -m pipeline`` (one process, sampler on) reads the same topic as its
  offsets topic: every record is decoded, re-keyed by topic, and applied to the lag model,
  which emits lag on every sample. The pipeline is started first, on the empty topic; the
  N records are written once it is live, and the clock runs from the first written until
  the model has consumed the batch that holds the N-th record
  (``lagpilot_coordinator_records_total{kind="commit"}``: the source's count of decoded
  records travels in each batch's header). Counting the model's commit entries instead
  would undercount: coalescing merges repeated group-partitions. ``fill_s`` is how long
  writing the records took: the pipeline cannot finish before it.

Writes ``bench/results/ingest.json`` with ``pipeline_rps``, ``raw_rps`` and ``ratio``
(raw / pipeline: the framework's cost). Target: ``pipeline_rps`` >= 25,000 commits/s.

    .venv/bin/python -m bench.perf.ingest [--records N] [--smoke] [--out PATH]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.support import broker
from bench.support.machine import load_avg_1m
from bench.support.results import run_stamp, write_result
from bench.support.scale_load import commit_key, commit_value

ROOT = Path(__file__).resolve().parents[2]

TARGET_RPS = 25_000


def prefill(bootstrap: str, topic: str, n: int, groups: int, topics: int, partitions: int) -> None:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 1_000_000,
            "compression.type": "lz4",
        }
    )
    ts = int(time.time() * 1000) - 60_000
    offsets: dict[tuple[int, int, int], int] = {}
    for i in range(n):
        g, t, part = i % groups, (i // groups) % topics, (i // (groups * topics)) % partitions
        k = (g, t, part)
        offsets[k] = offsets.get(k, 0) + 10
        key = commit_key(f"bench-g{g}", f"bench-t{t}", part)
        value = commit_value(offsets[k], ts + i // 100)
        # like Kafka: a group's records live in one partition of the offsets topic
        p.produce(topic, value, key, partition=g % 16)
        if i % 10000 == 0:
            p.poll(0)
    assert p.flush(120) == 0


def raw_rps(bootstrap: str, topic: str, n: int) -> float:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"raw-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    md = c.list_topics(topic, timeout=10).topics[topic]
    c.assign([TopicPartition(topic, p, 0) for p in md.partitions])
    seen, t0 = 0, 0.0
    while seen < n:
        msg = c.poll(1.0)
        if msg is None or msg.error():
            continue
        if seen == 0:
            t0 = time.perf_counter()
        seen += 1
    elapsed = time.perf_counter() - t0
    c.close()
    return (n - 1) / elapsed


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        # records decoded by the commits source, as counted in the header of the batch the
        # model consumed last: reaching N means the batch holding the N-th is modelled
        m = re.match(r'lagpilot_coordinator_records_total\{kind="(\w+)"\} ([0-9.e+]+)', line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def pipeline_rps(
    bootstrap: str, topic: str, n: int, timeout_s: float, fill: Callable[[], None]
) -> dict[str, Any]:
    """The pipeline starts on the empty topic; once it has modelled a first record (it is
    live: group joined, source reading), ``fill`` writes the N records and the clock runs
    from there until the model has consumed the batch holding the last of them. (Starting
    it on a pre-filled topic measured start-up instead: the source reads a backlog while
    the model's group is still joining, and the count jumps when the model begins.)"""
    port = 19_000 + os.getpid() % 1000
    with tempfile.TemporaryDirectory() as state:
        env = {
            **os.environ,
            "KAFKA_BOOTSTRAP": bootstrap,
            "LAGPILOT_OFFSETS_TOPIC": topic,
            "LAGPILOT_CONSUMER_GROUP": f"lagpilot-bench-{uuid.uuid4().hex[:6]}",
            "LAGPILOT_STATE_DIR": state,
            "LAGPILOT_INCLUDE": "bench-t.*",
            "LAGPILOT_METRICS_PORT": str(port),
            "LAGPILOT_RUN_POLICY": "false",
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline", "--log-level", "WARNING"], cwd=ROOT, env=env
        )
        try:
            deadline = time.monotonic() + timeout_s
            _wait_commits(port, 1, deadline)  # the probe record: the pipeline is live
            t0 = time.perf_counter()
            fill()
            filled_s = time.perf_counter() - t0
            _wait_commits(port, n + 1, deadline)
            elapsed = time.perf_counter() - t0
            return {"pipeline_rps": n / elapsed, "pipeline_s": elapsed, "fill_s": filled_s}
        finally:
            proc.terminate()
            proc.wait(30)


def _wait_commits(port: int, count: int, deadline: float) -> None:
    done = 0.0
    while time.monotonic() < deadline:
        try:
            done = _scrape(port).get("commit", 0.0)
        except OSError:
            done = 0.0
        if done >= count:
            return
        time.sleep(0.02)
    raise SystemExit(f"the pipeline modelled {done:.0f} of {count} commit records in time")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--groups", type=int, default=50)
    ap.add_argument("--topics", type=int, default=20)
    ap.add_argument("--partitions", type=int, default=50)
    ap.add_argument("--smoke", action="store_true", help="tiny run for the test suite")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "ingest.json"))
    args = ap.parse_args(argv)
    args.bootstrap = broker.bootstrap(args.bootstrap)
    n = 5_000 if args.smoke else args.records
    topic = f"bench-offsets-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    admin.create_topics([NewTopic(topic, 16, 1)])[topic].result(timeout=30)
    prefill(args.bootstrap, topic, 1, 1, 1, 1)  # the probe record

    def fill() -> None:
        prefill(args.bootstrap, topic, n, args.groups, args.topics, args.partitions)

    stamp = run_stamp()
    result = pipeline_rps(args.bootstrap, topic, n, 120 if args.smoke else 900, fill)
    raw = raw_rps(args.bootstrap, topic, n + 1)
    result.update(
        raw_rps=round(raw),
        pipeline_rps=round(result["pipeline_rps"]),
        ratio=round(raw / result["pipeline_rps"], 2),
        records=n,
        groups=args.groups,
        topics=args.topics,
        partitions=args.partitions,
        target_pipeline_rps=TARGET_RPS,
        python=platform.python_version(),
        cpus=os.cpu_count(),
        load_avg_1m_end=load_avg_1m(),
    )
    result = write_result(args.out, result, stamp)
    print(f"raw consume:  {result['raw_rps']:>10,} records/s")
    print(f"pipeline:     {result['pipeline_rps']:>10,} commits/s  (target {TARGET_RPS:,})")
    print(f"ratio raw/pipeline: {result['ratio']}")
    admin.delete_topics([topic])
    return 0


if __name__ == "__main__":
    sys.exit(main())
