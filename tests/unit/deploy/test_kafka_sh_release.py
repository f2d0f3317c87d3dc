"""deploy/local/kafka.sh's release choice: ``KAFKA_VERSION`` is checked before anything runs,
``version`` prints the release the running broker runs, ``up`` refuses to hand a test run
asking for one release a broker of another, and ``tool`` without a class prints its usage.
None of this needs Java: each case stops before the broker would start."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
KAFKA_SH = ROOT / "deploy" / "local" / "kafka.sh"


def kafka_sh(run_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "KAFKA_VERSION"}
    full |= {"LAGPILOT_BROKER_PORT": "27092", "LAGPILOT_BROKER_RUN_DIR": str(run_dir), **env}
    return subprocess.run([str(KAFKA_SH), *args], env=full, capture_output=True, text=True,
                          timeout=30)  # fmt: skip


@pytest.mark.parametrize("bad", ["4.4", "latest", "4.4.0-rc1", "4.4.0 ", "../4.4.0"])
def test_a_bad_kafka_version_is_refused_naming_the_variable(tmp_path: Path, bad: str) -> None:
    for command in ("up", "config", "jars"):
        r = kafka_sh(tmp_path / "run", command, KAFKA_VERSION=bad)
        assert r.returncode == 1 and r.stdout == "", (command, r.stderr)
        assert f"KAFKA_VERSION='{bad}' is not a release number" in r.stderr
        assert "e.g. KAFKA_VERSION=4.1.1" in r.stderr and "unset: 4.4.0" in r.stderr
    assert not (tmp_path / "run").exists()  # refused before it made anything


def test_tool_without_a_class_prints_its_usage(tmp_path: Path) -> None:
    r = kafka_sh(tmp_path / "run", "tool")
    assert r.returncode == 1 and r.stdout == ""
    assert "usage:" in r.stderr and "tool CLASS [ARGS...]" in r.stderr
    assert "org.apache.kafka.tools." in r.stderr  # an example class to start from


def test_an_unknown_command_lists_version_among_the_commands(tmp_path: Path) -> None:
    r = kafka_sh(tmp_path / "run", "versions")
    assert r.returncode == 2 and "| version |" in r.stderr and "tool CLASS" in r.stderr


def test_version_without_a_running_broker_says_so(tmp_path: Path) -> None:
    r = kafka_sh(tmp_path / "run", "version")
    assert r.returncode == 1 and r.stdout == "" and "no local broker running" in r.stderr


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Path]:
    """A run folder as ``up`` leaves it for Apache Kafka 4.4.0, with a live process standing
    in for node 1: kafka.sh counts a recorded PID as its broker when that process's command
    line names the run folder's node, which this one does (it only sleeps)."""
    run = tmp_path / "run"
    (run / "node-1").mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                             str(run / "node-1" / "server.properties")])  # fmt: skip
    try:
        (run / "node-1.pid").write_text(f"{proc.pid}\n")
        (run / "bootstrap").write_text("127.0.0.1:27092\n")
        (run / "brokers").write_text("1\n")
        (run / "version").write_text("4.4.0\n")
        yield run
    finally:
        proc.kill()
        proc.wait()


def test_version_prints_the_release_up_recorded(running: Path) -> None:
    r = kafka_sh(running, "version", KAFKA_VERSION="4.1.1")  # what runs, not what is asked
    assert r.returncode == 0 and r.stdout == "4.4.0\n", r.stderr


def test_up_refuses_a_running_broker_of_another_release_than_asked(running: Path) -> None:
    r = kafka_sh(running, "up", KAFKA_VERSION="4.1.1")
    assert r.returncode == 1 and r.stdout == ""
    assert "runs Apache Kafka 4.4.0, not KAFKA_VERSION=4.1.1" in r.stderr
    assert "down" in r.stderr and "unset KAFKA_VERSION" in r.stderr


@pytest.mark.parametrize("asked", [None, "4.4.0"], ids=["unset", "the-same"])
def test_up_hands_over_a_running_broker_of_the_asked_release(
    running: Path, asked: str | None
) -> None:
    r = kafka_sh(running, "up", **({"KAFKA_VERSION": asked} if asked else {}))
    assert r.returncode == 0 and r.stdout == "127.0.0.1:27092\n", r.stderr
    assert "already running at 127.0.0.1:27092 (Apache Kafka 4.4.0)" in r.stderr
