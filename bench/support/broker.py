"""The broker the demo and every benchmark use: one source for its address.

In order: ``KAFKA_BOOTSTRAP`` (any running Kafka or Redpanda), else the address that
``deploy/local/kafka.sh up`` recorded for the local broker it started (``kafka.sh status``
prints it). Nothing here parses what a start printed: ``kafka.sh up`` writes only the address
on stdout, but the record is what every reader (the Makefile, the test fixtures, this module)
takes, so a stray line from Maven or Java can never become an address.

:class:`OwnBroker` (with :func:`own_broker`) is a broker of a benchmark's own instead: its
port, run folder and PIDs, up, killed -9 node by node, restarted on its own data, down; the
fault benchmark kills only those.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KAFKA_SH = ROOT / "deploy" / "local" / "kafka.sh"
HOW_TO_START = (
    "no broker: start the local one with `make broker-up`, or set KAFKA_BOOTSTRAP=host:port "
    "to a running Kafka or Redpanda"
)
RESTART_TRIES = 3  # node starts an OwnBroker makes before a restart counts as failed


def recorded() -> str | None:
    """The address of the running local broker, as ``kafka.sh up`` recorded it, or None."""
    status = subprocess.run([str(KAFKA_SH), "status"], capture_output=True, text=True)
    address = status.stdout.strip()
    return address if status.returncode == 0 and address else None


def bootstrap(explicit: str | None = None) -> str:
    """``explicit`` (a --bootstrap flag), else ``KAFKA_BOOTSTRAP``, else the local broker's
    recorded address; exits with what to do when there is none."""
    address = explicit or os.environ.get("KAFKA_BOOTSTRAP") or recorded()
    if not address:
        raise SystemExit(f"error: {HOW_TO_START}")
    return address


def start_local() -> str:
    """Start the local broker (its progress and Maven's output go to our stderr) and return
    the address it recorded. Raises RuntimeError when it could not start."""
    up = subprocess.run([str(KAFKA_SH), "up"], stdout=subprocess.DEVNULL)
    address = recorded()
    if up.returncode != 0 or address is None:
        raise RuntimeError(f"`{KAFKA_SH} up` failed (exit {up.returncode}): see its output above")
    return address


def stop_local() -> None:
    subprocess.run([str(KAFKA_SH), "down"], capture_output=True)


@dataclass
class OwnBroker:
    """A broker of the benchmark's own: its port, its run folder, its recorded PIDs."""

    port: int
    brokers: int = 1
    #: more environment for kafka.sh (e.g. LAGPILOT_BROKER_EXTRA_LISTENERS)
    extra_env: dict[str, str] = field(default_factory=dict)
    run_dir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="lagpilot-faults-run-"))
    bootstrap: str = ""
    restarts: int = 0
    failed_restarts: int = 0  # node starts that exited: a supervisor started them again
    died_on_own: list[str] = field(default_factory=list)  # nodes found dead at their kill

    @property
    def env(self) -> dict[str, str]:
        return os.environ | {
            "LAGPILOT_BROKER_PORT": str(self.port),
            "LAGPILOT_BROKER_RUN_DIR": self.run_dir,
            **self.extra_env,
        }

    def up(self) -> str:
        cmd = [str(KAFKA_SH), "up", "--brokers", str(self.brokers)]
        done = subprocess.run(cmd, env=self.env, stdout=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"could not start a broker on port {self.port} (see above)")
        self.bootstrap = done.stdout.strip().splitlines()[-1]
        return self.bootstrap

    def restart(self) -> None:
        """The killed node again, on its own data (``kafka.sh up`` would format a new one)."""
        for _ in range(RESTART_TRIES):
            self.restarts += 1
            done = subprocess.run([str(KAFKA_SH), "restart"], env=self.env, stdout=subprocess.PIPE)
            if done.returncode == 0:
                return
            # A node may exit at start under load (KRaft: not caught up with the controller
            # in time); a supervisor (systemd Restart=on-failure, Kubernetes) starts it again.
            self.failed_restarts += 1
        raise RuntimeError(f"kafka.sh restart failed (see above); {self.log_tails()}")

    def log_tails(self, n: int = 12) -> str:
        """The last lines of each node's broker.log (the run folder goes at the end)."""
        out = []
        for log in sorted(Path(self.run_dir).glob("node-*/broker.log")):
            lines = log.read_text(errors="replace").splitlines()[-n:]
            out.append(f"{log.parent.name}:\n" + "\n".join(lines))
        return "\n".join(out)

    def kill9(self, node: int | None = None) -> list[int]:
        """SIGKILL node ``node`` (1-based), or every node of ours (None)."""
        pattern = "node-*.pid" if node is None else f"node-{node}.pid"
        pids = [int(p.read_text()) for p in Path(self.run_dir).glob(pattern)]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                # Died on its own after its last restart (a KRaft node under load that fell
                # behind its controller exits): the node is down, as the kill meant it to be.
                # Counted and its last lines kept; the row goes on and restarts it.
                self.died_on_own.append(f"node {node} (pid {pid}):\n{self._node_tail(node)}")
        return pids

    def _node_tail(self, node: int | None, n: int = 25) -> str:
        out = []
        for name in ("stdout.log", "broker.log"):
            for log in sorted(Path(self.run_dir).glob(f"node-{node or '*'}/{name}")):
                lines = log.read_text(errors="replace").splitlines()[-n:]
                out.append(f"{log.parent.name}/{name}:\n" + "\n".join(ln[:300] for ln in lines))
        return "\n".join(out)

    def down(self) -> None:
        subprocess.run([str(KAFKA_SH), "down"], env=self.env, capture_output=True)


@contextmanager
def own_broker(port: int, brokers: int = 1, **env: str) -> Iterator[OwnBroker]:
    """A broker (or ``brokers`` nodes) of our own on ``port`` with its own run folder;
    stopped (only it) on exit."""
    broker = OwnBroker(port, brokers=brokers, extra_env=env)
    try:
        broker.up()
        yield broker
    finally:
        broker.down()
        shutil.rmtree(broker.run_dir, ignore_errors=True)
