"""Helpers for pipeline integration tests: run the real pipeline as a process, script
producers and consumers with known rates, and read what it publishes on lagpilot.lag."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from schemas import topics


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PipelineProcess:
    """``python -m pipeline`` in a subprocess, watching only ``include``."""

    def __init__(self, bootstrap: str, include: str, state_dir: Path, **env: str) -> None:
        self.bootstrap = bootstrap
        self.include = include
        self.state_dir = state_dir
        self.group = f"lagpilot-test-{uuid.uuid4().hex[:8]}"
        self.metrics_port = free_port()
        self.extra_env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = state_dir.parent / f"{state_dir.name}.log"

    def start(self) -> PipelineProcess:
        env = {
            **os.environ,
            "KAFKA_BOOTSTRAP": self.bootstrap,
            "LAGPILOT_CONSUMER_GROUP": self.group,
            "LAGPILOT_STATE_DIR": str(self.state_dir),
            "LAGPILOT_INCLUDE": self.include,
            "LAGPILOT_METRICS_PORT": str(self.metrics_port),
            "LAGPILOT_RUN_POLICY": "false",
            # tests read per-partition snapshots and every summary: publish them often
            "LAGPILOT_PARTITION_SNAPSHOT_INTERVAL_MS": "1000",
            "LAGPILOT_OK_SUMMARY_INTERVAL_MS": "0",
            **self.extra_env,
        }
        log = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the process' life
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline"], env=env, stdout=log, stderr=subprocess.STDOUT
        )
        return self

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is None:
            return
        # the sampler runs in a child process of its own: kill the whole tree
        children = _children(self.proc.pid)
        self.proc.send_signal(sig)
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        self.kill(signal.SIGTERM)

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def _children(pid: int) -> list[int]:
    """Direct children of ``pid``, from /proc/<pid>/stat (the command name, in parentheses,
    may hold spaces: the fields are read after its closing parenthesis)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[-1].split()
            if len(fields) > 1 and fields[1].isdigit() and int(fields[1]) == pid:
                out.append(int(entry.name))
    return out


class LagReader:
    """Collects lagpilot.lag events of chosen groups in a background thread."""

    def __init__(self, bootstrap: str, groups: set[str]) -> None:
        self.groups = groups
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "latest",
                "enable.auto.commit": False,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self, timeout_s: float = 60) -> LagReader:
        """Assign every partition of lagpilot.lag at its end (no group join to wait for);
        waits for the topic, which the pipeline creates when it starts."""
        deadline = time.monotonic() + timeout_s
        while True:
            md = self._consumer.list_topics(topics.LAG, timeout=5).topics.get(topics.LAG)
            if md is not None and md.error is None and md.partitions:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"{topics.LAG} never appeared: is the pipeline running?")
            time.sleep(0.2)
        parts = []
        for p in md.partitions:
            while True:
                try:
                    _, high = self._consumer.get_watermark_offsets(
                        TopicPartition(topics.LAG, p), timeout=5
                    )
                    break
                except KafkaException as exc:  # a just-started broker: no leader yet
                    if time.monotonic() > deadline:
                        raise AssertionError(f"{topics.LAG}[{p}] has no end offset: {exc}") from exc
                    time.sleep(0.2)
            parts.append(TopicPartition(topics.LAG, p, high))
        self._consumer.assign(parts)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self._consumer.poll(0.1)
            if msg is None or msg.error():
                continue
            ev = orjson.loads(msg.value())
            if ev.get("group") in self.groups:
                ev["_received_ms"] = int(time.time() * 1000)
                with self._lock:
                    self.events.append(ev)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._consumer.close()

    def select(self, pred: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self.events if pred(e)]

    def wait_for(
        self, pred: Callable[[dict[str, Any]], bool], timeout_s: float = 30.0
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = self.select(pred)
            if found:
                return found[0]
            time.sleep(0.05)
        raise AssertionError(f"no matching lag event within {timeout_s}s")


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit offsets for ``group`` as a scripted consumer would (no membership needed)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False
        )
    finally:
        c.close()


class ScriptedCommitter:
    """A consumer that commits offsets itself, at a known pace, on one long-lived client."""

    def __init__(self, bootstrap: str, group: str) -> None:
        self._c = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
        )

    def commit(self, topic: str, partition: int, offset: int) -> None:
        self._c.commit(offsets=[TopicPartition(topic, partition, offset)], asynchronous=False)

    def commit_many(self, topic: str, offsets: list[tuple[int, int]]) -> None:
        """One OffsetCommit request for several partitions, as a consumer sends it."""
        tps = [TopicPartition(topic, p, o) for p, o in offsets]
        self._c.commit(offsets=tps, asynchronous=False)

    def close(self) -> None:
        self._c.close()


def producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})


def produce_timestamps(
    bootstrap: str, topic: str, partition: int, offsets: list[int]
) -> dict[int, int]:
    """The broker timestamps (ms) of the messages at ``offsets``."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"ts-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
        }
    )
    out: dict[int, int] = {}
    try:
        for off in offsets:
            c.assign([TopicPartition(topic, partition, off)])
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                msg = c.poll(0.5)
                if msg is not None and not msg.error():
                    out[off] = msg.timestamp()[1]
                    break
    finally:
        c.close()
    return out


class ScriptedLoad:
    """Producers and a consumer with known rates on ``partitions`` partitions of a topic.

    Each partition gets ``rate`` msgs/s; the consumer processes, per partition,
    ``consume_rate`` msgs/s (``None``: keeps up with the producer) and commits what it
    processed every ``commit_every_s`` (0.1 s). With ``progress``, it also reports its
    processed positions as an SDK worker does (``actuators.workers.ProgressReporter``,
    every 125 ms, on the sampler's grid), with the messages it holds (produced, not
    processed) in flight. ``stall(p)`` freezes one partition's processing
    (its producer goes on) and returns the onset; ``slow(p, r)`` makes it process only
    ``r`` msgs/s from now on (a hot partition: it moves, and falls behind); ``resume(p)``
    lets it catch up; ``stop_consuming()`` stalls them all.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        group: str,
        rate: float,
        consume_rate: float | None = None,
        partitions: int = 1,
        commit_every_s: float = 0.1,
        progress: bool = False,
    ) -> None:
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.rate, self.consume_rate, self.partitions = rate, consume_rate, partitions
        self.commit_every_s = commit_every_s
        self.produced = [0] * partitions
        self.processed = [0] * partitions
        self.progress_ms = [int(time.time() * 1000)] * partitions
        self.committed = [0] * partitions
        self.stalled: dict[int, float] = {}  # partition -> onset (epoch s)
        self.slowed: dict[int, tuple[float, int, float]] = {}  # p -> (onset, processed, rate)
        self.stopped_consuming_ms = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._produce),
            threading.Thread(target=self._commit),
        ]
        self.reporter = None
        if progress:
            from actuators.workers import PartitionProgress, ProgressReporter

            def snapshot() -> list[PartitionProgress]:
                # what an SDK worker holds: the messages produced and not processed (a
                # consumer fetches them while its handler is stuck)
                with self._lock:
                    return [
                        PartitionProgress(
                            topic,
                            p,
                            self.processed[p],
                            self.progress_ms[p],
                            in_flight=max(0, self.produced[p] - self.processed[p]),
                            running=int(p in self.stalled and self.produced[p] > self.processed[p]),
                        )
                        for p in range(partitions)
                    ]

            self.reporter = ProgressReporter(
                group=group,
                member=f"scripted-{group}",
                snapshot=snapshot,
                producer_config={"bootstrap.servers": bootstrap},
            )

    def __enter__(self) -> ScriptedLoad:
        for t in self._threads:
            t.start()
        if self.reporter is not None:
            self.reporter.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self.reporter is not None:
            self.reporter.stop()
        for t in self._threads:
            t.join()

    def _produce(self) -> None:
        p = producer(self.bootstrap)
        t0 = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - t0) * self.rate)
            for part in range(self.partitions):
                while self.produced[part] < due:
                    p.produce(self.topic, b"x" * 64, partition=part)
                    self.produced[part] += 1
            p.poll(0)
            time.sleep(0.005)
        p.flush(10)

    def _commit(self) -> None:
        c = ScriptedCommitter(self.bootstrap, self.group)
        t0 = next_commit = time.monotonic()
        try:
            while not self._stop.is_set():
                time.sleep(0.01)
                now = time.monotonic()
                with self._lock:
                    for part in range(self.partitions):
                        if part in self.stalled:
                            continue
                        if part in self.slowed:
                            since, done, rate = self.slowed[part]
                            target = min(done + int((now - since) * rate), self.produced[part])
                        elif self.consume_rate is None:
                            target = self.produced[part]
                        else:
                            by_rate = int((now - t0) * self.consume_rate)
                            target = min(by_rate, self.produced[part])
                        if target > self.processed[part]:
                            self.processed[part] = target
                            self.progress_ms[part] = int(time.time() * 1000)
                    todo = [
                        (part, self.processed[part])
                        for part in range(self.partitions)
                        if self.processed[part] > self.committed[part]  # done before a stall too
                    ]
                if now < next_commit:
                    continue
                next_commit += self.commit_every_s
                if todo:
                    # one request for all partitions (four round trips in a row, on a busy
                    # host, held up this thread's processing for half a second)
                    c.commit_many(self.topic, todo)
                for part, target in todo:
                    self.committed[part] = target
        finally:
            c.close()

    def stall(self, partition: int) -> float:
        with self._lock:
            onset = time.time()
            self.stalled[partition] = onset
        return onset

    def slow(self, partition: int, rate_per_s: float) -> float:
        with self._lock:
            onset = time.monotonic()
            self.slowed[partition] = (onset, self.processed[partition], rate_per_s)
        return onset

    def resume(self, partition: int) -> None:
        with self._lock:
            self.stalled.pop(partition, None)
            self.slowed.pop(partition, None)

    def stop_consuming(self) -> None:
        for part in range(self.partitions):
            self.stall(part)
        time.sleep(0.15)  # let an in-flight commit land
        self.stopped_consuming_ms = int(time.time() * 1000)
