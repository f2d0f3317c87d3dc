"""Fault row 6b: a real offsets topic full of garbage, read by the running pipeline.

``lagpilot run`` reads its commits from a topic of the benchmark's own
(``LAGPILOT_OFFSETS_TOPIC``), into which the benchmark writes true offset commits of one
group, each surrounded by mutated and random records from ``bench/faults/decoder.py``. The
pipeline must stay up, count every record the decoder skips
(``lagpilot_decode_skipped_total``, checked against the decoder's own verdict on the same
bytes), and still model the true commits: the last ``partition_lag`` event of every
partition carries the group's last committed offset.
"""

from __future__ import annotations

import re
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from bench.support.control_loop import wait_modelling
from bench.support.harness import LagReader, PipelineProcess
from bench.support.layout_codec import encode
from bench.support.offsets_records import corpus
from bench.support.swarm import ensure_topic
from pipeline.read.offsets import Skipped, decode_record

PARTITIONS = 4
MESSAGES_PER_PARTITION = 100


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def _skipped_total(text: str) -> float:
    return sum(
        float(m.group(1))
        for m in re.finditer(r"^lagpilot_decode_skipped_total\{[^}]*\} ([0-9.e+]+)$", text, re.M)
    )


def _series(text: str, name: str) -> dict[str, float]:
    """Non-zero samples of one metric, by their labels (for the row's diagnosis)."""
    pattern = rf"^{name}\{{([^}}]*)\}} ([0-9.e+]+)$"
    return {m.group(1): float(m.group(2)) for m in re.finditer(pattern, text, re.M)
            if float(m.group(2))}  # fmt: skip


def garbage_topic(bootstrap: str, workdir: Path, *, garbage: int, commits: int) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:6]
    data, offsets_topic = f"faults-g-{run_id}", f"faults-offsets-{run_id}"
    group = f"faults-group-{run_id}"
    ensure_topic(bootstrap, data, PARTITIONS)
    ensure_topic(bootstrap, offsets_topic, 4)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for part in range(PARTITIONS):
        for i in range(MESSAGES_PER_PARTITION):
            p.produce(data, value=b"x%d" % i, partition=part)
    p.flush(30)
    pipe = PipelineProcess(
        bootstrap, f"{data}$", workdir / f"state-{run_id}", LAGPILOT_OFFSETS_TOPIC=offsets_topic
    ).start()
    reader = LagReader(bootstrap, {group}).start()
    try:
        wait_modelling(pipe)
        junk = list(corpus(garbage, seed=61))
        expected_skipped = sum(isinstance(decode_record(k, v), Skipped) for k, v in junk)
        per_commit = max(1, garbage // max(commits, 1))
        last: dict[int, int] = {}
        ts = int(time.time() * 1000)
        j = 0
        for i in range(commits):
            part = i % PARTITIONS
            offset = min(MESSAGES_PER_PARTITION - 1 - part, 1 + i // PARTITIONS)
            key = encode("OffsetCommitKey", 1, group=group, topic=data, partition=part)
            value = encode("OffsetCommitValue", 3, offset=offset, leader_epoch=0, metadata="",
                           commit_timestamp=ts + i)  # fmt: skip
            p.produce(offsets_topic, key=key, value=value, partition=part)
            last[part] = offset
            for k, v in junk[j : j + per_commit]:
                p.produce(offsets_topic, key=k, value=v, partition=j % 4)
            j += per_commit
            p.poll(0)
        for k, v in junk[j:]:
            p.produce(offsets_topic, key=k, value=v, partition=0)
        p.flush(60)
        written_ms = int(time.time() * 1000)
        deadline = time.monotonic() + 60
        modelled: dict[int, int] = {}
        skipped = 0.0
        text = ""
        while time.monotonic() < deadline:
            for e in reader.select(lambda e: e["event"] == "partition_lag"):
                modelled[e["partition"]] = e["committed_offset"]
            try:
                text = _scrape(pipe.metrics_port)
            except OSError:  # the pipeline is gone: the row says so
                break
            skipped = _skipped_total(text)
            if modelled == last and skipped >= expected_skipped:
                break
            time.sleep(0.5)
        took_s = (int(time.time() * 1000) - written_ms) / 1000
        alive = pipe.proc is not None and pipe.proc.poll() is None
        last_words = "" if alive else pipe.log_tail(3)
    finally:
        log_text = pipe.log_path.read_text(errors="replace") if pipe.log_path.exists() else ""
        reader.close()
        pipe.stop()
    return {
        "garbage_records": garbage,
        "true_commits": commits,
        "expected_skipped": expected_skipped,
        "counted_skipped": int(skipped),
        "last_commits": {str(k): v for k, v in sorted(last.items())},
        "modelled_commits": {str(k): v for k, v in sorted(modelled.items())},
        "true_commits_modelled": modelled == last,
        "pipeline_alive": alive,
        "modelled_within_s": round(took_s, 2),
        "bad_messages": _series(text, "lagpilot_bad_messages_total"),
        "records_by_kind": _series(text, "lagpilot_coordinator_records_total"),
        "pipeline_last_words": last_words[-600:],
        "skip_warnings": [line[-300:] for line in log_text.splitlines()
                          if "skipped a message" in line][:3],
        "pipeline_exit": next((line[-300:] for line in log_text.splitlines()
                               if line.startswith("lagpilot run:")), None),
    }  # fmt: skip
