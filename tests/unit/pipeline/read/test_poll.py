"""One poll into the commits buffer and group health: every kind of record, in log order."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import orjson

from bench.support import layout_codec
from pipeline.model.group_health import GroupHealth
from pipeline.read.coalesce import Coalescer, commit_key, commit_rows
from pipeline.read.poll import read_poll
from tests.unit.pipeline.read.test_offsets import GROUP_KEY, KAFKA_GROUP_V3

OFFSETS, PROGRESS = "__consumer_offsets", "lagpilot.progress"


@dataclass
class Msg:
    """The confluent-kafka accessors ``read_poll`` uses."""

    k: bytes | None
    v: bytes | None
    topic_: str = OFFSETS
    err: Any = None
    offset_: int = 0

    def key(self) -> bytes | None:
        return self.k

    def value(self) -> bytes | None:
        return self.v

    def topic(self) -> str:
        return self.topic_

    def error(self) -> Any:
        return self.err

    def offset(self) -> int:
        return self.offset_

    def partition(self) -> int:
        return 0

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_500)


def commit(group: str, topic: str, p: int, offset: int, ts: int, metadata: str = "") -> Msg:
    value = layout_codec.encode(
        "OffsetCommitValue", 3, offset=offset, leader_epoch=1, metadata=metadata,
        commit_timestamp=ts, expire_timestamp=-1,
    )  # fmt: skip
    return Msg(commit_key(group, topic, p), value)


def report(group: str) -> Msg:
    body = {
        "event": "progress", "v": 1, "group": group, "member": "w-1", "host": "h",
        "sent_at_ms": 1_000, "interval_ms": 250,
        "partitions": [{"topic": "t", "partition": 0, "processed_offset": 5, "progress_ms": 990}],
        "released": [],
    }  # fmt: skip
    return Msg(b"w-1", orjson.dumps(body), topic_=PROGRESS)


def test_one_poll_of_every_kind_of_record() -> None:
    buffer, stats = Coalescer(own_prefix="lagpilot"), Counter[str]()
    msgs = [
        commit("g", "t", 0, 10, 100),  # fast
        commit("g", "t", 1, 11, 101, metadata="m"),  # careful (metadata), same batch
        Msg(commit_key("g", "t", 2), None),  # a deletion
        commit("lagpilot.x", "t", 0, 1, 1),  # own: dropped, counted
        Msg(GROUP_KEY, KAFKA_GROUP_V3),  # membership: group health only
        Msg(None, None, err="boom"),  # a read error
        Msg(b"\x00\x63junk", b"\x00\x00"),  # an unknown record type: skipped, counted
        report("sdk"),  # a worker's report: forwarded at once
        Msg(b"w-2", b"{not json", topic_=PROGRESS),
        commit("g", "t", 0, 12, 102),  # fast again: the last of g/t/0 wins
    ]
    reports = read_poll(msgs, buffer, None, [], 5, stats, OFFSETS, "lagpilot")
    assert reports
    assert stats["commit"] == 3 and stats["offset_deleted"] == 1 and stats["own_group"] == 1
    assert stats["read_errors"] == 1 and stats["progress"] == 1
    assert stats["progress_malformed"] == 1 and stats["group_metadata"] == 1
    assert sum(n for k, n in stats.items() if k.startswith("skipped|unknown_type")) == 1
    by_topic = {e["topic"]: e for e in buffer.drain()}
    assert sorted(commit_rows(by_topic["t"])) == [["g", 0, 12, 102], ["g", 1, 11, 101]]
    assert by_topic["t"]["deleted"] == [["g", 2]] and by_topic["t"]["progress"]


def test_fast_commits_reach_group_health_before_the_next_record_that_does() -> None:
    """A tracked group's commits taken fast are applied to group health in log order: a
    membership record read after them sees them applied."""
    health, buffer, stats = GroupHealth(), Coalescer(), Counter[str]()
    buffer.tracked = health.groups
    read_poll([Msg(GROUP_KEY, KAFKA_GROUP_V3)], buffer, health, [], 1, stats, OFFSETS, "lp")
    assert "grp" in health.groups
    read_poll([commit("grp", "orders", 0, 7, 1_000)], buffer, health, [], 2, stats, OFFSETS, "lp")
    assert health.groups["grp"].positions == {("orders", 0): 7}
    msgs = [commit("grp", "orders", 0, 9, 2_000), Msg(GROUP_KEY, KAFKA_GROUP_V3)]
    read_poll(msgs, buffer, health, [], 3, stats, OFFSETS, "lp")
    g = health.groups["grp"]
    assert g.positions == {("orders", 0): 9} and g.last_progress_ms == 2_000
