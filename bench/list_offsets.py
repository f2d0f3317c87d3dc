"""What one sampler tick costs: the AdminClient's ListOffsets against one request per broker.

The sampler asks every watched partition's high watermark every 250 ms. Two ways, both
public APIs: confluent-kafka's ``AdminClient.list_offsets`` (a future per partition) and
kafka-python's ``KafkaConsumer.end_offsets`` (one ListOffsets per leader broker, a plain
dict back; ``pipeline/read/list_offsets.py``). For ``--topics`` x ``--partitions`` fresh
partitions, each way runs ``--ticks`` ticks; the CPU of this process per tick (what the
sampler's process pays) and the wall time are recorded, with the load average (the cores
are shared), and both ways' answers are checked equal.

Writes ``bench/results/list_offsets.json``.

    .venv/bin/python -m bench.list_offsets [--topics 50] [--partitions 50] [--ticks 40]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import platform
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from bench.support import broker
from bench.support.scale_steps import load_average
from pipeline.read.list_offsets import BrokerListOffsets

ROOT = Path(__file__).resolve().parents[1]


def by_partition(admin: AdminClient, request: dict[Any, Any]) -> dict[tuple[str, int], int]:
    """The sampler's AdminClient way (``HighWatermarkSource._offsets_by_partition``)."""
    futures = admin.list_offsets(
        request, isolation_level=IsolationLevel.READ_UNCOMMITTED, request_timeout=10
    )
    concurrent.futures.wait(futures.values(), timeout=11)
    return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}


def measure(tick: Callable[[], dict[tuple[str, int], int]], ticks: int) -> dict[str, Any]:
    tick()  # connections and metadata: not a tick's cost
    cpu_ms, wall_ms = [], []
    for _ in range(ticks):
        c0, w0 = time.process_time(), time.perf_counter()
        tick()
        cpu_ms.append((time.process_time() - c0) * 1e3)
        wall_ms.append((time.perf_counter() - w0) * 1e3)
    return {
        "cpu_ms_per_tick_median": round(statistics.median(cpu_ms), 2),
        "wall_ms_per_tick_median": round(statistics.median(wall_ms), 2),
        "cpu_cores_at_250ms": round(statistics.median(cpu_ms) / 250, 3),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--topics", type=int, default=50)
    ap.add_argument("--partitions", type=int, default=50)
    ap.add_argument("--ticks", type=int, default=40)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "list_offsets.json"))
    args = ap.parse_args(argv)
    bootstrap = broker.bootstrap(args.bootstrap)
    run = f"lo-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [f"{run}-t{i}" for i in range(args.topics)]
    for f in admin.create_topics([NewTopic(t, args.partitions, 1) for t in topics]).values():
        f.result(timeout=60)
    try:
        # a different count in each partition, so that equal answers mean something
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
        for i, t in enumerate(topics):
            for p in range(args.partitions):
                for _ in range((i + p) % 4):
                    producer.produce(t, b"x", partition=p)
            producer.poll(0)
        producer.flush(60)
        spec = OffsetSpec.latest()
        request = {TopicPartition(t, p): spec for t in topics for p in range(args.partitions)}
        pairs = [(t, p) for t in topics for p in range(args.partitions)]
        fast = BrokerListOffsets({"bootstrap_servers": bootstrap}, request_timeout_ms=10_000)
        for _ in range(30):  # new topics: until every leader is known to both clients
            try:
                if fast.latest(pairs) == by_partition(admin, request):
                    break
            except Exception:  # a leader not elected yet
                pass
            time.sleep(1)
        load0 = load_average()
        admin_way = measure(lambda: by_partition(admin, request), args.ticks)
        broker_way = measure(lambda: fast.latest(pairs), args.ticks)
        same = fast.latest(pairs) == by_partition(admin, request)
        fast.close()
    finally:
        admin.delete_topics(topics)
    result = {
        "partitions": args.topics * args.partitions,
        "ticks": args.ticks,
        "admin_client_per_partition": admin_way,
        "kafka_python_per_broker": broker_way,
        "cpu_ratio": round(
            admin_way["cpu_ms_per_tick_median"] / max(broker_way["cpu_ms_per_tick_median"], 1e-3),
            2,
        ),
        "same_answers": same,
        "load_average": [load0, load_average()],
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    print(orjson.dumps(result).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
