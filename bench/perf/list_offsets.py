"""What one sampler tick costs: the AdminClient's ListOffsets against one request per broker.

The sampler asks every watched partition's high watermark every 250 ms. Three ways, all
public APIs: confluent-kafka's ``AdminClient.list_offsets`` (a future per partition),
kafka-python's ``KafkaConsumer.end_offsets`` (one request per leader, all or nothing: the
old opt-in way, kept here for the record), and the sampler's default, one
``ListOffsetsRequest`` per leader sent with kafka-python's network client and read per
partition (``pipeline/read/list_offsets.py``). For ``--topics`` x ``--partitions`` fresh
partitions, each way runs ``--ticks`` ticks; the CPU of this process per tick and the wall
time are recorded, with the load average (the cores are shared), and every way's answers
are checked equal to the AdminClient's.

Then the sampler itself (``HighWatermarkSource.run_alone``, its default way, a tick handed
to a process pipe as ``sampler_process`` does) runs ``--sampler-s`` seconds at 250 ms: its
process's CPU per tick, all of it, and the part after ListOffsets (building the
``Watermarks`` messages, encoding them, the pipe) timed alone.

Writes ``bench/results/list_offsets.json``.

    .venv/bin/python -m bench.perf.list_offsets [--topics 50] [--partitions 50] [--ticks 40]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import os
import platform
import queue
import re
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from bench.support import broker
from bench.support.results import run_stamp, write_result
from bench.support.scale_steps import load_average
from pipeline.read.list_offsets import BrokerListOffsets
from pipeline.read.sampling import SamplerStats, build_watermarks, hwms_by_topic
from pipeline.read.watermarks import HighWatermarkSource
from schemas import encode, topics

ROOT = Path(__file__).resolve().parents[2]

Answers = dict[str, list[int]]


def by_partition(admin: AdminClient, request: dict[Any, Any]) -> dict[tuple[str, int], int]:
    """The sampler's AdminClient way (``ListOffsetsWays.by_partition``)."""
    futures = admin.list_offsets(
        request, isolation_level=IsolationLevel.READ_UNCOMMITTED, request_timeout=10
    )
    concurrent.futures.wait(futures.values(), timeout=11)
    return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}


def measure(tick: Callable[[], object], ticks: int) -> dict[str, Any]:
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


def run_sampler(bootstrap: str, prefix: str, seconds: float) -> dict[str, Any]:
    """The sampler as the pipeline runs it, ``seconds`` long, asking the offsets
    partitions' ends each tick too: CPU of this process per tick (the sampler's thread, its
    clients' threads, the pipe's feeder thread)."""
    ctx = multiprocessing.get_context("spawn")
    pipe: Any = ctx.Queue(16)
    source = HighWatermarkSource(
        "bench-sampler",
        {"bootstrap.servers": bootstrap},
        include=rf"{re.escape(prefix)}-.*",
        sample_interval_ms=250,
    )
    # as the commits source sets it: each tick also asks where the offsets partitions end
    # (read_committed, one more request per leader)
    source.ends_topic = topics.CONSUMER_OFFSETS
    taken = [0]
    drain_stop = threading.Event()

    def emit(tick: Any) -> None:  # as sampler_process._serve's emit
        try:
            pipe.put_nowait(tick)
        except queue.Full:
            source._stats.count_error("align", "reader_busy")

    def drain() -> None:  # the commits source's side, counted too (a few us a tick)
        while not drain_stop.is_set():
            try:
                pipe.get(timeout=0.1)
                taken[0] += 1
            except queue.Empty:
                pass

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    thread = threading.Thread(target=source.run_alone, args=(emit,), daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while source.stats()["samples"] < 3 and time.monotonic() < deadline:  # connected, warm
        time.sleep(0.05)
    s0, c0, w0 = source.stats(), time.process_time(), time.perf_counter()
    time.sleep(seconds)
    s1, c1, w1 = source.stats(), time.process_time(), time.perf_counter()
    source.stop()
    thread.join(5)
    drain_stop.set()
    drainer.join(2)
    ticks = s1["ticks"] - s0["ticks"]
    return {
        "seconds": round(w1 - w0, 1),
        "ticks": ticks,
        "samples": s1["samples"] - s0["samples"],
        "missed_ticks": s1["missed_ticks"] - s0["missed_ticks"],
        "cpu_ms_per_tick": round((c1 - c0) * 1e3 / max(ticks, 1), 2),
        "cpu_cores_at_250ms": round((c1 - c0) / max(w1 - w0, 1e-9), 3),
        "last_sample_ms": s1["last_sample_ms"],
        "errors": s1["errors"],
        "ticks_taken_from_pipe": taken[0],
    }


def outside_list_offsets(
    watched: dict[str, tuple[int, ...]], hwms: Answers, ticks: int
) -> dict[str, Any]:
    """A tick's work after ListOffsets, timed alone: the messages built and encoded, the
    tick put on a process pipe (``_sample``'s emit path) and read back on the other side."""
    ctx = multiprocessing.get_context("spawn")
    pipe: Any = ctx.Queue(16)
    stats = SamplerStats()

    def tick() -> None:
        messages = [(wm.topic, encode(wm)) for wm in build_watermarks(watched, hwms, 1)]
        pipe.put_nowait((1, messages, stats.header_fields()))
        pipe.get()

    result = measure(tick, ticks)
    result["messages_per_tick"] = len(build_watermarks(watched, hwms, 1))
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--topics", type=int, default=50)
    ap.add_argument("--partitions", type=int, default=50)
    ap.add_argument("--ticks", type=int, default=40)
    ap.add_argument("--sampler-s", type=float, default=10.0)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "list_offsets.json"))
    args = ap.parse_args(argv)
    stamp = run_stamp()
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
        metadata = admin.list_topics(timeout=10)
        watched = {
            t: tuple(metadata.topics[t].partitions[p].leader for p in range(args.partitions))
            for t in topics
        }

        from kafka import KafkaConsumer
        from kafka import TopicPartition as KpTopicPartition

        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False
        )
        kp_partitions = [KpTopicPartition(t, p) for t in topics for p in range(args.partitions)]

        def end_offsets() -> Answers:
            ends = consumer.end_offsets(kp_partitions, timeout_ms=10_000)
            return hwms_by_topic(watched, {(tp.topic, tp.partition): o for tp, o in ends.items()})

        fast = BrokerListOffsets({"bootstrap_servers": bootstrap}, 10_000, wait_ms=10_000)
        deadline = time.monotonic() + 30
        while not fast.connect() and time.monotonic() < deadline:
            pass
        fast.set_partitions(watched)

        def per_broker() -> Answers:
            return fast.latest().hwms

        def admin_way() -> Answers:
            return hwms_by_topic(watched, by_partition(admin, request))

        for _ in range(30):  # new topics: until every leader is known to every client
            try:
                if per_broker() == end_offsets() == admin_way():
                    break
            except Exception:  # a leader not elected yet
                pass
            time.sleep(1)
        load0 = load_average()
        admin_result = measure(admin_way, args.ticks)
        end_offsets_result = measure(end_offsets, args.ticks)
        per_broker_result = measure(per_broker, args.ticks)
        reference = admin_way()
        same = per_broker() == reference and end_offsets() == reference
        outside = outside_list_offsets(watched, per_broker(), args.ticks)
        consumer.close(autocommit=False)
        fast.close()
        sampler = run_sampler(bootstrap, run, args.sampler_s)
        load1 = load_average()
    finally:
        admin.delete_topics(topics)
    per_broker_cpu = max(per_broker_result["cpu_ms_per_tick_median"], 1e-3)
    result = {
        "partitions": args.topics * args.partitions,
        "topics": args.topics,
        "ticks": args.ticks,
        "admin_client_per_partition": admin_result,
        "kafka_python_end_offsets": end_offsets_result,
        "per_broker_requests": per_broker_result,
        "cpu_ratio": round(admin_result["cpu_ms_per_tick_median"] / per_broker_cpu, 2),
        "same_answers": same,
        "tick_after_list_offsets": outside,
        "sampler": sampler,
        "load_average": [load0, load1],
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    result = write_result(args.out, result, stamp)
    print(orjson.dumps(result).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
