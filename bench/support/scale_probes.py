"""The scale benchmark's probes: a replica's ``/metrics`` counters, histogram quantiles,
and CPU and RSS of a process tree read from /proc."""

from __future__ import annotations

import contextlib
import math
import os
import re
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


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
    topics: float = 0.0  # lagpilot_topics_modelled: the topics this replica models


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
    "lagpilot_topics_modelled",
)


def scrape(port: int, full: bool = False) -> Scrape:
    """The benchmark's counters; ``full``: the whole /metrics, as Prometheus scrapes it."""
    query = "" if full else "?" + "&".join(f"name[]={n}" for n in BENCH_FAMILIES)
    out = Scrape()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics{query}", timeout=120) as r:
        if full:  # read and dropped, as a scraper that stores it elsewhere: parsing 1.8M
            while r.read(1 << 20):  # lines here took 1.4 s of the cores the pipeline runs on
                pass
            return out
        text = r.read().decode()
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
        elif name == "lagpilot_topics_modelled":
            out.topics = value
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
