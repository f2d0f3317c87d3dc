"""Reading lagpilot's own topics back: one reader for the commands that show them.

``lagpilot status`` (the lag table), ``lagpilot control tail`` (control and outcome events)
and ``lagpilot mcp`` (both, and the verdicts of its requests) read the same way: a consumer
of a fresh group that commits nothing, the topics' partitions from metadata (a missing
topic is the user's to fix: exit 66, with how it comes to exist), positioned at a time or
at the end, and events decoded where they are events (anything else is skipped).
``until_end`` reads every assigned partition to the end it had when asked, bounded by a
timeout; the follow loop of ``control tail`` and the wait for a verdict read on their own.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from runtime.cli import EX_NOINPUT, CommandError, client_config
from schemas import EventError, decode

#: what a missing lagpilot topic most often means
NOT_RUNNING = "is the pipeline running? (lagpilot run creates it)"


def reader(bootstrap: str, kafka: Mapping[str, str], purpose: str, *, eof: bool = False) -> Any:
    """A consumer of group ``lagpilot-<purpose>-<random>`` that commits nothing; ``eof``:
    it says when a partition's end is reached (what ``until_end`` stops on)."""
    from confluent_kafka import Consumer

    config: dict[str, Any] = {
        **client_config(bootstrap, dict(kafka)),
        "group.id": f"lagpilot-{purpose}-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
    }
    if eof:
        config["enable.partition.eof"] = True
    return Consumer(config)


def partitions_at_end(
    consumer: Any, names: Sequence[str], *, bootstrap: str, timeout_s: float, missing: str
) -> list[Any]:
    """Every partition of ``names``, positioned at the end; a topic not there raises
    ``CommandError`` (exit 66): "topic X not found at B: ``missing``" says how it comes."""
    from confluent_kafka import OFFSET_END, TopicPartition

    # one topic is asked by name (a denied DESCRIBE then says so rather than leave it out)
    md = consumer.list_topics(names[0] if len(names) == 1 else None, timeout=timeout_s)
    out: list[Any] = []
    for name in names:
        meta = md.topics.get(name)
        if meta is None or meta.error is not None or not meta.partitions:
            raise CommandError(f"topic {name} not found at {bootstrap}: {missing}", EX_NOINPUT)
        out += [TopicPartition(name, p, OFFSET_END) for p in sorted(meta.partitions)]
    return out


def positions_since(consumer: Any, parts: Sequence[Any], since_s: float, timeout_s: float) -> Any:
    """``parts`` positioned at their first message at or after ``since_s`` ago; a partition
    with none after it has offset -1 (the caller decides: its end, or nothing to read)."""
    from confluent_kafka import TopicPartition

    start_ms = int((time.time() - since_s) * 1000)
    by_time = [TopicPartition(tp.topic, tp.partition, start_ms) for tp in parts]
    return consumer.offsets_for_times(by_time, timeout=timeout_s)


def event_of(msg: Any) -> dict[str, Any] | None:
    """The event a message holds, or None for what is not one of lagpilot's events."""
    try:
        return decode(msg.value() or b"")
    except EventError:
        return None


def until_end(
    consumer: Any, parts: Sequence[Any], timeout_s: float, poll_s: float = 0.2
) -> Iterator[tuple[Any, dict[str, Any]]]:
    """(message, event) from ``parts`` (those with an offset, >= 0) to each one's end, in
    the order read, for at most ``timeout_s``. ``consumer`` needs ``eof`` (see ``reader``);
    other errors are read past (the deadline bounds them)."""
    from confluent_kafka import KafkaError

    todo = [tp for tp in parts if tp.offset >= 0]
    if not todo:
        return
    consumer.assign(todo)
    left = {(tp.topic, tp.partition) for tp in todo}
    deadline = time.monotonic() + timeout_s
    while left and time.monotonic() < deadline:
        msg = consumer.poll(poll_s)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                left.discard((msg.topic(), msg.partition()))
            continue
        event = event_of(msg)
        if event is not None:
            yield msg, event
