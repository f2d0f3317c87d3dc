"""The scale benchmark's replicas: ``python -m pipeline`` as a process with a run's own
topic names, its Prometheus-like full scrapes, and the wait until it models."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient

from bench.support.scale_load import OFFSETS_PARTITIONS
from bench.support.scale_probes import (
    Scrape,
    process_tree,
    scrape,
)
from pipeline.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


SAMPLE_INTERVAL_MS = 250
#: the per-replica bounds on healthy groups' periodic events, as the pipeline defaults them
PERIODIC_EVENT_BOUNDS = {
    "LAGPILOT_MAX_OK_SUMMARIES_PER_S": Settings.max_ok_summaries_per_s,
    "LAGPILOT_MAX_SNAPSHOTS_PER_S": Settings.max_snapshots_per_s,
}

#: Runs the real pipeline entry point with this run's internal topic names; with
#: ``SCALE_PROFILE=<path>`` in its environment, under cProfile (the main thread: the model)
#: until SIGUSR2 writes the profile (SIGUSR1 is the pipeline's own: a dump of its stacks).
_RUNNER = """
import cProfile, os, signal, sys
from schemas import topics
topics.WATERMARKS, topics.LAG = sys.argv[1], sys.argv[2]
from pipeline.__main__ import main
out = os.environ.get("SCALE_PROFILE")
prof = cProfile.Profile() if out else None
def dump(*_):
    prof.disable()
    prof.dump_stats(out)
if prof:
    signal.signal(signal.SIGUSR2, dump)  # the bench sends it before it stops the pipeline
    prof.enable()
sys.exit(main(["--log-level", "WARNING"]))
"""


CGROUP_CPU = Path("/sys/fs/cgroup/cpu")


class CpuCap:
    """A replica's process tree held to ``cores`` of CPU (a cgroup of the ``cpu``
    controller: ``cpu.cfs_quota_us`` per ``cpu.cfs_period_us``). On a host whose cores
    also run the broker and the load generator, two replicas' capacity measured against
    one's says how the pipeline scales only if neither set of replicas can take the host:
    each gets the same share. Children started later (the Quix source, the sampler, the
    render process) inherit it."""

    def __init__(self, name: str, cores: float) -> None:
        if not (CGROUP_CPU / "cpu.cfs_quota_us").exists() or not os.access(CGROUP_CPU, os.W_OK):
            raise SystemExit(
                f"--cpu-per-replica needs a writable cgroup v1 cpu controller at {CGROUP_CPU} "
                "(run as root on a host with it mounted), or leave the option out"
            )
        self.path = CGROUP_CPU / f"lagpilot-{name}"
        self.path.mkdir(exist_ok=True)
        period = 100_000
        (self.path / "cpu.cfs_period_us").write_text(str(period))
        (self.path / "cpu.cfs_quota_us").write_text(str(int(cores * period)))

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def remove(self) -> None:
        for _ in range(50):  # the tree's last processes may still be exiting
            with contextlib.suppress(OSError):
                self.path.rmdir()
                return
            time.sleep(0.1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- the run


class Pipeline:
    """One ``python -m pipeline`` replica with this run's topic names."""

    def __init__(
        self,
        bootstrap: str,
        run: str,
        name: str,
        offsets_topic: str,
        i: int,
        profile: str = "",
        reset: str = "earliest",
        cpu_cores: float | None = None,
        replicas: int = 1,
    ) -> None:
        """``name`` names its consumer group and internal topics (not ``lagpilot*``: the
        commits it reads are not its own); ``reset`` where a new group starts;
        ``cpu_cores``: the tree held to that much CPU (``CpuCap``); ``replicas``: how many
        run together (the periodic events of healthy groups are bounded per replica:
        each of N gets 1/N of the default bounds unless the environment sets them, so N
        replicas publish what one would, and a phase of two is held to the same output
        as a phase of one)."""
        self.state = tempfile.mkdtemp(prefix=f"scale-{i}-")
        self.port = _free_port()
        self.log = Path(self.state) / "pipeline.log"
        self.profile, self.i = profile, i
        env = {
            **os.environ,
            "KAFKA_BOOTSTRAP": bootstrap,
            "LAGPILOT_OFFSETS_TOPIC": offsets_topic,
            "LAGPILOT_CONSUMER_GROUP": name,
            "LAGPILOT_INSTANCE_ID": f"{name}-r{i}",
            "LAGPILOT_STATE_DIR": self.state,
            "LAGPILOT_INCLUDE": f"{run}-t.*",
            "LAGPILOT_METRICS_PORT": str(self.port),
            "LAGPILOT_RUN_POLICY": "false",
            "LAGPILOT_SAMPLE_INTERVAL_MS": str(SAMPLE_INTERVAL_MS),
            "LAGPILOT_AUTO_OFFSET_RESET": reset,
        }
        for name_, default in PERIODIC_EVENT_BOUNDS.items():
            env.setdefault(name_, str(default / replicas))
        if profile:
            env["SCALE_PROFILE"] = f"{profile}.{i}.prof"
        self.cap = CpuCap(f"{name}-r{i}", cpu_cores) if cpu_cores else None
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _RUNNER, f"{name}.watermarks", f"{name}.lag"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        if self.cap is not None:  # before it starts its children (it is still importing)
            self.cap.add(self.proc.pid)

    def scrape(self) -> Scrape:
        return scrape(self.port)

    def start_prometheus(self, interval_s: float, grid_t0: float | None = None) -> None:
        """Scrape the whole /metrics every ``interval_s`` from now on, as Prometheus does:
        on a fixed grid (``grid_t0 + k * interval_s``, monotonic), whatever a scrape takes,
        so a measured window can hold a known number of them (``scrape_phase``). Every
        lag family is rendered: the model pays for it while the step is measured."""
        self._prom_stop = threading.Event()
        self.prom_scrape_s: list[tuple[float, float]] = []  # (when, seconds it took)
        self.prom_interval_s = interval_s
        self.prom_grid_t0 = time.monotonic() if grid_t0 is None else grid_t0

        def loop() -> None:
            k = 1
            while True:
                due = self.prom_grid_t0 + k * interval_s
                if self._prom_stop.wait(max(0.0, due - time.monotonic())):
                    return
                t0 = time.monotonic()
                with contextlib.suppress(OSError):
                    scrape(self.port, full=True)
                    self.prom_scrape_s.append((t0, time.monotonic() - t0))
                # the next point of the grid still ahead (a scrape longer than the
                # interval skips one, as Prometheus does)
                k = max(k + 1, int((time.monotonic() - self.prom_grid_t0) // interval_s) + 1)

        threading.Thread(target=loop, daemon=True).start()

    def stop(self) -> None:
        if getattr(self, "_prom_stop", None) is not None:
            self._prom_stop.set()
        tree = process_tree(self.proc.pid)
        if self.profile:
            out = Path(f"{self.profile}.{self.i}.prof")
            out.unlink(missing_ok=True)
            self.proc.send_signal(signal.SIGUSR2)
            deadline = time.monotonic() + 60
            while not out.exists() and time.monotonic() < deadline:
                time.sleep(0.5)
            time.sleep(2)  # written through
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            for pid in tree:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, 9)
            self.proc.wait()
        if self.cap is not None:
            self.cap.remove()
        shutil.rmtree(self.state, ignore_errors=True)

    def tail(self) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])
        return ""


def sources_assigned(bootstrap: str, group: str, members: int, offsets_topic: str) -> bool:
    """The commits sources' consumer group is stable, ``members`` strong, and holds every
    partition of the offsets topic."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        d = admin.describe_consumer_groups([group])[group].result(timeout=5)
    except Exception:  # not created yet, or the coordinator is moving: ask again
        return False
    parts = {
        tp.partition
        for m in d.members
        for tp in m.assignment.topic_partitions
        if tp.topic == offsets_topic
    }
    return len(d.members) == members and len(parts) == OFFSETS_PARTITIONS


def wait_modelling(
    replicas: list[Pipeline], timeout_s: float, bootstrap: str, name: str, offsets_topic: str
) -> None:
    """Until every replica's model has taken in watermark samples for 3 s in a row and the
    commits sources hold every offsets partition.

    Nothing is committed yet: every commit the generator writes afterwards is then read
    by a running source (a fresh replica set reads from the end), so none is coalesced
    away in a start-up backlog and the count of commits modelled can be held against the
    count produced."""
    deadline, steady_since = time.monotonic() + timeout_s, None
    last = [0.0] * len(replicas)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        try:
            now = [r.scrape().watermarks for r in replicas]
        except OSError:
            now = [0.0] * len(replicas)
        if all(n > prev > 0 for n, prev in zip(now, last, strict=True)):
            steady_since = steady_since or time.monotonic()
            if time.monotonic() - steady_since >= 3 and sources_assigned(
                bootstrap, f"{name}.offsets", len(replicas), offsets_topic
            ):
                time.sleep(1)  # positions are resolved just after the assignment
                return
        else:
            steady_since = None
        last = now
        for r in replicas:
            if r.proc.poll() is not None:
                raise SystemExit(f"pipeline exited ({r.proc.returncode}):\n{r.tail()}")
    raise SystemExit(f"pipeline not modelling after {timeout_s}s:\n{replicas[0].tail()}")
