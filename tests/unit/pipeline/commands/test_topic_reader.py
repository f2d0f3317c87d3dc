"""The one reader of lagpilot's own topics (pipeline/commands/topic_reader.py) on a fake consumer:
a missing topic is exit 66 with how it comes to exist, ``until_end`` stops at each
partition's end and skips what is not an event, and a partition with nothing since the
time is not read at all."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, TopicPartition

from pipeline.commands.topic_reader import event_of, partitions_at_end, until_end
from runtime.cli import EX_NOINPUT, CommandError
from schemas import encode


class Msg:
    def __init__(self, topic: str, partition: int, value: bytes | None = None,
                 error: KafkaError | None = None) -> None:  # fmt: skip
        self._t, self._p, self._v, self._e = topic, partition, value, error

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def value(self) -> bytes | None:
        return self._v

    def error(self) -> KafkaError | None:
        return self._e


class FakeConsumer:
    def __init__(self, topics: dict[str, int], script: list[Msg | None]) -> None:
        self.topics = {t: SimpleNamespace(error=None, partitions=dict.fromkeys(range(n)))
                       for t, n in topics.items()}  # fmt: skip
        self.script, self.assigned = list(script), []

    def list_topics(self, topic: str | None = None, timeout: float = 0) -> Any:
        return SimpleNamespace(topics=self.topics)

    def assign(self, parts: list[Any]) -> None:
        self.assigned = [(tp.topic, tp.partition, tp.offset) for tp in parts]

    def poll(self, timeout: float) -> Msg | None:
        return self.script.pop(0) if self.script else None


def eof(topic: str, partition: int) -> Msg:
    return Msg(topic, partition, error=KafkaError(KafkaError._PARTITION_EOF))


def test_a_missing_topic_is_exit_66_saying_how_it_comes() -> None:
    consumer = FakeConsumer({"lagpilot.lag": 2}, [])
    parts = partitions_at_end(consumer, ["lagpilot.lag"], bootstrap="b:1", timeout_s=1,
                              missing="start it")  # fmt: skip
    assert [(tp.topic, tp.partition) for tp in parts] == [("lagpilot.lag", 0), ("lagpilot.lag", 1)]
    with pytest.raises(CommandError) as caught:
        partitions_at_end(consumer, ["lagpilot.lag", "gone"], bootstrap="b:1", timeout_s=1,
                          missing="start it")  # fmt: skip
    assert caught.value.exit_code == EX_NOINPUT
    assert str(caught.value) == "topic gone not found at b:1: start it"


def test_until_end_reads_each_partition_to_its_end_and_skips_what_is_not_an_event() -> None:
    good = {"event": "group_lag", "v": 1}
    script = [Msg("t", 0, encode(good)), Msg("t", 0, b"not json"), None, eof("t", 0),
              Msg("t", 1, encode(good)), Msg("t", 1, error=KafkaError(KafkaError._TRANSPORT)),
              eof("t", 1), Msg("t", 1, encode(good))]  # fmt: skip
    consumer = FakeConsumer({"t": 3}, script)
    start = [TopicPartition("t", 0, 5), TopicPartition("t", 1, 0), TopicPartition("t", 2, -1)]
    got = [(m.partition(), e) for m, e in until_end(consumer, start, timeout_s=5)]
    assert got == [(0, good), (1, good)]  # the message after both ends is not read
    assert consumer.assigned == [("t", 0, 5), ("t", 1, 0)]  # nothing since then on p2
    assert len(consumer.script) == 1  # the rest left unread


def test_nothing_since_the_time_reads_nothing_and_a_timeout_bounds_the_rest() -> None:
    consumer = FakeConsumer({"t": 1}, [])
    assert list(until_end(consumer, [TopicPartition("t", 0, -1)], timeout_s=5)) == []
    assert consumer.assigned == []
    assert list(until_end(consumer, [TopicPartition("t", 0, 0)], timeout_s=0.05)) == []
    assert event_of(Msg("t", 0, None)) is None
