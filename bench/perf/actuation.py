"""Actuation latency: a throttle event produced to lagpilot.control -> its `applied` outcome.

Runs the real actuator (`python -m actuators`, Kafka backend: every throttle is a real
AlterClientQuotas on the broker) as a subprocess, produces N signed throttle events one at a
time (each waits for its outcome, so this measures latency, not queueing), reads the
committed outcomes (read_committed), and writes p50/p99 to bench/results/actuation.json.

    python -m bench.perf.actuation [--n 200] [--bootstrap 127.0.0.1:21092] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from confluent_kafka import Consumer, Producer

from bench.support import actuator_harness as T
from bench.support import broker
from bench.support.machine import load_avg_1m
from bench.support.results import run_stamp, write_result
from schemas import encode

ROOT = Path(__file__).resolve().parents[2]

KEY = b"bench-signing-key-0123456789abcdef"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the actuator exited with {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("the actuator did not become ready in time")


def run(bootstrap: str, n: int, warmup: int) -> dict[str, Any]:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    control, outcomes = f"{name}.control", f"{name}.outcomes"
    client = f"lp-{name}"
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        policy = Path(tmp) / "policy.toml"
        policy.write_text('mode = "act"\n[allow]\nthrottle_client_ids = ["lp-bench-*"]\n')
        env = {
            **os.environ,
            "KAFKA_BOOTSTRAP": bootstrap,
            "LAGPILOT_SIGNING_KEY": KEY.decode(),
            "LAGPILOT_CONTROL_TOPIC": control,
            "LAGPILOT_OUTCOMES_TOPIC": outcomes,
            "LAGPILOT_ACTUATOR_GROUP": f"{name}-actuator",
        }
        cmd = [sys.executable, "-m", "actuators", "--backend", "kafka", "--policy",
               str(policy), "--actuator-id", name, "--metrics-port", str(port),
               "--log-level", "WARNING"]  # fmt: skip
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT)
        try:
            _wait_ready(port, proc)
            latencies = _measure(bootstrap, control, outcomes, client, n, warmup)
        finally:
            proc.terminate()
            proc.wait(20)
    ms = np.array(latencies) * 1000
    return {
        "benchmark": "actuation",
        "what": "throttle event produced -> committed `applied` outcome read (Kafka backend)",
        "n": int(ms.size),
        "p50_ms": round(float(np.percentile(ms, 50)), 2),
        "p99_ms": round(float(np.percentile(ms, 99)), 2),
        "max_ms": round(float(ms.max()), 2),
        "mean_ms": round(float(ms.mean()), 2),
        "target_p99_ms": 100,
        "broker": bootstrap,
        "host": f"{platform.node()} ({os.cpu_count()} cpus)",
    }


def _measure(bootstrap: str, control: str, outcomes: str, client: str, n: int,
             warmup: int) -> list[float]:  # fmt: skip
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{control}-reader",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 10,
        }
    )
    consumer.subscribe([outcomes])
    latencies: list[float] = []
    try:
        for i in range(warmup + n + 1):
            last = i == warmup + n
            now_ms = int(time.time() * 1000)
            if last:  # leave the broker as found: remove the quota
                event = T.release(client, key=KEY, now_ms=now_ms)
            else:
                event = T.throttle(client, 1_000_000 + i, key=KEY, now_ms=now_ms, lease_s=30)
            sent = time.perf_counter()
            producer.produce(control, key=event["target"].encode(), value=encode(event))
            producer.flush(10)
            got = _wait_outcome(consumer, event["id"], timeout_s=30)
            if got["result"] != "applied":
                raise SystemExit(f"event {i} was not applied: {got}")
            if warmup <= i < warmup + n:
                latencies.append(time.perf_counter() - sent)
    finally:
        consumer.close()
    return latencies


def _wait_outcome(consumer: Consumer, action_id: str, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        msg = consumer.poll(0.05)
        if msg is None or msg.error() is not None or msg.value() is None:
            continue
        out = orjson.loads(msg.value())
        # the actuator's ``intent`` (written before its backend call) shares the topic
        if out.get("action_id") == action_id and out.get("event") == "outcome":
            return out
    raise SystemExit(f"no outcome for {action_id} within {timeout_s} s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", default=None)
    p.add_argument("--n", type=int, default=300)
    p.add_argument("--smoke", action="store_true", help="a tiny run (5 events) for the tests")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "actuation.json"))
    args = p.parse_args(argv)
    args.bootstrap = broker.bootstrap(args.bootstrap)
    n, warmup = (5, 1) if args.smoke else (args.n, 10)
    stamp = run_stamp()
    result = run(args.bootstrap, n, warmup)
    result.update(load_avg_1m_end=load_avg_1m())
    result = write_result(args.out, result, stamp)
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
