"""The lag families of /metrics at the scale shape (no broker): what a full scrape costs.

Inputs: synthetic ``TopicObservation``s of ``--topics`` topics x ``--partitions``
partitions x ``--groups`` groups (default 50 x 50 x 100: 250,000 group-partitions, 1.75
million per-partition series, the shape of issue 16), every group-partition modelled,
values drawn as the model's are shaped: integer lags, full-precision rates and fits (1 %
of them below 1e-4, which are written by ``repr``), time lags in milliseconds, every
status.

Measured, for today's ``pipeline.observe.exposition`` and for the code before issue 16's /metrics
work (``bench.support.baselines.exposition_before_16``) on the same observations:

1. ``render_lag`` in this process: CPU time (``time.process_time``), best of 3, with the
   label cache warm as the render process keeps it (and the first, cold render); and
   ``render_chunks`` consumed chunk by chunk, as the render process writes the text (no
   join of the whole text);
2. a full scrape as Prometheus makes it: ``HealthServer`` /metrics with the lag families
   from a render process, read by a client in another process. CPU of the render process
   (utime + stime from /proc) and of this process (the model's process in the pipeline:
   it hands the observations over and relays or joins the text), wall time, and the peak
   RSS of both during the scrapes (VmHWM, reset first through /proc/PID/clear_refs), best
   of 3 scrapes after a warm-up one.

Also checks that both write the same bytes. Writes ``bench/results/metrics_render.json``
with the load average.

    .venv/bin/python -m bench.perf.metrics_render [--topics 50] [--partitions 50] [--groups 100]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads OpenBLAS

import argparse
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from bench.support.baselines.exposition_before_16 import (
    LabelCacheBefore,
    RenderProcessBefore,
    render_lag_before,
)
from bench.support.machine import load_avg_1m
from bench.support.results import run_stamp, write_result
from bench.support.scale_probes import cpu_ticks
from pipeline.model.events import TopicObservation
from pipeline.observe.exposition import LabelCache, render_chunks, render_lag
from pipeline.observe.metrics import LagCollector, PipelineMetrics
from pipeline.observe.render_process import RenderProcess
from runtime.http import HealthServer

ROOT = Path(__file__).resolve().parents[2]
TICK_S = 1 / os.sysconf("SC_CLK_TCK")
MIB = 1024 * 1024

#: the client: reads the whole answer, prints its size and the seconds it took
CLIENT = """
import sys, time, urllib.request
t = time.perf_counter()
with urllib.request.urlopen(sys.argv[1], timeout=300) as r:
    n = 0
    while block := r.read(1 << 20):
        n += len(block)
print(n, time.perf_counter() - t)
"""


def synthetic_observations(
    topics: int, partitions: int, groups: int, seed: int = 16
) -> list[TopicObservation]:
    """One observation per topic, every group-partition modelled."""
    rng = np.random.default_rng(seed)
    shape = (groups, partitions)
    now_ms = 1_800_000_000_000

    def fit(scale: float) -> np.ndarray:
        values = rng.normal(size=shape) * scale
        tiny = rng.random(shape) < 0.01  # near-zero fits: outside orjson's range
        values[tiny] *= 1e-6
        return values

    out = []
    for t in range(topics):
        hw = rng.integers(10**6, 10**9, partitions)
        lag = rng.integers(0, 100, shape)
        out.append(
            TopicObservation(
                topic=f"bench-metrics-t{t}",
                now_ms=now_ms,
                groups=[f"bench-metrics-g{g}" for g in range(groups)],
                mask=np.ones(shape, bool),
                committed=hw - lag,
                high_watermark=hw,
                lag=lag,
                lag_rate_per_s=fit(10.0),
                lag_accel_per_s2=fit(3.0),
                produce_rate_per_s=rng.random(partitions) * 200,
                consume_rate_per_s=fit(50.0) + 150.0,
                time_lag_s=rng.integers(0, 20_000, shape) / 1000.0,
                time_lag_source=np.zeros(shape, np.int8),
                eta_drain_s=np.full(shape, np.nan),
                status=rng.integers(0, 6, shape).astype(np.int8),
                last_commit_ms=np.full(shape, now_ms - 2_000),
                leaders=rng.integers(0, 3, partitions),
                topic_partitions=partitions,
            )
        )
    return out


def best_cpu_s(fn: Callable[[], object], runs: int = 3) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def _status_kib(pid: int | str, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def _reset_peak(pid: int | str) -> None:
    """VmHWM back to the current RSS (Linux 4.0+)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def scrapes(
    extra: Callable[[frozenset[str] | None], Any], child_pid: Callable[[], int], runs: int = 3
) -> dict[str, Any]:
    """Full scrapes of a ``HealthServer`` serving the pipeline's registry and ``extra``:
    one to warm up (starts the child, fills its label cache), then ``runs`` measured."""
    registry = PipelineMetrics().registry
    server = HealthServer(0, registry, lambda: (True, "ok"), "127.0.0.1", extra)
    server.start()
    url = f"http://127.0.0.1:{server.port}/metrics"

    def scrape() -> tuple[int, float]:
        out = subprocess.run(
            [sys.executable, "-c", CLIENT, url], capture_output=True, text=True, check=True
        ).stdout.split()
        return int(out[0]), float(out[1])

    try:
        size, _ = scrape()
        pid = child_pid()
        rss_child_idle = _status_kib(pid, "VmRSS")
        rss_self_idle = _status_kib("self", "VmRSS")
        _reset_peak(pid)
        _reset_peak("self")
        rows = []
        for _ in range(runs):
            ticks0, cpu0 = cpu_ticks([pid])[pid], time.process_time()
            got, wall = scrape()
            rows.append(
                (
                    (cpu_ticks([pid])[pid] - ticks0) * TICK_S,
                    time.process_time() - cpu0,
                    wall,
                )
            )
            assert got == size, (got, size)
        return {
            "bytes": size,
            "child_cpu_s": round(min(r[0] for r in rows), 3),
            "model_process_cpu_s": round(min(r[1] for r in rows), 3),
            "wall_s": round(min(r[2] for r in rows), 3),
            "child_rss_idle_mib": round(rss_child_idle / 1024, 1),
            "child_rss_peak_mib": round(_status_kib(pid, "VmHWM") / 1024, 1),
            "model_process_rss_peak_over_idle_mib": round(
                (_status_kib("self", "VmHWM") - rss_self_idle) / 1024, 1
            ),
        }
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topics", type=int, default=50)
    ap.add_argument("--partitions", type=int, default=50)
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--smoke", action="store_true", help="tiny run for the test suite")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "metrics_render.json"))
    args = ap.parse_args(argv)
    stamp = run_stamp()
    if args.smoke:
        args.topics, args.partitions, args.groups = 3, 4, 5
    load_before = load_avg_1m()
    observations = synthetic_observations(args.topics, args.partitions, args.groups)
    gp = args.topics * args.partitions * args.groups

    # 1. in this process, the same observations, each renderer with its cache warm
    text = render_lag(observations)
    identical = text == render_lag_before(observations)
    size = len(text)
    del text
    cache, cache_before = LabelCache(), LabelCacheBefore()
    cold = best_cpu_s(lambda: render_lag(observations, None, cache), runs=1)
    cold_before = best_cpu_s(lambda: render_lag_before(observations, None, cache_before), runs=1)
    after = best_cpu_s(lambda: render_lag(observations, None, cache))
    streamed = best_cpu_s(lambda: sum(map(len, render_chunks(observations, None, cache))))
    before = best_cpu_s(lambda: render_lag_before(observations, None, cache_before))

    # 2. full scrapes through the render process, as Prometheus makes them
    collector = LagCollector(stale_after_s=3_600.0, process=RenderProcess(timeout_s=300))
    for o in observations:
        collector.update(o)
    proc_before = RenderProcessBefore(timeout_s=300)
    try:
        scrape_after = scrapes(collector.stream, lambda: collector.process.pid)  # type: ignore[union-attr,return-value]
        scrape_before = scrapes(
            lambda names: proc_before.render(observations, names), lambda: proc_before.proc.pid
        )
    finally:
        proc_before.close()
        if collector.process is not None:
            collector.process.close()

    per_scrape = scrape_after["child_cpu_s"] + scrape_after["model_process_cpu_s"]
    result = {
        "topics": args.topics,
        "partitions": args.partitions,
        "groups": args.groups,
        "group_partitions": gp,
        "series": 7 * gp + 3 * args.topics * args.groups,
        "text_bytes": size,
        "identical_text": identical,
        "clock": "process_time (CPU), best of 3; scrapes: /proc utime+stime, best of 3",
        "render_cpu_s": round(after, 3),
        "render_cpu_s_before": round(before, 3),
        "render_ratio": round(before / max(after, 1e-9), 1),
        "render_streamed_cpu_s": round(streamed, 3),
        "render_first_cpu_s": round(cold, 3),
        "render_first_cpu_s_before": round(cold_before, 3),
        "scrape": scrape_after,
        "scrape_before": scrape_before,
        "cores_at_15s_scrape_interval": round(per_scrape / 15, 4),
        "load_avg_1m_before": load_before,
        "load_avg_1m_after": load_avg_1m(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "orjson": orjson.__version__,
    }
    print(
        f"{args.topics} topics x {args.partitions} partitions x {args.groups} groups "
        f"({gp:,} group-partitions, {result['series']:,} series, {size / MIB:.0f} MiB): "
        f"render_lag {after:.3f} s CPU ({streamed:.3f} s as chunks), before {before:.3f} s "
        f"({result['render_ratio']}x); same text: {identical}"
    )
    for label, s in (("now", scrape_after), ("before", scrape_before)):
        print(
            f"full scrape {label}: render process {s['child_cpu_s']:.2f} s CPU, model's "
            f"process {s['model_process_cpu_s']:.2f} s, wall {s['wall_s']:.2f} s; RSS: render "
            f"process {s['child_rss_idle_mib']:.0f} MiB idle, {s['child_rss_peak_mib']:.0f} "
            f"MiB peak; model's process +{s['model_process_rss_peak_over_idle_mib']:.0f} MiB "
            f"at its peak"
        )
    print(f"load average {load_before:.1f} -> {load_avg_1m():.1f}")
    result = write_result(args.out, result, stamp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
