"""CPU-bound handlers through the worker SDK: process mode vs. threads vs. a naive consumer.

Shared by ``bench.perf.workers_cpu`` (alone: ``bench/results/workers_cpu.json``) and
``bench.perf.workers`` (its ``cpu_bound_*`` fields), so it lives here: no scenario imports
another.

The handler computes in pure Python (an LCG loop: it holds the GIL throughout, as parsing,
OCR or embedding in Python does) for ``work_ms``, calibrated once per run to an iteration
count so every mode does the same work, then appends ``(time, key, seq)`` to a log file of
its process and thread (a worker process cannot write into the parent's memory). Modes,
each with its own consumer group on one topic of ``PARTITIONS`` partitions and ``KEYS``
keys:

- ``naive``: one plain consumer, the handler run in its poll loop (before the modes, and
  again after them: the ratios divide by the mean, as the machine's load moves);
- ``threads``: ``Worker`` with its default executor (``lanes`` lanes per partition);
- ``process``: ``Worker(executor="processes")``, one worker process per usable CPU.

records/s counts from a mode's first handled message to its last (group joins excluded).
``lost`` = messages never handled, ``duplicates`` = handled twice, ``order_violations`` = a
key's message handled after a later one of the same key. Target:
``cpu_bound_process_ratio`` (process / naive) >= 0.8 x ``cpus``.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import resource
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, TextIO

from confluent_kafka import Consumer, Producer

from actuators.workers import EffectGuard, Worker
from actuators.workers.processes import usable_cpus
from bench.support.handled import judge
from bench.support.harness import create_topic
from schemas.keys import DECIDE, Keyring, SigningKey

PARTITIONS = 8
KEYS = 1000
WORK_MS = 4.0
LANES = 4
#: the target: process mode reaches this share of cpus x the naive consumer's rate
TARGET_SHARE_OF_CPUS = 0.8
MODES = ("threads", "process")
#: a run of seconds, so the benchmark cannot rot (tests/bench): its figures mean nothing
SMOKE = {"messages": 200, "threads_messages": 60, "naive_messages": 40, "work_ms": 1.0}

_logs: dict[tuple[str, int, int], TextIO] = {}  # (folder, pid, thread) -> its log file


def spin(iterations: int) -> int:
    """The handler's work: pure-Python arithmetic, the same for every mode."""
    x = 0
    for _ in range(iterations):
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF
    return x


def calibrate(work_ms: float) -> int:
    """Iterations of ``spin`` that take about ``work_ms`` here (the fastest of five tries,
    so a busy moment does not shrink the work)."""
    n = 200_000
    best_s = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        spin(n)
        best_s = min(best_s, time.perf_counter() - start)
    return max(1, round(n * work_ms / 1000 / best_s))


def handle(msg: Any, ctx: EffectGuard | None, *, iterations: int, logs: str) -> None:
    """Compute, then log the message (module level: worker processes import it by name)."""
    spin(iterations)
    where = (logs, os.getpid(), threading.get_ident())
    log = _logs.get(where)
    if log is None:
        log = _logs[where] = open(  # noqa: SIM115 (open for the life of the process)
            Path(logs) / f"{where[1]}-{where[2]}.log", "a", buffering=1
        )
    log.write(f"{time.monotonic_ns()} {(msg.key() or b'').decode()} {int(msg.value())}\n")


def produce(bootstrap: str, topic: str, n: int) -> None:
    """``n`` messages over ``KEYS`` keys; the value is the key's sequence number."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    seq = [0] * KEYS
    for i in range(n):
        k = i % KEYS
        p.produce(topic, key=f"k{k}".encode(), value=str(seq[k]).encode())
        seq[k] += 1
    assert p.flush(60) == 0, "produce did not finish in 60 s"


def summarize(logs: Path, expected: int) -> dict[str, Any]:
    """What the handler logged in ``logs``: handled, rate, lost, duplicates, order."""
    entries: list[tuple[int, str, int]] = []
    for path in logs.glob("*.log"):
        for line in path.read_text().splitlines():
            t, key, seq = line.split()
            entries.append((int(t), key, int(seq)))
    got = judge(entries)
    return {
        "handled": got.handled,
        "records_per_s": got.records_per_s,
        "lost": got.lost(expected),
        "duplicates": got.duplicates,
        "order_violations": got.order_violations,
    }


class CpuMeter:
    """CPU seconds over a window: this process's (all its threads), its live children's
    (the worker processes), and the whole host's busy time (``/proc/stat``), so a result
    says how many cores a mode got and how many the rest of the host took meanwhile."""

    TICK_S = 1 / os.sysconf("SC_CLK_TCK")

    def __init__(self) -> None:
        self._start = self._read()

    def _read(self) -> tuple[float, float, float]:
        own = resource.getrusage(resource.RUSAGE_SELF)
        children = 0.0
        for proc in multiprocessing.active_children():
            try:
                fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
                children += (int(fields[11]) + int(fields[12])) * self.TICK_S
            except (OSError, IndexError, ValueError):
                continue  # ended meanwhile
        cpu = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        host_busy = (sum(cpu) - cpu[3] - cpu[4]) * self.TICK_S  # all but idle and iowait
        return own.ru_utime + own.ru_stime, children, host_busy

    def cores(self, span_s: float) -> dict[str, float]:
        """Cores used since the meter started, over ``span_s`` seconds of wall time."""
        own, children, host = (b - a for a, b in zip(self._start, self._read(), strict=True))
        ours = own + children
        span_s = max(span_s, 1e-9)
        return {"cores_used": round(ours / span_s, 2),
                "host_cores_busy_others": round(max(host - ours, 0.0) / span_s, 2)}  # fmt: skip


def _wait(done: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.05)


def run_naive(bootstrap: str, topic: str, n: int, group: str, handler: Any, logs: Path) -> dict:
    """One plain consumer: consume a batch, handle each message in turn, commit, repeat;
    it stops after ``n`` messages."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-{group}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    c.subscribe([topic])
    handled = 0
    meter: CpuMeter | None = None
    started = 0.0
    try:
        deadline = time.monotonic() + 600
        while handled < n and time.monotonic() < deadline:
            batch = c.consume(num_messages=min(500, n - handled), timeout=0.5)
            for m in batch:
                if m.error() is None:
                    if meter is None:
                        meter, started = CpuMeter(), time.monotonic()
                    handler(m, None)
                    handled += 1
            if batch:
                c.commit(asynchronous=True)
        cores = meter.cores(time.monotonic() - started) if meter is not None else {}
    finally:
        c.close()
    return summarize(logs, n) | cores


def run_worker(bootstrap: str, topic: str, n: int, mode: str, handler: Any, logs: Path,
               store: Path, lanes: int, processes: int) -> dict[str, Any]:  # fmt: skip
    """One ``Worker`` (threads, or process mode) until it handled ``n`` messages; also the
    worker process's own CPU per message (poll loop, lanes, and in process mode the IPC)."""
    keyring = Keyring.of([SigningKey.generate(DECIDE).public()])
    extra: dict[str, Any] = {"executor": "processes", "processes": processes}
    worker = Worker(bootstrap=bootstrap, group=f"{topic}-{mode}", topics=[topic],
                    handler=handler, instance_id="", dedupe=store, signing_key=keyring,
                    outcomes_topic=None, control_topic=f"{topic}-control", lanes=lanes,
                    progress_interval_ms=0, control_replay_s=0,
                    **(extra if mode == "process" else {}))  # fmt: skip
    worker.start()
    cpu_start = resource.getrusage(resource.RUSAGE_SELF)
    try:
        # the window of the cores used: from the first handled message to the last
        _wait(lambda: worker.stats().get("processed", 0) > 0 or worker.error is not None, 120)
        meter, started = CpuMeter(), time.monotonic()
        _wait(lambda: worker.stats().get("processed", 0) >= n or worker.error is not None, 600)
        cores = meter.cores(time.monotonic() - started)
        cpu_end = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        worker.stop()
    out = summarize(logs, n) | cores
    cpu_s = (cpu_end.ru_utime - cpu_start.ru_utime) + (cpu_end.ru_stime - cpu_start.ru_stime)
    # the worker's own process: poll loop and lanes (and in process mode, the pipes)
    out["worker_cpu_us_per_msg"] = round(cpu_s / max(out["handled"], 1) * 1e6, 1)
    out["error"] = repr(worker.error) if worker.error is not None else None
    return out


def run_cpu_bound(
    bootstrap: str,
    *,
    messages: int = 2000,
    naive_messages: int = 300,
    threads_messages: int = 600,
    work_ms: float = WORK_MS,
    lanes: int = LANES,
    processes: int | None = None,
) -> dict[str, Any]:
    """Run the three modes on one fresh topic; returns the ``cpu_bound_*`` fields."""
    cpus = usable_cpus()
    processes = processes or cpus
    iterations = calibrate(work_ms)
    # a topic per mode, of exactly the messages it handles: a worker stopping after its
    # last one handled nothing beyond it, so ``lost`` counts only what it never handled
    run_id = uuid.uuid4().hex[:6]
    sizes = {"naive": naive_messages, "threads": threads_messages, "process": messages}
    topics = {mode: f"bench-workers-cpu-{run_id}-{mode}" for mode in sizes}
    for mode, topic in topics.items():
        create_topic(bootstrap, topic, PARTITIONS)
        create_topic(bootstrap, f"{topic}-control", 1)
        produce(bootstrap, topic, sizes[mode])
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:

        def logs(name: str) -> tuple[Path, Any]:
            folder = Path(tmp) / name
            folder.mkdir()
            return folder, functools.partial(handle, iterations=iterations, logs=str(folder))

        folder, handler = logs("naive")
        naive_topic = topics["naive"]
        runs["naive"] = run_naive(bootstrap, naive_topic, naive_messages, "naive", handler, folder)
        for mode in MODES:
            folder, handler = logs(mode)
            load = round(os.getloadavg()[0], 2)
            runs[mode] = run_worker(bootstrap, topics[mode], sizes[mode], mode, handler, folder,
                                    Path(tmp) / f"{mode}.sqlite", lanes, processes)  # fmt: skip
            runs[mode]["load_avg_1m_before"] = load
        folder, handler = logs("naive_after")
        runs["naive_after"] = run_naive(bootstrap, naive_topic, naive_messages, "naive-after",
                                        handler, folder)  # fmt: skip
    naive = (runs["naive"]["records_per_s"] + runs["naive_after"]["records_per_s"]) / 2
    process, threads = runs["process"]["records_per_s"], runs["threads"]["records_per_s"]
    out: dict[str, Any] = {
        "cpu_bound_setup": {
            "work_ms": work_ms,
            "iterations": iterations,
            "partitions": PARTITIONS,
            "keys": KEYS,
            "lanes": lanes,
            "processes": processes,
            **{f"{mode}_messages": n for mode, n in sizes.items()},
        },
        "cpu_bound_runs": runs,
        "cpus": cpus,  # usable here (the results stamp's ``cpus`` is the host's count)
        "cpus_usable": cpus,
        "cpu_bound_naive_per_s": round(naive, 1),
        "cpu_bound_threads_per_s": threads,
        "cpu_bound_process_per_s": process,
        "cpu_bound_process_ratio": round(process / naive, 2),
        "cpu_bound_threads_ratio": round(threads / naive, 2),
        "cpu_bound_target": {"cpu_bound_process_ratio": round(TARGET_SHARE_OF_CPUS * cpus, 2)},
    }
    # cores each mode got, and what the rest of the host took meanwhile: on a shared host,
    # one busy neighbour core halves what two worker processes can add over one consumer
    out["cpu_bound_cores_used"] = {m: run.get("cores_used") for m, run in runs.items()}
    out["cpu_bound_host_cores_busy_others"] = {
        m: run.get("host_cores_busy_others") for m, run in runs.items()
    }
    for field in ("lost", "duplicates", "order_violations"):
        out[f"cpu_bound_{field}"] = {mode: run[field] for mode, run in runs.items()}
    clean = all(sum(out[f"cpu_bound_{f}"].values()) == 0
                for f in ("lost", "duplicates", "order_violations"))  # fmt: skip
    out["cpu_bound_met"] = clean and out["cpu_bound_process_ratio"] >= TARGET_SHARE_OF_CPUS * cpus
    return out
