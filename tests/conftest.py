"""Session fixtures: one real Kafka-protocol broker for every integration test.

Where the broker comes from, in order:
1. ``KAFKA_BOOTSTRAP`` (any running Kafka or Redpanda cluster);
2. the local Apache Kafka that ``make broker-up`` started (the address ``kafka.sh`` recorded);
3. where a Docker engine answers, testcontainers' Redpanda container.
If none is reachable the integration tests *fail* with the commands that start one: a
missing broker must never turn into a green run of skipped tests.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.ports import own_port

from bench.support import broker as local_broker

ROOT = Path(__file__).resolve().parents[1]
KAFKA_SH = ROOT / "deploy" / "local" / "kafka.sh"
HOW_TO_START = (
    "no Kafka-protocol broker is reachable for the integration tests. Start one with "
    "`make broker-up` (local Apache Kafka; needs Java 17+ and Maven), or set "
    "KAFKA_BOOTSTRAP=host:port to a running Kafka/Redpanda, or run `make test`, which "
    "starts the local broker itself."
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/integration/" in str(item.path):
            item.add_marker(pytest.mark.integration)


def _reachable(bootstrap: str, timeout_s: float = 2.0) -> bool:
    host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    env = os.environ.get("KAFKA_BOOTSTRAP")
    if env:
        if not _reachable(env):
            pytest.fail(f"KAFKA_BOOTSTRAP={env} does not answer. {HOW_TO_START}")
        yield env
        return
    bootstrap = local_broker.recorded()  # the one record of the local broker's address
    if bootstrap and _reachable(bootstrap):
        yield bootstrap
        return
    if _docker_answers():
        from testcontainers.kafka import RedpandaContainer

        with RedpandaContainer() as container:
            yield container.get_bootstrap_server()
        return
    pytest.fail(HOW_TO_START)


@pytest.fixture(scope="session")
def cluster_bootstrap() -> Iterator[str]:
    """A 3-broker cluster: LAGPILOT_CLUSTER_BOOTSTRAP, or the local one started here.

    The local cluster uses its own ports (``support.ports``) and run folder, so it runs
    beside the session's single broker, and it is stopped at the end of the session.
    """
    env = os.environ.get("LAGPILOT_CLUSTER_BOOTSTRAP")
    if env:
        yield env
        return
    run_dir = ROOT / "deploy" / "local" / ".run-cluster"
    envs = {**os.environ, "LAGPILOT_BROKER_PORT": str(own_port("cluster")),
            "LAGPILOT_BROKER_RUN_DIR": str(run_dir)}  # fmt: skip
    proc = subprocess.run(
        [str(KAFKA_SH), "up", "--brokers", "3"], env=envs, capture_output=True, text=True
    )
    if proc.returncode != 0:
        pytest.fail(
            "could not start the local 3-broker cluster (needs Java 17+ and Maven), or set "
            f"LAGPILOT_CLUSTER_BOOTSTRAP to a 3-broker cluster:\n{proc.stderr}"
        )
    try:
        yield (run_dir / "bootstrap").read_text().strip()
    finally:
        subprocess.run([str(KAFKA_SH), "down"], env=envs, capture_output=True)


@pytest.fixture
def unique_name() -> str:
    """A fresh name for topics and groups, so tests never see each other's data."""
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """A real PostgreSQL server for the session (bench/support/postgres.py); each test that
    needs isolation uses its own table or database."""
    from bench.support.postgres import postgres_server

    with postgres_server() as dsn:
        yield dsn


#: DescribeShareGroupOffsets, whose v1 (Apache Kafka 4.2+, KIP-1226) answers the lag
_DESCRIBE_SHARE_GROUP_OFFSETS = 90


@pytest.fixture(scope="session")
def share_group_lag(kafka_bootstrap: str) -> None:
    """Skips where the broker answers no share-partition lag: share groups (KIP-932) with
    their lag (KIP-1226) are Apache Kafka 4.2+ (``make test``'s default 4.4.0 has them; 4.1
    has share groups only as a preview, off, and no lag; Redpanda none). The tests that use
    it compare lagpilot's share-group lag with Kafka's, which such a broker does not have:
    the feature is absent, not failing."""
    from pipeline.commands import broker_version

    av = broker_version.fetch(kafka_bootstrap, {}, timeout_s=10)
    versions = av.api_keys.get(_DESCRIBE_SHARE_GROUP_OFFSETS)
    share = av.finalized.get("share.version", (0, 0))[1]
    if versions is None or versions[1] < 1 or share < 1:
        pytest.skip(
            f"{kafka_bootstrap} answers no share-partition lag (DescribeShareGroupOffsets "
            f"{versions}, share.version {share}): the share-group tests need Apache Kafka "
            f"4.2+, as `make test` runs by default ({broker_version.describe(av)})"
        )
