"""The two halves of ``bench/scale.py`` that touch no pipeline: the load generator (real
``__consumer_offsets`` records at a scheduled rate, and a trickle that moves the high
watermarks) and the probes (``/metrics`` text, histogram quantiles, CPU and RSS of a
process tree from /proc)."""

from __future__ import annotations

import contextlib
import math
import os
import re
import struct
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

OFFSETS_PARTITIONS = 50  # Kafka's __consumer_offsets default
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

# value v3 with empty metadata: version, offset, leader_epoch, len(metadata)=0, commit_ts
_V3 = struct.Struct(">hqihq")


def _s(x: str) -> bytes:
    b = x.encode()
    return struct.pack(">h", len(b)) + b


def commit_key(group: str, topic: str, partition: int) -> bytes:
    """OffsetCommitKey (record type 1): group, topic, partition."""
    return struct.pack(">h", 1) + _s(group) + _s(topic) + struct.pack(">i", partition)


def commit_value(offset: int, commit_ts_ms: int) -> bytes:
    """OffsetCommitValue v3: offset, leader_epoch -1, empty metadata, commit timestamp."""
    return _V3.pack(3, offset, -1, 0, commit_ts_ms)


# --------------------------------------------------------------------------- generator


def generate(
    bootstrap: str,
    offsets_topic: str,
    data_topics: list[str],
    partitions: int,
    groups: int,
    group_prefix: str,
    rate: Any,
    sent: Any,
    ready: Any,
    stop: Any,
) -> None:
    """The generator process: a 1 msg/s trickle into every partition, and commits at
    ``rate.value`` per second cycling over every (group, partition), each group's records
    in the offsets partition ``group % 50``. Offsets never pass what the broker has
    acknowledged for the partition (so they stay below its high watermark) and never go
    back; group ``g`` trails the acknowledged end by ``g % 3`` messages."""
    common = {
        "bootstrap.servers": bootstrap,
        "linger.ms": 5,
        "compression.type": "lz4",
        "enable.idempotence": True,  # a retried batch must not count twice
    }
    data = Producer({**common, "batch.num.messages": 1000})
    commits = Producer(
        {
            **common,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    tps = [(t, p) for t in data_topics for p in range(partitions)]
    index = {tp: i for i, tp in enumerate(tps)}
    acked = [0] * len(tps)

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked[index[(msg.topic(), msg.partition())]] = msg.offset() + 1

    for t, p in tps:  # one message each first: every partition has a high watermark
        data.produce(t, b"x" * 100, partition=p, on_delivery=delivered)
    data.flush(30)
    keys = [[commit_key(f"{group_prefix}{g}", t, p) for t, p in tps] for g in range(groups)]
    trail = [g % 3 for g in range(groups)]
    committed = [[0] * len(tps) for _ in range(groups)]
    pack = _V3.pack
    produce = commits.produce
    n_tps, n_pairs = len(tps), groups * len(tps)
    ready.set()

    cursor, trickle_cursor, count = 0, 0, 0
    cur_rate, rate_t0, rate_base = -1.0, 0.0, 0
    trickle_t0 = time.monotonic()
    while not stop.is_set():
        now = time.monotonic()
        if rate.value != cur_rate:
            cur_rate, rate_t0, rate_base = rate.value, now, count
        # the trickle: every partition once a second, spread over the second
        due_trickle = int((now - trickle_t0) * n_tps) - trickle_cursor
        for _ in range(min(due_trickle, n_tps)):
            t, p = tps[trickle_cursor % n_tps]
            data.produce(t, b"x" * 100, partition=p, on_delivery=delivered)
            trickle_cursor += 1
        if due_trickle > n_tps:
            trickle_cursor += due_trickle - n_tps
        data.poll(0)
        due = rate_base + int((now - rate_t0) * cur_rate) - count
        ts_ms = int(time.time() * 1000)
        for _ in range(min(due, 20_000)):
            g, i = divmod(cursor, n_tps)
            off = acked[i] - trail[g]
            row = committed[g]
            if off < row[i]:
                off = row[i]
            row[i] = off
            try:
                produce(offsets_topic, pack(3, off, -1, 0, ts_ms), keys[g][i], g % 50)
            except BufferError:
                commits.poll(0.05)
                continue
            cursor = (cursor + 1) % n_pairs
            count += 1
        sent.value = count
        commits.poll(0)
        time.sleep(0.005)
    commits.flush(30)
    data.flush(30)


# --------------------------------------------------------------------------- probes


@dataclass
class Scrape:
    commits: float = 0.0  # lagpilot_model_inputs_total{event="commit"}
    watermarks: float = 0.0  # lagpilot_model_inputs_total{event="watermarks"}
    decoded: float = 0.0  # lagpilot_coordinator_records_total{kind="commit"}
    samples: float = 0.0
    sample_age_s: float = -1.0
    buckets: dict[float, float] = field(default_factory=dict)  # le -> cumulative count
    events: dict[str, float] = field(default_factory=dict)  # "event/status" -> total
    samples_dropped: float = 0.0  # lagpilot_sampler_errors_total{where="align"}


_LINE = re.compile(r"^([a-z_]+)(?:\{([^}]*)\})? ([-0-9.e+Inf]+)$")


#: the families the benchmark reads (a ``name[]`` scrape: the lag families are not rendered)
BENCH_FAMILIES = (
    "lagpilot_model_inputs_total",
    "lagpilot_coordinator_records_total",
    "lagpilot_watermark_samples_total",
    "lagpilot_last_sample_age_seconds",
    "lagpilot_sampler_errors_total",
    "lagpilot_lag_events_total",
    "lagpilot_processing_delay_seconds_bucket",
)


def scrape(port: int, full: bool = False) -> Scrape:
    """The benchmark's counters; ``full``: the whole /metrics, as Prometheus scrapes it."""
    query = "" if full else "?" + "&".join(f"name[]={n}" for n in BENCH_FAMILIES)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics{query}", timeout=120) as r:
        text = r.read().decode()
    out = Scrape()
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        name, labels, value = m.group(1), m.group(2) or "", float(m.group(3))
        if name == "lagpilot_model_inputs_total" and 'event="commit"' in labels:
            out.commits = value
        elif name == "lagpilot_model_inputs_total" and 'event="watermarks"' in labels:
            out.watermarks = value
        elif name == "lagpilot_coordinator_records_total" and 'kind="commit"' in labels:
            out.decoded = value
        elif name == "lagpilot_watermark_samples_total":
            out.samples = value
        elif name == "lagpilot_last_sample_age_seconds":
            out.sample_age_s = value
        elif name == "lagpilot_sampler_errors_total" and 'where="align"' in labels:
            out.samples_dropped += value
        elif name == "lagpilot_lag_events_total":
            kind = dict(re.findall(r'(\w+)="([^"]*)"', labels))
            out.events[f"{kind.get('event')}/{kind.get('status')}"] = value
        elif name == "lagpilot_processing_delay_seconds_bucket":
            le = re.search(r'le="([^"]+)"', labels)
            if le:
                out.buckets[float(le.group(1))] = value
    return out


def quantile(q: float, before: dict[float, float], after: dict[float, float]) -> float:
    """``histogram_quantile`` over the increase of cumulative buckets (linear in a bucket;
    the top finite bound when it falls in +Inf); NaN when nothing was observed."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1] if counts else 0.0
    if total <= 0:
        return math.nan
    rank, lo, prev = q * total, 0.0, 0.0
    for bound, cum in zip(bounds, counts, strict=True):
        if cum >= rank:
            if math.isinf(bound):
                return lo
            return lo + (bound - lo) * (rank - prev) / max(cum - prev, 1e-9)
        lo, prev = bound, cum
    return lo


def process_tree(root: int) -> list[int]:
    """``root`` and all its descendants, from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(parents.get(pid, []))
    return tree


def cpu_ticks(pids: list[int]) -> dict[int, int]:
    """utime + stime (clock ticks) of each live pid."""
    out = {}
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            out[pid] = int(fields[11]) + int(fields[12])
    return out


def rss_bytes(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    return total
