"""What ``lagpilot mcp`` reads, with the reader ``lagpilot status`` and ``lagpilot control
tail`` use (``pipeline.commands.topic_reader``): the lag table from
``pipeline.commands.status.read_latest``, and the control and outcome events from a time
on, as ``tail --since`` starts (offsets for a time, to the end).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from pipeline.commands.status import as_json, read_latest, render
from pipeline.commands.topic_reader import (
    NOT_RUNNING,
    partitions_at_end,
    positions_since,
    reader,
    until_end,
)


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
    consumer = reader(bootstrap, kafka, "mcp", eof=True)
    try:
        parts = partitions_at_end(
            consumer, names, bootstrap=bootstrap, timeout_s=timeout_s, missing=NOT_RUNNING
        )
        start = positions_since(consumer, parts, since_s, timeout_s)  # -1: nothing since then
        out = [(msg.timestamp()[1], str(msg.topic()), event)
               for msg, event in until_end(consumer, start, timeout_s)]  # fmt: skip
        out.sort(key=lambda row: row[0])
        return [(name, event) for _, name, event in out]
    finally:
        consumer.close()
