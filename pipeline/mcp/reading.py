"""What ``lagpilot mcp`` reads, with the readers ``lagpilot status`` and ``lagpilot control
tail`` use: the lag table from ``pipeline.status.read_latest``, and the control and
outcome events from a time on, as ``tail --since`` starts (offsets for a time, to the end).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from pipeline.status import as_json, read_latest, render
from schemas import EventError, decode
from schemas.cli import EX_NOINPUT, CommandError, client_config


def lag_status(
    bootstrap: str,
    kafka: Mapping[str, str],
    *,
    group: str | None,
    topic: str | None,
    since_s: float,
    timeout_s: float,
) -> dict[str, Any]:
    """``lagpilot status [--group G]``: the same events (as ``--json``) and the same table."""
    summaries, partitions, health = read_latest(bootstrap, since_s, group, timeout_s, dict(kafka))
    if topic:
        summaries = {k: s for k, s in summaries.items() if s["topic"] == topic}
        partitions = {k: p for k, p in partitions.items() if p["topic"] == topic}
    doc: dict[str, Any] = orjson.loads(as_json(summaries, partitions, health))
    doc["table"] = render(summaries, partitions if group else {}, health)
    return doc


def recent_events(
    bootstrap: str,
    kafka: Mapping[str, str],
    names: Sequence[str],
    *,
    since_s: float,
    timeout_s: float,
) -> list[tuple[str, dict[str, Any]]]:
    """Every event on ``names`` from ``since_s`` ago to their end now, in time order.

    Bounded by ``timeout_s``; what is not JSON is skipped (it cannot explain anything)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            **client_config(bootstrap, dict(kafka)),
            "group.id": f"lagpilot-mcp-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        md = consumer.list_topics(timeout=timeout_s)
        start_ms = int((time.time() - since_s) * 1000)
        wanted = []
        for name in names:
            meta = md.topics.get(name)
            if meta is None or meta.error is not None or not meta.partitions:
                raise CommandError(
                    f"topic {name} not found at {bootstrap}: is the pipeline running? "
                    "(lagpilot run creates it)",
                    EX_NOINPUT,
                )
            wanted += [TopicPartition(name, p, start_ms) for p in sorted(meta.partitions)]
        found = consumer.offsets_for_times(wanted, timeout=timeout_s)
        todo = [tp for tp in found if tp.offset >= 0]  # -1: nothing after the time
        if not todo:
            return []
        consumer.assign(todo)
        left = {(tp.topic, tp.partition) for tp in todo}
        out: list[tuple[int, str, dict[str, Any]]] = []
        deadline = time.monotonic() + timeout_s
        while left and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    left.discard((msg.topic(), msg.partition()))
                continue
            try:
                event = decode(msg.value() or b"")
            except EventError:
                continue  # not an event: never one of ours to explain
            out.append((msg.timestamp()[1], str(msg.topic()), event))
        out.sort(key=lambda row: row[0])
        return [(name, event) for _, name, event in out]
    finally:
        consumer.close()
