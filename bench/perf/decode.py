"""Decode rate of ``__consumer_offsets`` offset-commit records: lagpilot vs kafka-python.

Builds N realistic offset-commit records (OffsetCommitValue v1 and v3, as Kafka and
Redpanda write them; many groups and topics, each group-partition committing repeatedly),
then times, in one process and one core, best of 3:

- ``lagpilot``: ``pipeline.read.offsets.decode_record``;
- ``baseline``: kafka-python 3's generic schema engine (``ApiData``) loaded with Apache
  Kafka's own schemas for these records, decoding key and value. The schemas are read where
  they live, in the reference folder (``../shared/reference/kafka-coordinator-records/`` or
  ``$LAGPILOT_REFERENCE_DIR``); without it the benchmark stops and says so.

The records are encoded from lagpilot's stated layout table
(``pipeline.coordinator.layouts``); both decoders must read them alike.

Records are decoded one at a time and dropped, as the pipeline does; every run gets fresh
bytes objects (as consumed messages are) and runs with the cyclic GC paused, as ``timeit``
does.

Both decoders must agree on every record. Writes ``bench/results/decode.json``
(or ``--out``) with ``lagpilot_rps``, ``baseline_rps`` and ``ratio``.

    .venv/bin/python -m bench.perf.decode [--records N] [--smoke] [--out PATH]
"""

from __future__ import annotations

import argparse
import gc
import platform
import sys
import time
from collections.abc import Callable, Sequence
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

from bench.support import kafka_schemas
from bench.support.machine import load_avg_1m
from bench.support.offsets_records import Commit, build_records
from bench.support.results import run_stamp, write_result
from pipeline.read import offsets
from schemas import OffsetCommit

ROOT = Path(__file__).resolve().parents[2]

TARGET_RPS = 500_000
TARGET_RATIO = 10.0


def lagpilot_decode(records: Sequence[Commit]) -> list[Any]:
    decode = offsets.decode_record
    return [decode(k, v) for k, v in records]


def baseline_decode(records: Sequence[Commit]) -> list[Any]:
    kd, vd = _baseline_decoders()
    return [(kd(k), vd(v)) for k, v in records]


def _baseline_decoders() -> tuple[Callable[[bytes], Any], Callable[[bytes], Any]]:
    key_class = kafka_schemas.schema_class("OffsetCommitKey")
    value_class = kafka_schemas.schema_class("OffsetCommitValue")
    return key_class.decode, value_class.decode


def lagpilot_stream(records: Sequence[Commit]) -> None:
    """Decode one record at a time and let it go, as the pipeline does."""
    decode = offsets.decode_record
    for k, v in records:
        decode(k, v)


def baseline_stream(records: Sequence[Commit]) -> None:
    kd, vd = _baseline_decoders()
    for k, v in records:
        kd(k)
        vd(v)


def fresh(records: Sequence[Commit]) -> list[Commit]:
    """New bytes objects, as every consumed message is: decoding objects that are still
    hot in the CPU cache from the previous run would flatter both decoders."""
    return [(bytes(bytearray(k)), bytes(bytearray(v))) for k, v in records]


def best_rate(fn: Callable[[Sequence[Commit]], None], records: Sequence[Commit]) -> float:
    """Records/s of the fastest of 3 runs."""
    best = float("inf")
    for _ in range(3):
        batch = fresh(records)
        gc.collect()
        gc.disable()
        try:
            t0 = time.perf_counter()
            fn(batch)
            best = min(best, time.perf_counter() - t0)
        finally:
            gc.enable()
    return len(records) / best


def as_commit(key: Any, value: Any) -> OffsetCommit:
    """kafka-python's decoding in lagpilot's terms, to check the two agree."""
    version = value.version
    expire = value.expire_timestamp if version == 1 else -1
    return OffsetCommit(
        group=key.group,
        topic=key.topic,
        partition=key.partition,
        offset=value.offset,
        commit_ts_ms=value.commit_timestamp,
        leader_epoch=value.leader_epoch if version >= 3 else -1,
        metadata=value.metadata,
        expire_ts_ms=None if expire < 0 else expire,
    )


def mismatches(records: Sequence[Commit]) -> int:
    ours = lagpilot_decode(records)
    theirs = baseline_decode(records)
    return sum(a != as_commit(k, v) for a, (k, v) in zip(ours, theirs, strict=True))


def run(n: int) -> dict[str, Any]:
    records = build_records(n)
    lagpilot_rps = best_rate(lagpilot_stream, records)
    baseline_rps = best_rate(baseline_stream, records)
    bad = mismatches(records)
    return {
        "lagpilot_rps": round(lagpilot_rps),
        "baseline_rps": round(baseline_rps),
        "ratio": round(lagpilot_rps / baseline_rps, 2),
        "records": n,
        "distinct_keys": len({k for k, _ in records}),
        "value_versions": {
            f"v{v}": sum(1 for _, val in records if val[1] == v)
            for v in sorted({r[1][1] for r in records})
        },
        "agreed": bad == 0,
        "mismatches": bad,
        "best_of": 3,
        "method": "one record at a time, results dropped; GC paused; fresh bytes per run",
        "target_rps": TARGET_RPS,
        "target_ratio": TARGET_RATIO,
        "python": platform.python_version(),
        "kafka_python": package_version("kafka-python"),
        "machine": platform.machine(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000, help="records per run")
    parser.add_argument("--smoke", action="store_true", help="tiny run for the test suite")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "decode.json")
    args = parser.parse_args(argv)
    n = 2_000 if args.smoke else args.records
    try:
        kafka_schemas.schema_dir()
    except FileNotFoundError as exc:
        print(f"error: the baseline needs Kafka's schemas: {exc}", file=sys.stderr)
        return 2
    stamp = run_stamp()
    result = run(n)
    result.update(load_avg_1m_end=load_avg_1m())
    result = write_result(args.out, result, stamp)
    print(
        f"lagpilot  {result['lagpilot_rps']:>12,} records/s\n"
        f"baseline  {result['baseline_rps']:>12,} records/s  "
        f"(kafka-python {result['kafka_python']})\n"
        f"ratio     {result['ratio']:>12}x  over {n:,} records, "
        f"{result['distinct_keys']:,} distinct keys, agreed={result['agreed']}\n"
        f"wrote {args.out}"
    )
    if not result["agreed"]:
        print(f"error: the decoders disagree on {result['mismatches']} records", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
