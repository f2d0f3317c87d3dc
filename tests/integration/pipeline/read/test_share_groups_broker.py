"""The share-group reader on a real broker with a real share consumer (Kafka's Java
ConsoleShareConsumer), checked against Kafka's own ShareGroupCommand.

Needs a broker that serves share groups with KIP-1226's lag (Apache Kafka 4.2+, as
``deploy/local/kafka.sh up`` starts by default)."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.support.share_consumer import KAFKA_SH, ShareConsumer
from pipeline.read.share_groups import ShareGroupsReader, ShareGroupState
from tests.support import kafka_tools

pytestmark = pytest.mark.integration

PARTITIONS = 3
T = TypeVar("T")


@pytest.fixture
def reader(kafka_bootstrap: str, share_group_lag: None) -> Iterator[ShareGroupsReader]:
    r = ShareGroupsReader({"bootstrap.servers": kafka_bootstrap})
    r.read()
    if not r.served:
        pytest.fail(f"{kafka_bootstrap} serves no share groups: these tests need Apache Kafka "
                    "4.2+ with share groups on (deploy/local/kafka.sh up)")  # fmt: skip
    yield r
    r.close()


def _until(what: str, probe: Callable[[], T | None], timeout_s: float = 60.0) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        got = probe()
        if got is not None:
            return got
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s}s"
        time.sleep(0.25)


def _group(reader: ShareGroupsReader, group: str) -> ShareGroupState | None:
    return next((g for g in reader.read() if g.group == group), None)


def _with(reader: ShareGroupsReader, group: str, members: int) -> ShareGroupState | None:
    found = _group(reader, group)
    return found if found is not None and found.members == members else None


def _earliest(bootstrap: str, group: str) -> None:
    """share.auto.offset.reset=earliest for the group, so records produced before the
    consumer's first fetch are read too (the default, latest, would skip them)."""
    proc = subprocess.run(
        [str(KAFKA_SH), "tool", "org.apache.kafka.tools.ConfigCommand", "--bootstrap-server",
         bootstrap, "--alter", "--entity-type", "groups", "--entity-name", group,
         "--add-config", "share.auto.offset.reset=earliest"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def _produce(producer: Producer, topic: str, per_partition: dict[int, int]) -> None:
    for partition, n in per_partition.items():
        for i in range(n):
            producer.produce(topic, value=f"{partition}-{i}".encode(), partition=partition)
    assert producer.flush(30) == 0


def _starts_at_least(group: ShareGroupState | None, n: int) -> ShareGroupState | None:
    if group is None or len(group.partitions) < PARTITIONS:
        return None
    return group if all(p.start_offset >= n for p in group.partitions) else None


def test_a_share_group_read_as_its_consumer_moves_agrees_with_kafka_tools(
    kafka_bootstrap: str, reader: ShareGroupsReader, unique_name: str
) -> None:
    topic, group = unique_name, f"{unique_name}-share"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=20)
    _earliest(kafka_bootstrap, group)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})

    with ShareConsumer(kafka_bootstrap, topic, group) as consumer:
        # listed with its member once the consumer joins
        joined = _until("the group listed with its member", lambda: _with(reader, group, 1))
        assert joined.state == "Stable"

        # the share-partition start offset advances as the consumer acknowledges: the
        # broker keeps the last acknowledged batch in flight, so it moves past a batch
        # once the next one is delivered
        starts = []
        for n in (1, 2, 3):
            _produce(producer, topic, {p: 10 for p in range(PARTITIONS)})
            consumer.wait_consumed(30 * n)
            want = 10 * (n - 1)
            seen = _until(f"start offsets at {want}+",
                          lambda w=want: _starts_at_least(_group(reader, group), w))  # fmt: skip
            starts.append([p.start_offset for p in seen.partitions])
        assert all(a < b for a, b in zip(starts[0], starts[-1], strict=True)), starts
        assert all(p.lag == 0 for p in seen.partitions)

        # stalled consumer, producer done: the reader's lag is the tool's LAG, exactly
        consumer.stall()
        _produce(producer, topic, {0: 5, 1: 2})
        ours = _until("the lag of the records left", lambda: _settled_lag(reader, group, 7))
        theirs = kafka_tools.describe_share_groups(kafka_bootstrap, group).lags(group)
        assert ours == theirs == {(topic, 0): 5, (topic, 1): 2, (topic, 2): 0}
        assert _lags(reader, group) == theirs  # nothing moved while the tool ran

        consumer.resume()
        consumer.wait_consumed(97)
    # the consumer left: the group is empty, then deleted, then gone from the reader
    _until("the group empty", lambda: _with(reader, group, 0))
    kafka_tools.delete_share_group(kafka_bootstrap, group)
    _until("the deleted group gone", lambda: _group(reader, group) is None or None)


def _lags(reader: ShareGroupsReader, group: str) -> dict[tuple[str, int], int | None]:
    found = _group(reader, group)
    return {} if found is None else {(p.topic, p.partition): p.lag for p in found.partitions}


def _settled_lag(
    reader: ShareGroupsReader, group: str, total: int
) -> dict[tuple[str, int], int | None] | None:
    lags = _lags(reader, group)
    return lags if sum(v or 0 for v in lags.values()) == total else None


def test_reads_are_cheap_on_open_connections(
    kafka_bootstrap: str, reader: ShareGroupsReader
) -> None:
    """Connections stay open between calls: twenty reads cost far less than one connect
    each would, and none of them raises."""
    started = time.perf_counter()
    for _ in range(20):
        reader.read()
    per_read_s = (time.perf_counter() - started) / 20
    assert per_read_s < 0.25, f"{per_read_s:.3f} s a read: too slow to poll every 0.25 s"


def test_a_dropped_socket_is_reopened(kafka_bootstrap: str, reader: ShareGroupsReader) -> None:
    """The broker's side of every open connection goes away (here: this side's sockets are
    shut down under the reader, as a broker restart or an idle-connection reaper would);
    the next read reconnects and answers."""
    before = reader.read()
    for conn in reader._conns.values():  # the test reaches in: there is no public socket
        assert conn._sock is not None
        conn._sock.shutdown(socket.SHUT_RDWR)
    assert [g.group for g in reader.read()] == [g.group for g in before]
