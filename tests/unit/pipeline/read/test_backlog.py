"""The reader's bound on what it holds and how far behind it says it is
(``pipeline.read.backlog``), and the loop pausing at the bound (``CommitsLoop.hold_back``)."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.read.backlog import (
    CAUGHT_UP_HOLD_MS,
    CAUGHT_UP_RECORDS,
    BufferBudget,
    OutputGate,
    backlog_records,
    behind_s,
    still_behind,
)
from pipeline.read.commit_table import CommitTable
from pipeline.read.commits import CommitsConfig, CommitsLoop
from pipeline.settings import load_settings
from schemas import ConfigError
from tests.unit.pipeline.read.test_commits_loop import FakeConsumer, FakeSource
from tests.unit.pipeline.read.test_poll import commit

MIB = 1024 * 1024


def test_the_budget_splits_the_bound_so_the_queues_together_stay_under_it() -> None:
    b = BufferBudget(256 * MIB)
    reader = b.reader_consumer()["queued.max.messages.kbytes"] * 1024
    model = b.model_consumer()["queued.max.messages.kbytes"] * 1024
    producer = b.producer()["queue.buffering.max.kbytes"] * 1024
    assert reader + model + producer <= 256 * MIB
    assert b.reader_consumer()["fetch.max.bytes"] <= reader
    # the reader pauses well before its producer's own limit (a full producer raises)
    assert b.resume_at_bytes < b.pause_at_bytes < producer


def test_the_gate_pauses_at_its_share_and_resumes_only_once_drained() -> None:
    gate = OutputGate(BufferBudget(64 * MIB))
    for _ in range(20):
        gate.sent(MIB)  # 1 MiB batches
    assert gate.update(15) is False  # 15 MiB < 16 MiB
    assert gate.update(16) is True
    assert gate.update(12) is True  # between the marks: still paused (no flapping)
    assert gate.update(8) is False
    assert gate.pauses == 1


@pytest.mark.parametrize(
    ("ends", "backlog"),
    [({0: (10, 110), 1: (5, 5)}, 100), ({0: (10, -1)}, 0), ({0: (-1001, 50)}, 0), ({}, 0)],
)
def test_backlog_counts_records_left_where_both_ends_are_known(
    ends: dict[int, tuple[int, int]], backlog: int
) -> None:
    assert backlog_records(ends) == backlog


def test_behind_is_the_age_of_the_last_record_read_while_a_backlog_waits() -> None:
    assert behind_s(20_000, 8_000, CAUGHT_UP_RECORDS + 1) == 12.0
    assert behind_s(20_000, 8_000, CAUGHT_UP_RECORDS) == 0.0  # caught up: not behind
    assert behind_s(20_000, 0, 10**6) == 0.0  # nothing read yet: no age to tell


def test_a_backlog_of_one_group_partitions_commits_is_held_as_one() -> None:
    """Coalescing is what bounds the commits themselves: 200,000 commits of 100
    group-partitions hold 100 entries, whatever the backlog."""
    table = CommitTable("lagpilot")
    for i in range(200_000):
        table.add("t", f"g{i % 10}", (i // 10) % 10, i, i)
        if i % 50_000 == 0:
            table.drain()
    table.drain()
    assert len(table.known()) == 100


def test_the_bound_is_a_setting_with_a_documented_default_and_a_range() -> None:
    assert load_settings({}).max_buffered_bytes == 256 * MIB
    assert load_settings({"LAGPILOT_MAX_BUFFERED_BYTES": str(64 * MIB)}).max_buffered_bytes == (
        64 * MIB
    )
    with pytest.raises(ConfigError, match="LAGPILOT_MAX_BUFFERED_BYTES"):
        load_settings({"LAGPILOT_MAX_BUFFERED_BYTES": "1000"})


class PausingConsumer(FakeConsumer):
    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.paused: list[Any] = []
        self.resumed: list[Any] = []

    def assignment(self) -> list[str]:
        return ["__consumer_offsets[0]"]

    def pause(self, parts: Any) -> None:
        self.paused.append(parts)

    def resume(self, parts: Any) -> None:
        self.resumed.append(parts)


def test_the_loop_pauses_its_partitions_while_output_waits_and_keeps_polling() -> None:
    cfg = CommitsConfig(
        consumer_group="lagpilot-test.offsets",
        flush_ms=0,
        commit_every_s=3600,
        max_buffered_bytes=16 * MIB,
    )
    source = FakeSource(config=cfg)
    polls = [[commit("g", "t", 0, 5, 1_000)] for _ in range(4)]
    consumer = PausingConsumer(polls=polls)
    loop = CommitsLoop(source, consumer)  # type: ignore[arg-type]
    loop.input.gate.sent(MIB)
    source.queued = 10  # 10 MiB undelivered: past the 4 MiB mark
    loop.poll_once()
    assert consumer.paused and not consumer.resumed
    assert source.served  # deliveries served while paused
    source.queued = 1
    loop.poll_once()
    assert consumer.resumed
    loop.send_counters()
    totals = source.counters.sent[-1][1]
    assert totals["input_pauses"] == 1
    assert totals["gauge|input_paused"] == 0


class BehindConsumer(PausingConsumer):
    """Assigned partition 0, read to ``at``, its end at ``end``."""

    def __init__(self, at: int, end: int, **kw: Any) -> None:
        super().__init__(**kw)
        self.at, self.end = at, end

    def position(self, tps: list[Any]) -> list[Any]:
        from confluent_kafka import TopicPartition

        return [TopicPartition(tp.topic, tp.partition, self.at) for tp in tps]

    def get_watermark_offsets(self, tp: Any, cached: bool = False) -> tuple[int, int]:
        return 0, self.end


def test_a_replica_behind_says_so_on_the_lag_topic_at_once_and_again_when_caught_up() -> None:
    from schemas import validate

    source = FakeSource()
    consumer = BehindConsumer(at=10, end=10 + CAUGHT_UP_RECORDS + 1)
    loop = CommitsLoop(source, consumer)  # type: ignore[arg-type]
    loop.send_counters()
    assert not source.produced  # not assigned yet: nothing to say
    loop.positions.assigned = {0}
    loop.input.last_record_ms = 1  # its last record is decades old
    loop.send_counters()
    [(key, ev, _)] = source.produced
    validate(ev)
    assert key == f"input_state|{loop.run_id}"
    assert ev["behind"] and ev["backlog_records"] == CAUGHT_UP_RECORDS + 1
    loop.send_counters()
    assert len(source.produced) == 1  # unchanged: not again before its interval
    consumer.at = consumer.end
    loop.send_counters()
    assert len(source.produced) == 1  # below the mark: caught up only once it stays there
    loop.input.below_since_ms -= CAUGHT_UP_HOLD_MS
    loop.send_counters()
    assert source.produced[-1][1]["behind"] is False  # caught up: at once


def test_behind_holds_until_the_reader_stayed_caught_up_a_while() -> None:
    assert still_behind(False, 6.0, 0, 1_000) is True
    assert still_behind(False, 1.0, 0, 1_000) is False
    assert still_behind(True, 1.0, 1_000, 1_000 + CAUGHT_UP_HOLD_MS - 1) is True  # a lull
    assert still_behind(True, 1.0, 1_000, 1_000 + CAUGHT_UP_HOLD_MS) is False
