"""deploy/local/kafka.sh fails clearly on broken setups, and never leaves a broker behind."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from support.ports import own_port

ROOT = Path(__file__).resolve().parents[3]
KAFKA_SH = ROOT / "deploy" / "local" / "kafka.sh"
PORT = own_port("kafka_sh")  # clear of the session broker and the other tests' brokers


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


def test_sasl_users_must_be_user_password_pairs(tmp_path: Path) -> None:
    """The SASL option (a broker with an authorizer, for the ACL tests) refuses what would
    break its JAAS line, before it starts anything."""
    for bad in ("admin", "admin:pw,alice", 'admin:p"w'):
        r = run(tmp_path, "up", LAGPILOT_BROKER_SASL_USERS=bad)
        assert r.returncode != 0, bad
        assert "LAGPILOT_BROKER_SASL_USERS" in r.stderr and "user:password" in r.stderr, r.stderr
    assert run(tmp_path, "status").returncode != 0  # nothing was started


def test_unknown_mode_is_refused(tmp_path: Path) -> None:
    r = run(tmp_path, "up", "--brokers", "2")
    assert r.returncode != 0 and "--brokers must be 1 or 3" in r.stderr


FRESH_PORT = own_port("kafka_sh_fresh")


def _fresh_copy(tmp_path: Path) -> Path:
    """deploy/local as a fresh clone has it: no cached jars, so `up` runs Maven first."""
    local = tmp_path / "clone" / "deploy" / "local"
    local.mkdir(parents=True)
    for name in ("kafka.sh", "pom.xml", "log4j2.properties", "ready.py"):
        shutil.copy2(KAFKA_SH.parent / name, local / name)
    assert not (local / ".cache").exists()
    return local / "kafka.sh"


@pytest.mark.parametrize("terminal", [False, True], ids=["no-terminal", "pseudo-terminal"])
def test_up_from_a_fresh_clone_prints_exactly_the_address(tmp_path: Path, terminal: bool) -> None:
    """`make demo` once took Maven's colour codes for part of the address (#23): `up` prints
    the address alone on stdout, with or without a terminal, jars fetched or not."""
    if shutil.which("mvn") is None:
        pytest.fail("Maven is needed to fetch the broker's jars (apt-get install maven)")
    script = _fresh_copy(tmp_path)
    env = {**os.environ, "LAGPILOT_BROKER_PORT": str(FRESH_PORT),
           "LAGPILOT_BROKER_RUN_DIR": str(tmp_path / "run"), "PYTHON": sys.executable}  # fmt: skip
    err = tmp_path / "stderr.log"
    try:
        if terminal:  # stdout is the pseudo-terminal script(1) gives it; stderr to a file
            cmd = f"{shlex.quote(str(script))} up 2>{shlex.quote(str(err))}"
            r = subprocess.run(["script", "-qec", cmd, "/dev/null"], env=env,
                               capture_output=True, text=True, timeout=300)  # fmt: skip
            out = r.stdout.replace("\r\n", "\n")
        else:
            r = subprocess.run([str(script), "up"], env=env, stdin=subprocess.DEVNULL,
                               capture_output=True, text=True, timeout=300)  # fmt: skip
            out = r.stdout
            err.write_text(r.stderr)
        assert r.returncode == 0, err.read_text()
        assert out == f"127.0.0.1:{FRESH_PORT}\n", f"stdout {out!r}; stderr:\n{err.read_text()}"
        default = re.search(r"(?m)^DEFAULT_KAFKA_VERSION=(\S+)$", KAFKA_SH.read_text())
        release = os.environ.get("KAFKA_VERSION") or (default and default.group(1))
        # the progress went to stderr, naming the release fetched and where its jars went
        assert f"fetching the broker's jars (Apache Kafka {release})" in err.read_text()
        assert (script.parent / ".cache" / f"kafka-{release}" / "libs").is_dir()
        status = subprocess.run([str(script), "status"], env=env, capture_output=True, text=True)
        assert status.stdout == out
        version = subprocess.run([str(script), "version"], env=env, capture_output=True, text=True)
        assert version.stdout == f"{release}\n"
    finally:
        subprocess.run([str(script), "down"], env=env, capture_output=True, timeout=60)
