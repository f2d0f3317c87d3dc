"""Helpers for the KEDA scaler's integration tests and bench: the scaler as a process, and
a KEDA-like client (built from the same stubs) that records every pushed value."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import grpc

from bench.support.harness import free_port
from pipeline.serve.keda import externalscaler_pb2 as pb
from pipeline.serve.keda import externalscaler_pb2_grpc as pb_grpc


class ScalerProcess:
    """``python -m pipeline.serve.keda.server`` in a subprocess (a fixed port, so a restarted one
    is found where the old one was, as a Kubernetes Service would)."""

    def __init__(self, bootstrap: str, log_dir: Path, port: int | None = None) -> None:
        self.bootstrap = bootstrap
        self.port = port or free_port()
        self.metrics_port = free_port()
        self.log_path = log_dir / f"scaler-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ScalerProcess:
        log = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the process' life
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline.serve.keda.server", "--port", str(self.port),
             "--metrics-port", str(self.metrics_port)],
            env={**os.environ, "KAFKA_BOOTSTRAP": self.bootstrap},
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        return self

    def wait_ready(self, timeout_s: float = 60) -> float:
        """Seconds until /readyz said yes (lagpilot.lag read back to its end)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            try:
                url = f"http://127.0.0.1:{self.metrics_port}/readyz"
                with urllib.request.urlopen(url, timeout=1):
                    return time.monotonic() - t0
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"scaler never became ready:\n{self.log_tail()}")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=20)
            self.proc = None

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def ref(name: str, **md: str) -> pb.ScaledObjectRef:
    return pb.ScaledObjectRef(name=name, namespace="agents", scalerMetadata=md)


class Client:
    """What KEDA does with the scaler: unary calls, and streams it holds open."""

    def __init__(self, port: int) -> None:
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = pb_grpc.ExternalScalerStub(self.channel)

    def metric(self, r: pb.ScaledObjectRef, timeout_s: float = 5) -> float:
        got = self.stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=r), timeout=timeout_s)
        return float(got.metricValues[0].metricValueFloat)

    def is_active(self, r: pb.ScaledObjectRef) -> bool:
        return bool(self.stub.IsActive(r, timeout=5).result)

    def close(self) -> None:
        self.channel.close()


class PushWatcher:
    """Holds StreamIsActive open, recording (value, epoch ms received) of each push."""

    def __init__(self, client: Client, r: pb.ScaledObjectRef) -> None:
        self.pushes: list[tuple[bool, float]] = []
        self._lock = threading.Lock()
        self._stream: Any = client.stub.StreamIsActive(r)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for resp in self._stream:
                with self._lock:
                    self.pushes.append((resp.result, time.time() * 1000))
        except grpc.RpcError:
            pass  # cancelled at close, or the server went away

    def since(self, ms: float) -> list[tuple[bool, float]]:
        with self._lock:
            return [p for p in self.pushes if p[1] >= ms]

    def wait(self, value: bool, after_ms: float, timeout_s: float) -> float:
        """Epoch ms of the first push of ``value`` received after ``after_ms``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for v, at in self.since(after_ms):
                if v is value:
                    return at
            time.sleep(0.005)
        raise AssertionError(f"no push of {value} within {timeout_s}s: {self.pushes[-5:]}")

    def close(self) -> None:
        self._stream.cancel()
        self._thread.join(5)


class Members:
    """``n`` real members of ``group`` (subscribed: the broker counts them), each consuming
    at most ``rate`` msgs/s and auto-committing every 100 ms: a saturated consumer group
    whose one-consumer rate is known."""

    def __init__(self, bootstrap: str, topic: str, group: str, n: int, rate: float) -> None:
        self.bootstrap, self.topic, self.group, self.rate = bootstrap, topic, group, rate
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(n)]

    def __enter__(self) -> Members:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)

    def _run(self) -> None:
        from confluent_kafka import Consumer

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                      "auto.offset.reset": "earliest", "enable.auto.commit": True,
                      "auto.commit.interval.ms": 100, "session.timeout.ms": 10_000})  # fmt: skip
        c.subscribe([self.topic])
        t0, done = time.monotonic(), 0
        try:
            while not self._stop.is_set():
                ahead_s = done / self.rate - (time.monotonic() - t0)
                if ahead_s > 0:
                    time.sleep(min(ahead_s, 0.05))
                    continue
                msg = c.poll(0.05)
                if msg is not None and not msg.error():
                    done += 1
        finally:
            c.close()


class Producing:
    """``rate`` msgs/s on every one of ``partitions`` partitions of ``topic``, in a thread."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float) -> None:
        self.bootstrap, self.topic, self.partitions, self.rate = bootstrap, topic, partitions, rate
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Producing:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stops producing once what was sent is delivered (again: nothing)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def _run(self) -> None:
        from bench.support.harness import producer

        p, t0, sent = producer(self.bootstrap), time.monotonic(), 0
        while not self._stop.is_set():
            due = int((time.monotonic() - t0) * self.rate)
            while sent < due:
                for part in range(self.partitions):
                    p.produce(self.topic, b"x" * 64, partition=part)
                sent += 1
            p.poll(0)
            time.sleep(0.01)
        p.flush(10)


def scrape(port: int, name: str) -> dict[str, float]:
    """``{label values: value}`` of one family on the scaler's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, _, value = line[len(name) :].rpartition(" ")
            out[labels] = float(value)
    return out
