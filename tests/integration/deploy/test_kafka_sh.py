"""deploy/local/kafka.sh fails clearly on broken setups, and never leaves a broker behind."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
KAFKA_SH = ROOT / "deploy" / "local" / "kafka.sh"
PORT = 21592  # clear of the session broker, the 3-broker cluster and the deploy tests


def run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "LAGPILOT_BROKER_PORT": str(PORT),
            "LAGPILOT_BROKER_RUN_DIR": str(tmp_path / "run"), **env}  # fmt: skip
    return subprocess.run([str(KAFKA_SH), *args], env=full, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def test_port_in_use_names_the_port_and_the_fix(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", PORT))
        s.listen()
        r = run(tmp_path, "up")
    assert r.returncode != 0
    assert f"port 127.0.0.1:{PORT} is already in use" in r.stderr
    assert "LAGPILOT_BROKER_PORT" in r.stderr


def test_no_java_says_what_to_install(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"  # a PATH with everything kafka.sh needs but java
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "cat", "awk", "tr", "grep", "sleep", "rm", "mkdir", "ls"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    r = run(tmp_path, "up", PATH=str(bin_dir))
    assert r.returncode != 0
    assert "java not found" in r.stderr and "Java 17+" in r.stderr


def test_a_broker_that_is_not_ready_in_time_is_stopped_and_its_log_shown(tmp_path: Path) -> None:
    r = run(tmp_path, "up", LAGPILOT_BROKER_READY_TIMEOUT_S="1")
    assert r.returncode != 0
    assert "within 1s" in r.stderr or "never became ready" in r.stderr
    assert "last lines of" in r.stderr
    # nothing left running: the port is free again and status says so
    assert run(tmp_path, "status").returncode != 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", PORT))


def test_unknown_mode_is_refused(tmp_path: Path) -> None:
    r = run(tmp_path, "up", "--brokers", "2")
    assert r.returncode != 0 and "--brokers must be 1 or 3" in r.stderr
