"""The reader's rules without a broker: a fake connection answers each request with bytes
built here from the protocol facts, and the tests script coordinators that move, sockets
that drop, ACLs that deny and brokers that serve no share groups."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pytest

from pipeline.coordinator.api_versions import ApiVersions, pick_version
from pipeline.coordinator.connection import BrokerUnreachable
from pipeline.coordinator.protocol import Writer
from pipeline.coordinator.wire import Reader
from pipeline.read.share_groups import (
    ShareGroupsDenied,
    ShareGroupsReader,
    ShareGroupState,
    ShareGroupsUnavailable,
    SharePartitionOffsets,
)

KAFKA_44 = ApiVersions(
    0,
    {3: (0, 13), 10: (0, 6), 16: (0, 5), 77: (1, 1), 90: (0, 1)},
    finalized={"metadata.version": (33, 33), "share.version": (2, 2)},
)
NOT_COORDINATOR, LOADING, GROUP_DENIED, TOPIC_DENIED, NOT_FOUND = 16, 14, 30, 29, 69


@dataclass
class Group:
    state: str = "Stable"
    members: int = 1
    partitions: list[tuple[str, int, int, int]] = field(default_factory=list)  # t, p, start, lag
    describe_errors: list[int] = field(default_factory=list)  # popped per describe
    partition_error: int = 0
    assigned: list[tuple[str, int]] = field(default_factory=list)  # every member's
    hidden: set[str] = field(default_factory=set)  # left out unless asked for by name


@dataclass
class Cluster:
    groups: dict[str, Group]
    versions: ApiVersions = KAFKA_44
    drops: int = 0  # requests that find the socket closed
    requests: list[tuple[str, int]] = field(default_factory=list)  # (address, api)
    opened: int = 0


def _groups_asked(body: bytes, api: int) -> list[str]:
    r = Reader(body)
    if api == 77:
        return list(r.string_array("ids", compact=True))
    if api == 10:
        r.int8("key_type")
        return list(r.string_array("keys", compact=True))
    out = []
    for _ in range(r.array_len("groups", compact=True)):
        out.append(r.string("group", compact=True))
        for _ in range(r.array_len("topics", compact=True)):
            out.append("topic:" + r.string("topic", compact=True))
            r.int32_array("partitions", compact=True)
            r.skip_tagged_fields("topic")
        r.skip_tagged_fields("group")
    return out


def _answer(cluster: Cluster, api: int, version: int, body: bytes) -> bytes:
    w = Writer().int32(0)  # throttle_time_ms
    if api == 3:  # Metadata: one broker, nothing after it that the reader reads
        w.array_len(1, compact=True).int32(1).string("b1", compact=True).int32(9092)
        return w.string(None, compact=True).no_tags().build()
    if api == 16:  # ListGroups
        w.int16(0).array_len(len(cluster.groups), compact=True)
        for name, g in cluster.groups.items():
            w.string(name, compact=True).string("", compact=True).string(g.state, compact=True)
            w.string("share", compact=True).no_tags()
        return w.no_tags().build()
    asked = _groups_asked(body, api)
    if api == 10:  # FindCoordinator: all on b1:9092
        w.array_len(len(asked), compact=True)
        for key in asked:
            w.string(key, compact=True).int32(1).string("b1", compact=True).int32(9092)
            w.int16(0).string(None, compact=True).no_tags()
        return w.no_tags().build()
    if api == 77:  # ShareGroupDescribe
        w.array_len(len(asked), compact=True)
        for name in asked:
            g = cluster.groups.get(name)
            error = (
                NOT_FOUND if g is None else (g.describe_errors.pop(0) if g.describe_errors else 0)
            )
            w.int16(error).string(None, compact=True).string(name, compact=True)
            w.string("Dead" if g is None else g.state, compact=True).int32(1).int32(1)
            w.string("simple", compact=True).array_len(0 if g is None else g.members, compact=True)
            for i in range(0 if g is None else g.members):
                w.string(f"m{i}", compact=True).string(None, compact=True).int32(1)
                w.string("c", compact=True).string("/h", compact=True).strings([], compact=True)
                w.array_len(len(g.assigned), compact=True)
                for topic, partition in g.assigned:
                    w.raw(bytes(16)).string(topic, compact=True).int32s([partition], compact=True)
                    w.no_tags()
                w.no_tags().no_tags()
            w.int32(-(1 << 31)).no_tags()
        return w.no_tags().build()
    assert api == 90
    named = [a.removeprefix("topic:") for a in asked if a.startswith("topic:")]
    asked = [a for a in asked if not a.startswith("topic:")]
    w.array_len(len(asked), compact=True)
    for name in asked:
        g = cluster.groups[name]
        topics = sorted({t for t, *_ in g.partitions if t not in g.hidden or t in named})
        w.string(name, compact=True).array_len(len(topics), compact=True)
        for topic in topics:
            w.string(topic, compact=True).raw(bytes(16))
            rows = [p for p in g.partitions if p[0] == topic]
            w.array_len(len(rows), compact=True)
            for _, p, start, lag in rows:
                w.int32(p).int64(start).int32(0)
                if version >= 1:
                    w.int64(lag)
                error = TOPIC_DENIED if topic in g.hidden else g.partition_error
                w.int16(error).string(None, compact=True).no_tags()
            w.no_tags()
        w.int16(0).string(None, compact=True).no_tags()
    return w.no_tags().build()


class FakeConnection:
    def __init__(self, cluster: Cluster, host: str, port: int) -> None:
        self.cluster, self.host, self.port = cluster, host, port
        self.is_open = False
        self.versions = cluster.versions

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def open(self) -> None:
        self.cluster.opened += 1
        self.is_open = True

    def close(self) -> None:
        self.is_open = False

    def version(self, api_key: int, lowest: int, highest: int) -> int | None:
        return pick_version(self.versions, api_key, lowest, highest)

    def requests(self, api_key: int, version: int, bodies: list[bytes]) -> list[bytes]:
        if self.cluster.drops:
            self.cluster.drops -= 1
            self.is_open = False
            raise BrokerUnreachable(f"{self.address}: the broker closed the connection")
        self.cluster.requests.append((self.address, api_key))
        return [_answer(self.cluster, api_key, version, b) for b in bodies]


def reader_for(cluster: Cluster, **config: str) -> ShareGroupsReader:
    return ShareGroupsReader(
        {"bootstrap.servers": "boot:9092", **config},
        connect=lambda host, port: FakeConnection(cluster, host, port),  # type: ignore[arg-type,return-value]
    )


def test_every_share_group_is_read_with_its_members_and_offsets() -> None:
    cluster = Cluster({"b": Group(members=2, partitions=[("t", 1, 5, 2), ("t", 0, 7, 0)]),
                       "a": Group(state="Empty", members=0)})  # fmt: skip
    assert reader_for(cluster).read() == [
        ShareGroupState("a", "Empty", 0, ()),
        ShareGroupState("b", "Stable", 2, (
            SharePartitionOffsets("b", "t", 0, 7, 0, 0),
            SharePartitionOffsets("b", "t", 1, 5, 0, 2),
        )),
    ]  # fmt: skip


def test_a_second_read_reuses_connections_brokers_and_coordinators() -> None:
    cluster = Cluster({"a": Group(), "b": Group()})
    reader = reader_for(cluster)
    reader.read()
    cluster.requests.clear()
    reader.read()
    # ListGroups, one ShareGroupDescribe for both, one pipelined offsets call; no
    # Metadata, no FindCoordinator, no new socket
    assert [api for _, api in cluster.requests] == [16, 77, 90]
    assert cluster.opened == 2  # the bootstrap address and the broker it advertises


def test_lag_is_none_where_the_broker_answers_v0() -> None:
    v0 = ApiVersions(0, {**KAFKA_44.api_keys, 90: (0, 0)}, finalized=KAFKA_44.finalized)
    cluster = Cluster({"a": Group(partitions=[("t", 0, 3, 99)])}, versions=v0)
    (state,) = reader_for(cluster).read()
    assert state.partitions == (SharePartitionOffsets("a", "t", 0, 3, 0, None),)


@pytest.mark.parametrize(
    ("api_keys", "finalized"),
    [({3: (0, 13), 10: (0, 4), 16: (0, 5)}, {}),  # Redpanda / Kafka < 4.1: no share API
     ({**KAFKA_44.api_keys}, {"metadata.version": (27, 27)})],  # 4.1: share.version off
)  # fmt: skip
def test_a_broker_without_share_groups_reads_as_none_and_says_so_once(
    api_keys: dict[int, tuple[int, int]],
    finalized: dict[str, tuple[int, int]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = Cluster({"a": Group()}, versions=ApiVersions(0, api_keys, finalized=finalized))
    reader = reader_for(cluster)
    assert reader.served is None
    with caplog.at_level(logging.WARNING):
        assert reader.read() == [] and reader.read() == []
    assert reader.served is False
    assert len(caplog.records) == 1 and "not served" in caplog.records[0].getMessage()


def test_a_moved_coordinator_is_found_again_within_the_call() -> None:
    cluster = Cluster({"a": Group(describe_errors=[NOT_COORDINATOR])})
    assert [g.group for g in reader_for(cluster).read()] == ["a"]
    assert [api for _, api in cluster.requests].count(10) == 2  # FindCoordinator again


def test_a_coordinator_still_loading_after_a_re_find_is_retriable() -> None:
    cluster = Cluster({"a": Group(describe_errors=[LOADING, LOADING])})
    with pytest.raises(ShareGroupsUnavailable, match="COORDINATOR_LOAD_IN_PROGRESS") as exc:
        reader_for(cluster).read()
    assert exc.value.retriable


def test_a_dropped_socket_is_reopened_once() -> None:
    cluster = Cluster({"a": Group()})
    reader = reader_for(cluster)
    reader.read()
    cluster.drops = 1
    assert [g.group for g in reader.read()] == ["a"]
    cluster.drops = 2
    with pytest.raises(ShareGroupsUnavailable, match="after one reconnect") as exc:
        reader.read()
    assert exc.value.retriable


def test_a_group_gone_between_listing_and_describe_is_left_out() -> None:
    cluster = Cluster({"a": Group(describe_errors=[NOT_FOUND]), "b": Group(state="Dead")})
    assert reader_for(cluster).read() == []


def test_group_denied_names_the_acl_to_grant() -> None:
    cluster = Cluster({"a": Group(describe_errors=[GROUP_DENIED])})
    reader = reader_for(cluster, **{"security.protocol": "SASL_PLAINTEXT",
                                    "sasl.mechanism": "PLAIN", "sasl.username": "lp"})  # fmt: skip
    with pytest.raises(ShareGroupsDenied, match="DESCRIBE on Group:a") as exc:
        reader.read()
    assert not exc.value.retriable and "User:lp" in str(exc.value)
    assert exc.value.code == "GROUP_AUTHORIZATION_FAILED"


def test_topic_denied_names_the_topic() -> None:
    cluster = Cluster({"a": Group(partitions=[("secret", 0, 1, 1)], partition_error=TOPIC_DENIED)})
    with pytest.raises(ShareGroupsDenied, match="DESCRIBE on Topic:secret") as exc:
        reader_for(cluster).read()
    assert not exc.value.retriable


def test_a_partition_with_another_error_is_left_out() -> None:
    cluster = Cluster({"a": Group(partitions=[("gone", 0, 1, 1)], partition_error=3)})
    assert reader_for(cluster).read() == [ShareGroupState("a", "Stable", 1, ())]


def test_an_assigned_topic_left_out_of_the_answer_is_asked_for_by_name() -> None:
    """Asked for all topics the broker leaves out those the principal may not describe;
    by name it says TOPIC_AUTHORIZATION_FAILED, which names the ACL."""
    group = Group(partitions=[("open", 0, 1, 0), ("secret", 0, 1, 1)],
                  assigned=[("open", 0), ("secret", 0)], hidden={"secret"})  # fmt: skip
    cluster = Cluster({"a": group})
    with pytest.raises(ShareGroupsDenied, match="DESCRIBE on Topic:secret"):
        reader_for(cluster).read()
    cluster.groups["a"].hidden.clear()
    (state,) = reader_for(cluster).read()
    assert [p.topic for p in state.partitions] == ["open", "secret"]
