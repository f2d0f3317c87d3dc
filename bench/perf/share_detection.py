"""Detection time for a share group (KIP-932): from a share consumer's stall to the first
non-OK status on lagpilot.lag.

One pipeline process (the shipped defaults: 250 ms sampling, share groups read every
500 ms) watches one topic of P partitions; a producer writes ``--rate`` msgs/s on each, and
Kafka's own console share consumer (``bench.support.share_consumer``: the JVM client, as
confluent-kafka has none) keeps up with all of them. Each trial stops the consumer with
SIGSTOP (it neither fetches nor acknowledges: a hung worker; the producer goes on), waits
for the first ``partition_lag`` event of the group whose status is not OK, then for the
first error-level one (ERR, STALL, STOP), resumes the consumer and waits until every
partition is OK again.

Reported: ``received - onset`` percentiles (sampling, reading the share groups, modelling
and publishing included), the model's own (``observed_at - onset``), the first error-level
status, and false alarms (non-OK events outside the stall windows). Target: p99 < 2 s, no
false alarm. Writes ``bench/results/share_detection.json``.

    .venv/bin/python -m bench.perf.share_detection [--trials 20] [--smoke] [--out PATH]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from bench.support import broker
from bench.support.harness import LagReader, PipelineProcess, create_topic
from bench.support.results import run_stamp, write_result
from bench.support.scaler_harness import Producing
from bench.support.share_consumer import ShareConsumer

ROOT = Path(__file__).resolve().parents[2]

TARGET_P99_MS = 2000
ERROR_LEVEL = ("ERR", "STOP", "STALL")


def _pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(np.array(values), q)), 1) if values else None


def _events(group: str, since_ms: float, ok: bool | None = None) -> Any:
    def pred(e: dict[str, Any]) -> bool:
        return bool(
            e["event"] == "partition_lag"
            and e["group"] == group
            and e["_received_ms"] >= since_ms
            and (ok is None or (e["status"] == "OK") == ok)
        )

    return pred


def _all_ok_since(reader: LagReader, group: str, partitions: int, since_ms: float) -> float:
    """Waits until each partition's latest event since ``since_ms`` is OK; when (ms)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        latest: dict[int, dict[str, Any]] = {}
        for e in reader.select(_events(group, since_ms)):
            latest[e["partition"]] = e
        if len(latest) == partitions and all(e["status"] == "OK" for e in latest.values()):
            return max(e["observed_at_ms"] for e in latest.values())
        time.sleep(0.1)
    raise AssertionError(f"{group}: not every partition OK again within 60 s")


def run(bootstrap: str, trials: int, partitions: int, rate: int) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:6]
    topic, group = f"bench-share-{run_id}", f"bench-share-{run_id}"
    create_topic(bootstrap, topic, partitions)
    received: list[float] = []
    observed: list[float] = []
    err_received: list[float] = []
    err_statuses: list[str] = []
    windows: list[tuple[float, float]] = []  # stall onset, every partition OK again (ms)
    with tempfile.TemporaryDirectory() as tmp:
        pipe = PipelineProcess(bootstrap, topic, Path(tmp) / "state").start()
        reader = LagReader(bootstrap, {group}).start()
        try:
            with (
                Producing(bootstrap, topic, partitions, rate),
                ShareConsumer(bootstrap, topic, group) as consumer,
            ):
                consumer.wait_consumed(rate, timeout_s=120)
                _all_ok_since(reader, group, partitions, time.time() * 1000)
                time.sleep(3.0)  # the model learns how often the positions move
                first_ms = time.time() * 1000
                for i in range(trials):
                    time.sleep(1.0 + (i * 0.137) % 0.5)  # onsets at every phase of a read
                    onset_ms = time.time() * 1000
                    consumer.stall()
                    ev = reader.wait_for(_events(group, onset_ms, ok=False), 20)
                    received.append(ev["_received_ms"] - onset_ms)
                    observed.append(ev["observed_at_ms"] - onset_ms)
                    err = reader.wait_for(
                        lambda e, t=onset_ms: _events(group, t)(e) and e["status"] in ERROR_LEVEL,
                        timeout_s=20,
                    )
                    err_received.append(err["_received_ms"] - onset_ms)
                    err_statuses.append(err["status"])
                    consumer.resume()
                    back_ms = _all_ok_since(reader, group, partitions, err["_received_ms"])
                    windows.append((onset_ms, back_ms))
                    print(
                        f"  trial {i + 1:>3}: {received[-1]:6.0f} ms ({ev['status']}), "
                        f"{err['status']} after {err_received[-1]:6.0f} ms"
                    )
                last_ms = time.time() * 1000
        finally:
            reader.close()
            pipe.stop()
    false_alarms = [
        e
        for e in reader.select(_events(group, first_ms, ok=False))
        if not any(o <= e["observed_at_ms"] <= ok for o, ok in windows)
        and e["observed_at_ms"] <= last_ms
    ]
    p99 = _pct(received, 99)
    return {
        "load_average_1m": round(os.getloadavg()[0], 2),
        "partitions": partitions,
        "rate_per_partition_per_s": rate,
        "share_groups_interval_ms": 500,
        "sample_interval_ms": 250,
        "consumer": "org.apache.kafka.tools.consumer.ConsoleShareConsumer (Kafka's own)",
        "trials": len(received),
        "p50_ms": _pct(received, 50),
        "p99_ms": p99,
        "max_ms": round(max(received), 1) if received else None,
        "model_p50_ms": _pct(observed, 50),
        "model_p99_ms": _pct(observed, 99),
        "first_error_p50_ms": _pct(err_received, 50),
        "first_error_p99_ms": _pct(err_received, 99),
        "first_error_statuses": sorted(set(err_statuses)),
        "false_alarms": len(false_alarms),
        "false_alarm_examples": [
            {k: e[k] for k in ("partition", "status", "observed_at_ms", "lag_offsets")}
            for e in false_alarms[:3]
        ],
        "target_p99_ms": TARGET_P99_MS,
        "meets_target": p99 is not None and p99 < TARGET_P99_MS and not false_alarms,
        "cpus": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rate", type=int, default=200, help="msgs/s per partition")
    ap.add_argument("--smoke", action="store_true", help="tiny run for the test suite")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "share_detection.json"))
    args = ap.parse_args(argv)
    stamp = run_stamp()
    bootstrap = broker.bootstrap(args.bootstrap)
    trials = 2 if args.smoke else args.trials
    result = write_result(args.out, run(bootstrap, trials, args.partitions, args.rate), stamp)
    print(
        f"share group stalled: p50 {result['p50_ms']} ms, p99 {result['p99_ms']} ms "
        f"(target < {TARGET_P99_MS}); first error-level p50 {result['first_error_p50_ms']} ms "
        f"({', '.join(result['first_error_statuses'])}); false alarms "
        f"{result['false_alarms']} ({result['trials']} trials); met: {result['meets_target']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
