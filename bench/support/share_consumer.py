"""A real share consumer for the tests and benchmarks: Kafka's own Java ConsoleShareConsumer
(KIP-932), started through ``deploy/local/kafka.sh tool`` for one topic and share group (fed
by ``bench.support.scaler_harness.Producing``).

confluent-kafka (2.12) has no share consumer, so the tests drive Kafka's. ``kafka.sh tool``
``exec``s the JVM, so the process started here *is* the consumer: SIGSTOP stalls it (it
neither fetches nor acknowledges, as a hung worker would), SIGCONT resumes it, and SIGTERM
lets its shutdown hook close the consumer, which leaves the group at once (a SIGKILL would
leave the member until the broker's share session timeout).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KAFKA_SH = ROOT / "deploy" / "local" / "kafka.sh"
CONSOLE_SHARE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleShareConsumer"


class ShareConsumer:
    """``with ShareConsumer(bootstrap, topic, group) as c: c.wait_consumed(10)``.

    ``release``: the Apache Kafka release whose tools run it (``KAFKA_VERSION``; None: the
    one the environment names, else kafka.sh's default)."""

    def __init__(
        self, bootstrap: str, topic: str, group: str, *extra: str, release: str | None = None
    ) -> None:
        self.topic, self.group = topic, group
        env = {**os.environ, **({"KAFKA_VERSION": release} if release else {})}
        self._lines: list[str] = []
        self._err: list[str] = []
        self._proc = subprocess.Popen(
            [str(KAFKA_SH), "tool", CONSOLE_SHARE_CONSUMER, "--bootstrap-server", bootstrap,
             "--topic", topic, "--group", group, *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        for stream, sink in ((self._proc.stdout, self._lines), (self._proc.stderr, self._err)):
            threading.Thread(target=self._drain, args=(stream, sink), daemon=True).start()

    @staticmethod
    def _drain(stream: object, sink: list[str]) -> None:
        for line in stream:  # type: ignore[attr-defined]
            sink.append(line.rstrip("\n"))

    @property
    def consumed(self) -> list[str]:
        """The record values it printed so far."""
        return list(self._lines)

    def wait_consumed(self, n: int, timeout_s: float = 60.0) -> list[str]:
        deadline = time.monotonic() + timeout_s
        while len(self._lines) < n:
            if self._proc.poll() is not None:
                raise AssertionError(f"the share consumer exited {self._proc.returncode}: "
                                     + "\n".join(self._err[-20:]))  # fmt: skip
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the share consumer printed {len(self._lines)}/{n} records in "
                    f"{timeout_s}s; stderr:\n" + "\n".join(self._err[-20:])
                )
            time.sleep(0.1)
        return self.consumed

    def stall(self) -> None:
        os.kill(self._proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self._proc.pid, signal.SIGCONT)

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM (after SIGCONT, so a stalled JVM can run its shutdown hook), then kill."""
        if self._proc.poll() is not None:
            return
        self.resume()
        self._proc.terminate()
        try:
            self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=10)

    def __enter__(self) -> ShareConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
