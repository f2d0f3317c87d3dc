"""The commits source's loop (``pipeline.read.commits.CommitsLoop``) against a fake consumer
and producer: what a poll forwards, what a rebalance does, what group health publishes."""

from __future__ import annotations

import functools
import pickle
from dataclasses import dataclass, field
from typing import Any

import orjson

from pipeline.model.group_health import GroupHealth, HealthConfig
from pipeline.read.commits import HEALTH_KEY_PREFIX, CommitsConfig, CommitsLoop
from pipeline.read.health import HealthFold
from tests.unit.pipeline.read.test_offsets import GROUP_KEY, KAFKA_GROUP_V3
from tests.unit.pipeline.read.test_poll import OFFSETS, Msg, commit, report

#: every buffer goes out at the poll that filled it; the offsets commit only when asked
CFG = CommitsConfig(consumer_group="lagpilot-test.offsets", flush_ms=0, commit_every_s=3600)


@dataclass
class TP:
    topic: str
    partition: int


@dataclass
class FakeConsumer:
    polls: list[list[Msg]] = field(default_factory=list)
    commits: int = 0
    closed: bool = False
    callbacks: dict[str, Any] = field(default_factory=dict)

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        self.callbacks = {"topics": topics, **callbacks}

    def consume(self, num_messages: int, timeout: float) -> list[Msg]:
        return self.polls.pop(0) if self.polls else []

    def commit(self, asynchronous: bool) -> None:
        self.commits += 1

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeCounters:
    sent: list[tuple[str, dict[str, float]]] = field(default_factory=list)

    def send(self, run: str, totals: dict[str, float]) -> None:
        self.sent.append((run, totals))


@dataclass
class FakeSource:
    """What the loop uses of ``CommitsSource``: its settings, producer and counters."""

    config: CommitsConfig = CFG
    broker_config: dict[str, Any] = field(default_factory=dict)
    counters: FakeCounters = field(default_factory=FakeCounters)
    produced: list[tuple[str, Any, int]] = field(default_factory=list)
    flushes: int = 0
    queued: int = 0  # messages the producer holds undelivered
    served: int = 0

    def produce(self, key: str, value: bytes, timestamp: int) -> None:
        self.produced.append((key, orjson.loads(value), timestamp))

    def flush(self) -> None:
        self.flushes += 1

    def undelivered(self) -> int:
        return self.queued

    def serve_deliveries(self, timeout_s: float) -> None:
        self.served += 1


def _loop(*polls: list[Msg], health: HealthFold | None = None) -> tuple[CommitsLoop, Any, Any]:
    source, consumer = FakeSource(), FakeConsumer(polls=list(polls))
    loop = CommitsLoop(source, consumer, health=health)  # type: ignore[arg-type]
    return loop, source, consumer


def test_a_poll_forwards_its_commits_as_one_batch_per_topic() -> None:
    loop, source, _ = _loop([commit("g", "t", 0, 10, 100), commit("g", "u", 1, 5, 100)])
    loop.subscribe()
    loop.poll_once()
    batches = {key: value for key, value, _ in source.produced}
    assert set(batches) == {"t", "u"}
    assert batches["t"]["event"] == "commits" and batches["t"]["offset"] == [10]
    assert loop.stats["commit"] == 2 and loop.stats["batches"] == 2


def test_a_revoke_forwards_and_commits_first_and_the_assignment_follows() -> None:
    loop, source, consumer = _loop([commit("g", "t", 0, 10, 100)])
    loop.subscribe()
    assert consumer.callbacks["topics"] == [OFFSETS, "lagpilot.progress"]
    loop.on_assign(consumer, [TP(OFFSETS, 0), TP(OFFSETS, 1), TP("lagpilot.progress", 0)])
    assert loop.positions.assigned == {0, 1} and loop.positions.assigned_progress == {0}
    loop.on_revoke(consumer, [TP(OFFSETS, 1), TP("lagpilot.progress", 0)])
    assert consumer.commits == 1 and source.flushes == 1
    assert loop.positions.owned == frozenset({0}) and loop.positions.assigned_progress == set()


def test_the_run_ends_with_a_flush_a_commit_and_the_counters() -> None:
    loop, source, consumer = _loop([commit("g", "t", 0, 10, 100), report("sdk")])
    polls = iter([True, True, False])
    loop.run(lambda: next(polls))
    ((key, batch, _),) = source.produced  # the commit and the report: one batch of t
    assert key == "t" and batch["offset"] == [10] and batch["progress"]
    assert consumer.commits == 1
    (_, totals), *_ = source.counters.sent
    assert totals["commit"] == 1 and totals["progress"] == 1
    loop.close()
    assert consumer.closed


def test_group_health_events_go_out_keyed_by_their_group() -> None:
    health = GroupHealth()
    loop, source, _ = _loop([Msg(GROUP_KEY, KAFKA_GROUP_V3)], health=health)
    assert loop.buffer.tracked is health.groups
    loop.poll_once()
    keys = [key for key, _, _ in source.produced]
    assert HEALTH_KEY_PREFIX + "grp" in keys
    owners = [value for _, value, _ in source.produced if value.get("event") == "owners"]
    assert owners and owners[0]["owners"] == health.owners(owners[0]["topic"])
    loop.close()


def test_the_settings_and_the_health_factory_pickle() -> None:
    """Quix pickles the source into a spawned process: its settings and the factory of
    group health go with it."""
    factory = functools.partial(GroupHealth, HealthConfig(storm_rebalances=7))
    cfg, back = pickle.loads(pickle.dumps((CFG, factory)))
    assert cfg == CFG
    made = back()
    assert isinstance(made, GroupHealth) and made.cfg.storm_rebalances == 7


def test_a_fatal_consumer_error_renews_the_consumer_and_a_transient_one_does_not(
    monkeypatch: Any,
) -> None:
    """A static member fenced by its failed-over coordinator (librdkafka#3437) gets a fatal
    error and reads nothing more: the loop replaces its consumer and subscribes it again;
    a transient error (the coordinator away) only counts."""
    from confluent_kafka import KafkaError

    made: list[FakeConsumer] = []

    def fresh(_cfg: CommitsConfig, _broker: dict[str, Any]) -> FakeConsumer:
        made.append(FakeConsumer())
        return made[-1]

    monkeypatch.setattr(CommitsConfig, "consumer", fresh)
    transient = Msg(None, None, err=KafkaError(KafkaError._TRANSPORT, "broker down"))
    fenced = Msg(None, None, err=KafkaError(KafkaError._FATAL, "fenced", fatal=True))
    loop, _, old = _loop([transient], [fenced])
    loop.subscribe()
    loop.poll_once()
    assert loop.consumer is old and not made and loop.stats["read_errors"] == 1
    loop.poll_once()
    assert made and loop.consumer is made[0]
    assert made[0].callbacks["topics"] == CFG.subscribed  # subscribed again, callbacks too
    assert made[0].callbacks["on_assign"] == loop.on_assign
