"""CPU-bound handlers: the worker SDK's process mode against threads and a naive consumer.

Pure-Python work of ``--work-ms`` per message (4 ms: it holds the GIL, as parsing, OCR or
embedding in Python does), 8 partitions, 1,000 keys, key order kept; the modes and fields
are described in bench/support/cpu_bound.py (``make bench-workers`` runs the same and adds
the ``cpu_bound_*`` fields to workers.json). Target: ``cpu_bound_process_ratio`` (process
mode / naive) >= 0.8 x ``cpus``, nothing lost, no duplicate, key order kept.

    .venv/bin/python -m bench.perf.workers_cpu [--messages 2000] [--smoke] [--out PATH]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import orjson

from bench.support import broker
from bench.support.cpu_bound import LANES, SMOKE, WORK_MS, run_cpu_bound
from bench.support.results import run_stamp, write_result

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--messages", type=int, default=2000, help="process mode's")
    p.add_argument("--threads-messages", type=int, default=600)
    p.add_argument("--naive-messages", type=int, default=300, help="each naive run's")
    p.add_argument("--work-ms", type=float, default=WORK_MS)
    p.add_argument("--lanes", type=int, default=LANES)
    p.add_argument("--processes", type=int, default=None, help="unset: the usable CPUs")
    p.add_argument("--smoke", action="store_true", help="seconds: a few messages of 1 ms each")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "workers_cpu.json")
    args = p.parse_args()
    stamp = run_stamp()
    sizes = {"messages": args.messages, "naive_messages": args.naive_messages,
             "threads_messages": args.threads_messages, "work_ms": args.work_ms}  # fmt: skip
    result = run_cpu_bound(broker.bootstrap(), **(SMOKE if args.smoke else sizes),
                           lanes=args.lanes, processes=args.processes)  # fmt: skip
    result = write_result(args.out, result, stamp)
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
