"""Fakes for the worker SDK's poll-thread tests: a consumer, the control reader, the
outcome reporter and the hand-off peek, recording what the engine asked of them.

The engine builds its Kafka clients only in ``start()``; a unit test builds a ``Worker`` or
``PoolWorker`` (nothing connects), then :func:`wire` puts these fakes where ``start()``
would put the real ones, and the test drives the poll thread's steps itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from actuators.workers import MemoryDedupeStore, PoolWorker, Worker
from actuators.workers.control import Command
from actuators.workers.engine import Engine
from actuators.workers.handoff import Marker
from schemas import ActionType

TopicPart = tuple[str, int]
UNSET = -1001  # librdkafka's OFFSET_INVALID: nothing committed, no position yet


@dataclass
class Msg:
    """The confluent_kafka.Message accessors the engine, the lanes and the handler read."""

    _offset: int
    _topic: str = "t"
    _partition: int = 0
    _key: bytes | None = None
    _error: KafkaError | None = None
    _value: bytes | None = None

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def headers(self) -> list[tuple[str, bytes]] | None:
        return None

    def value(self) -> bytes | None:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return (0, -1)  # TIMESTAMP_NOT_AVAILABLE

    def error(self) -> KafkaError | None:
        return self._error


@dataclass
class FakeConsumer:
    """What the engine calls on its consumer, recorded; ``batches`` are what consume() gives."""

    batches: list[list[Msg]] = field(default_factory=list)
    committed_at: dict[TopicPart, tuple[int, str]] = field(default_factory=dict)
    positions: dict[TopicPart, int] = field(default_factory=dict)
    low_watermarks: dict[TopicPart, int] = field(default_factory=dict)
    commits: list[tuple[dict[TopicPart, tuple[int, str]], bool]] = field(default_factory=list)
    paused: list[TopicPart] = field(default_factory=list)
    resumed: list[TopicPart] = field(default_factory=list)
    assigned: list[TopicPart] = field(default_factory=list)
    unassigned: list[TopicPart] = field(default_factory=list)
    seeks: list[tuple[TopicPart, int]] = field(default_factory=list)
    fail_commits: bool = False
    on_commit: Callable[[Any, list[TopicPartition]], None] | None = None
    closed: bool = False

    def consume(self, num_messages: int = 1, timeout: float = 0) -> list[Msg]:
        return self.batches.pop(0) if self.batches else []

    def commit(self, *, offsets: list[TopicPartition], asynchronous: bool) -> Any:
        from confluent_kafka import KafkaException

        if self.fail_commits:
            raise KafkaException(KafkaError(KafkaError.REBALANCE_IN_PROGRESS))
        done = {(tp.topic, tp.partition): (tp.offset, tp.metadata or "") for tp in offsets}
        self.commits.append((done, asynchronous))
        self.committed_at.update(done)
        if asynchronous:
            if self.on_commit is not None:  # librdkafka calls back inside a later consume()
                self.on_commit(None, offsets)
            return None
        return offsets

    def committed(self, partitions: list[TopicPartition], timeout: float = 0) -> list[Any]:
        out = []
        for tp in partitions:
            offset, metadata = self.committed_at.get((tp.topic, tp.partition), (UNSET, ""))
            out.append(TopicPartition(tp.topic, tp.partition, offset, metadata))
        return out

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [
            TopicPartition(tp.topic, tp.partition, self.positions.get((tp.topic, tp.partition),
                                                                      UNSET))
            for tp in partitions
        ]  # fmt: skip

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float = 0) -> tuple[int, int]:
        return self.low_watermarks.get((tp.topic, tp.partition), 0), 1_000

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused += [(tp.topic, tp.partition) for tp in partitions]

    def resume(self, partitions: list[TopicPartition]) -> None:
        self.resumed += [(tp.topic, tp.partition) for tp in partitions]

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned += [(tp.topic, tp.partition) for tp in partitions]
        for tp in partitions:
            if tp.offset >= 0:
                self.positions[(tp.topic, tp.partition)] = tp.offset

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        self.unassigned += [(tp.topic, tp.partition) for tp in partitions]

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append(((tp.topic, tp.partition), tp.offset))

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeControl:
    """The control reader: ``poll`` gives the commands queued in ``commands``."""

    commands: list[Command] = field(default_factory=list)
    trace_parents: dict[str, Any] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def poll(self, now_ms: int) -> list[Command]:
        out, self.commands = self.commands, []
        return out

    def close(self) -> None:
        return None


@dataclass
class FakeReporter:
    """The outcome reporter: every worker_outcome event, in order."""

    events: list[dict[str, Any]] = field(default_factory=list)

    def report(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def did(self) -> list[str]:
        return [e["did"] for e in self.events]

    def close(self) -> None:
        return None


@dataclass
class FakePeek:
    """Another group's committed offset and marker, as ``OffsetPeek.committed`` reads it."""

    answers: dict[tuple[str, str, int], tuple[int | None, Marker | None]] = field(
        default_factory=dict
    )

    def committed(
        self, group: str, topic: str, partition: int, timeout_s: float = 5.0
    ) -> tuple[int | None, Marker | None]:
        return self.answers.get((group, topic, partition), (None, None))

    def close(self) -> None:
        return None


KEY = b"unit-test-signing-key-0123456789"


class Plain(Engine):
    """The engine with subclass hooks that only record (``applied``) and hold (``held``)."""

    held: set[TopicPart]
    applied: list[Command]

    def _open(self) -> None:
        raise AssertionError("unit tests do not connect")

    def _apply(self, cmd: Command) -> None:
        self.applied.append(cmd)

    def _held(self, tp: TopicPart) -> bool:
        return tp in self.held


def plain(handler: Any, **settings: Any) -> Plain:
    """A ``Plain`` engine of group ``g`` committing at every poll, nothing connected."""
    engine = Plain(bootstrap="127.0.0.1:1", group="g", handler=handler,
                   **{"dedupe": MemoryDedupeStore(), "signing_key": KEY,
                      "commit_interval_s": 0.0, **settings})  # fmt: skip
    engine.held, engine.applied = set(), []
    return engine


def settings(**over: Any) -> dict[str, Any]:
    """A Worker's or PoolWorker's keywords that need nothing running."""
    return {"bootstrap": "127.0.0.1:1", "group": "g", "handler": lambda msg, ctx: None,
            "dedupe": MemoryDedupeStore(), "signing_key": KEY, "commit_interval_s": 0.0,
            "outcomes_topic": "outcomes", **over}  # fmt: skip


@dataclass
class Wired:
    consumer: FakeConsumer
    control: FakeControl
    reporter: FakeReporter
    peek: FakePeek


def wire(engine: Any, assigned: Iterable[TopicPart] = ()) -> Wired:
    """Put the fakes where ``start()`` would put the real clients; ``assigned`` partitions
    are the engine's as if the group had given them."""
    fakes = Wired(FakeConsumer(on_commit=engine._on_commit), FakeControl(), FakeReporter(),
                  FakePeek())  # fmt: skip
    engine._consumer = fakes.consumer
    engine._control = fakes.control
    engine._reporter = fakes.reporter
    if isinstance(engine, Worker | PoolWorker):  # the owner's and the pool's hand-off peek
        engine._peek = fakes.peek
    engine._assigned.update(assigned)
    return fakes


def command(kind: ActionType, tp: TopicPart | None = None, **fields: Any) -> Command:
    """A checked command, as the control reader hands it to the poll thread."""
    topic, partition = tp if tp is not None else (None, None)
    expires = int(time.time() * 1000) + 60_000
    return Command(f"a-{kind.value}-{time.monotonic_ns()}", kind, topic, partition,
                   expires_at=expires, **fields)  # fmt: skip


def wait_until(cond: Callable[[], object], timeout_s: float = 5.0) -> None:
    """Wait for the lanes (threads) to get somewhere; fail the test past ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the lanes")
        time.sleep(0.005)
