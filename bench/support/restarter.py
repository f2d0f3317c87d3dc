"""Member processes kept running, as a Deployment's kubelet keeps its pods: a member that
dies is restarted after ``restart_s`` under the same client id (a restarted container
keeps its pod's name). Each death is recorded with the member's client id, so a scenario
can say whose partitions moved (bench/incidents/storm.py).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class Restarter:
    """Keeps ``members`` processes of ``python -m <module> <args> --client-id <id>`` running;
    member ``i``'s client id is ``<run>-m<i>``."""

    def __init__(self, module: str, args: list[str], members: int, run: str,
                 restart_s: float, logdir: Path) -> None:  # fmt: skip
        self.module, self.args, self.run = module, args, run
        self.restart_s, self.logdir = restart_s, logdir
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * members
        self.deaths: list[tuple[int, str]] = []  # (epoch ms, client id)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="restarter", daemon=True)

    def client_id(self, i: int) -> str:
        return f"{self.run}-m{i}"

    def _spawn(self, i: int) -> None:
        log = open(self.logdir / f"member-{self.run}-{i}.log", "ab")  # noqa: SIM115
        self.procs[i] = subprocess.Popen(
            [sys.executable, "-m", self.module, *self.args, "--client-id", self.client_id(i)],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def start(self) -> Restarter:
        for i in range(len(self.procs)):
            self._spawn(i)
        self._thread.start()
        return self

    def _loop(self) -> None:
        dead_since: dict[int, float] = {}
        while not self._stop.is_set():
            for i, p in enumerate(self.procs):
                if p is None or p.poll() is None:
                    continue
                if i not in dead_since:
                    dead_since[i] = time.monotonic()
                    self.deaths.append((int(time.time() * 1000), self.client_id(i)))
                elif time.monotonic() - dead_since[i] >= self.restart_s:
                    del dead_since[i]
                    self._spawn(i)
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.terminate()
        for p in self.procs:
            if p is not None:
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
