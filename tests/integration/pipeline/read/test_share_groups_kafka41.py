"""The share-group reader on Apache Kafka 4.1.1, where share groups are a preview that ships
off (``share.version`` not finalized) and DescribeShareGroupOffsets has no lag (v0 only).

Starts its own 4.1.1 broker (``KAFKA_VERSION=4.1.1 deploy/local/kafka.sh up``) on
its own ports of the checkout's block (``tests/support/ports.py``), stops it after.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from support.ports import own_port

from bench.support.share_consumer import KAFKA_SH, ShareConsumer
from pipeline.read.share_groups import ShareGroupsReader

pytestmark = pytest.mark.integration

PORT = own_port("share_kafka41")


@pytest.fixture(scope="module")
def kafka41(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    run_dir: Path = tmp_path_factory.mktemp("kafka41") / "run"
    env = {**os.environ, "KAFKA_VERSION": "4.1.1", "LAGPILOT_BROKER_PORT": str(PORT),
           "LAGPILOT_BROKER_RUN_DIR": str(run_dir)}  # fmt: skip
    up = subprocess.run([str(KAFKA_SH), "up"], env=env, capture_output=True, text=True,
                        timeout=300)  # fmt: skip
    if up.returncode != 0:
        pytest.fail(f"could not start Apache Kafka 4.1.1 on port {PORT}:\n{up.stderr[-3000:]}")
    try:
        yield up.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run([str(KAFKA_SH), "down"], env=env, capture_output=True, timeout=120)


def test_share_groups_off_read_as_none_and_say_so_once(
    kafka41: str, caplog: pytest.LogCaptureFixture
) -> None:
    reader = ShareGroupsReader({"bootstrap.servers": kafka41})
    with caplog.at_level(logging.WARNING, logger="pipeline.read.share_groups.reader"):
        assert reader.read() == []
        assert reader.read() == []
    assert reader.served is False
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "share.version is not finalized" in said[0], said
    reader.close()


def test_share_groups_switched_on_answer_offsets_without_lag(
    kafka41: str, unique_name: str
) -> None:
    """share.version=1 on 4.1.1: groups are read, DescribeShareGroupOffsets is v0, lag None."""
    feature = subprocess.run(
        [str(KAFKA_SH), "tool", "org.apache.kafka.tools.FeatureCommand", "--bootstrap-server",
         kafka41, "upgrade", "--feature", "share.version=1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert feature.returncode == 0, feature.stderr
    topic, group = unique_name, f"{unique_name}-share"
    admin = AdminClient({"bootstrap.servers": kafka41})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=20)
    producer = Producer({"bootstrap.servers": kafka41})
    reader = ShareGroupsReader({"bootstrap.servers": kafka41})
    with ShareConsumer(kafka41, topic, group) as consumer:
        deadline = time.monotonic() + 90
        # the group starts at the latest offset on its first fetch: keep producing until
        # the consumer has read something and both share-partitions are initialized
        while True:
            for partition in (0, 1):
                producer.produce(topic, value=b"x", partition=partition)
            producer.flush(10)
            found = [g for g in reader.read() if g.group == group]
            initialized = found and [p.start_offset >= 0 for p in found[0].partitions]
            if consumer.consumed and initialized == [True, True]:
                break
            assert time.monotonic() < deadline, f"not read within 90s: {found}"
            time.sleep(1)
    assert reader.served is True
    (state,) = found
    assert state.members == 1 and state.state == "Stable"
    assert [p.lag for p in state.partitions] == [None, None]
    reader.close()
