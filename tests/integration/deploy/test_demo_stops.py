"""`make demo` leaves nothing running when its terminal closes or it is told to stop (#23).

The demo runs as a user starts it, `make demo` in a terminal (script(1) gives it one), with
no broker running: it starts its own local broker on ports of this test. Once the swarm and
lagpilot run, the terminal is hung up (SIGHUP to the job, as a login shell does when its
window closes) or `make` gets a SIGTERM. Every process the demo started (the broker, the
pipeline and its source, the actuator, the swarm) must be gone shortly after: they all
inherit this test's unique run folder in their environment, which is how they are found.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from support.ports import own_port

ROOT = Path(__file__).resolve().parents[3]
KAFKA_SH = ROOT / "deploy" / "local" / "kafka.sh"
PORT = own_port("demo")  # clear of the session broker and the other tests' brokers


def _ours(marker: str) -> list[int]:
    """PIDs of live processes whose environment carries ``marker``."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if marker.encode() in (d / "environ").read_bytes():
                stat = (d / "stat").read_text()
                if stat[stat.rindex(")") + 2] != "Z":  # zombies have ended
                    pids.append(int(d.name))
        except OSError:
            continue
    return pids


def _wait(pred: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.5)


@pytest.mark.parametrize("how", ["terminal-closed", "sigterm-to-make"])
def test_demo_stops_everything_it_started(tmp_path: Path, how: str) -> None:
    run_dir = tmp_path / "broker-run"
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP"}
    env |= {"LAGPILOT_BROKER_PORT": str(PORT), "LAGPILOT_BROKER_RUN_DIR": str(run_dir)}
    log = tmp_path / "demo.log"
    with open(log, "wb") as out:
        term = subprocess.Popen(
            ["script", "-qefc", "make --no-print-directory demo", "/dev/null"],
            cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        _wait(lambda: (run_dir / "bootstrap").exists(), 240, "the demo's broker")
        bootstrap = (run_dir / "bootstrap").read_text().strip()
        admin = AdminClient({"bootstrap.servers": bootstrap})

        def swarm_running() -> bool:
            try:
                names = admin.list_topics(timeout=5).topics
            except KafkaException:  # a loaded host's fresh broker: not answering yet
                return False
            return any(t.startswith("agents.perception.on-") for t in names)

        _wait(swarm_running, 120, "the demo's swarm topic")
        time.sleep(3)  # the pipeline, the actuator and the workers are up
        assert term.poll() is None, log.read_text(errors="replace")
        started = _ours(str(run_dir))
        assert len(started) >= 4, started  # make, the demo, the broker, pipeline, actuator...
        (make,) = [p for p in started if Path(f"/proc/{p}/comm").read_text().strip() == "make"]
        if how == "terminal-closed":
            # a closing terminal: its shell sends SIGHUP to the job's process group
            os.killpg(os.getpgid(make), signal.SIGHUP)
            term.kill()
        else:
            os.kill(make, signal.SIGTERM)
        _wait(lambda: not _ours(str(run_dir)), 45, "every process the demo started to end")
        status = subprocess.run([str(KAFKA_SH), "status"], env=env, capture_output=True)
        assert status.returncode != 0, "the demo's broker is still recorded as running"
        if how == "sigterm-to-make":
            text = log.read_text(errors="replace")
            assert "interrupted (SIGTERM)" in text and "stopped the local broker" in text, text
    finally:
        if term.poll() is None:
            term.kill()
        for pid in _ours(str(run_dir)):
            os.kill(pid, signal.SIGKILL)
        subprocess.run([str(KAFKA_SH), "down"], env=env, capture_output=True)
