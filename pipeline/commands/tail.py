"""``lagpilot control tail``: control and outcome events as a table (or JSON lines).

Pure parts (``TailFilter``, ``InstanceTally``, ``parse_since``, the row formatting) are
unit-tested without a broker; ``tail`` reads the topics. The demo and the MCP views reuse
the filter and the tally. The kill switch itself is ``lagpilot control halt`` / ``resume``
(``pipeline.commands.control``).
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from pipeline.commands.topic_reader import partitions_at_end, positions_since, reader
from runtime.cli import connect
from schemas import ConfigError, EventError, Verifier, decode, load_verifier, verify

log = logging.getLogger("lagpilot.control")
#: tail's columns and their widths (the last one, detail, takes the rest of the line)
COLUMNS = (("time(UTC)", 12), ("topic", 17), ("type", 19), ("target", 30), ("mode/result", 11),
           ("sig", 3), ("id", 12), ("detail", 0))  # fmt: skip


def format_row(cells: Sequence[str]) -> str:
    return "  ".join(c.ljust(w)[: w or None] for c, (_, w) in zip(cells, COLUMNS, strict=True))


class InstanceTally:
    """How many worker instances reported acting on each action id (``worker_outcome``):
    the "applied by N instances" of a delegated action. Pure: events in, counts out."""

    def __init__(self) -> None:
        self._instances: dict[str, set[str]] = {}

    def add(self, event: Mapping[str, Any]) -> int:
        """Count one worker_outcome; the number of distinct instances of its action so far."""
        seen = self._instances.setdefault(str(event.get("action_id", "")), set())
        seen.add(str(event.get("instance", "?")))
        return len(seen)

    def applied_by(self, action_id: str) -> int:
        return len(self._instances.get(action_id, ()))


def _worker_row(event: Mapping[str, Any], applied_by: int) -> tuple[str, str, str]:
    """target, result and detail of a worker_outcome row."""
    topic, partition = event.get("topic"), event.get("partition")
    target = f"topic:{topic}/{partition}" if topic is not None else f"scope:{event.get('group')}"
    extra = [f"{k} {event[k]}" for k in ("lanes", "pool", "offset") if k in event]
    detail = f"applied by {applied_by} instance{'s' if applied_by != 1 else ''}"
    detail += f" (this: {event.get('instance', '?')}{', ' if extra else ''}{', '.join(extra)})"
    return target, str(event.get("did", "?")), detail


def _row(
    topic: str, event: Mapping[str, Any], key: Verifier | None, applied_by: int = 0
) -> list[str]:
    """One table row: when, what, target, result or mode, id, detail."""
    if event.get("event") == "worker_outcome":
        at, what = event.get("at", 0), str(event.get("action_type", "?"))
        target, state, detail = _worker_row(event, applied_by)
        when = datetime.fromtimestamp(int(at) / 1000, UTC).strftime("%H:%M:%S.%f")[:-3]
        ident = str(event.get("action_id", ""))
        return [when, topic, what, target, state, "", ident[:12], detail]
    if event.get("event") == "outcome":
        at, what = event.get("at", 0), event.get("action_type", "?")
        state = str(event.get("result", "?"))
        detail = event.get("reason") or (event.get("error") or {}).get("message", "")
        ident, sig = str(event.get("action_id", "")), ""
    else:
        at, what = event.get("issued_at", 0), str(event.get("type", "?"))
        state = str(event.get("mode", "?"))
        detail = params_text(event.get("params"))
        ident, sig = str(event.get("id", "")), "?"
        if key is not None:
            try:
                verify(event, key)
                sig = "ok"
            except EventError:
                sig = "BAD"
    when = datetime.fromtimestamp(int(at) / 1000, UTC).strftime("%H:%M:%S.%f")[:-3]
    return [when, topic, what, str(event.get("target", "")), state, sig, ident[:12], str(detail)]


def params_text(params: Any) -> str:
    """An action's parameters as ``key=value`` pairs (``replicas=4 partitions=8``), the ones
    not set left out: what an operator reads, not a Python dict's repr."""
    if not isinstance(params, Mapping):
        return "" if params is None else str(params)
    return " ".join(f"{k}={v}" for k, v in params.items() if v is not None)


def parse_since(text: str) -> float:
    """``90``, ``90s``, ``10m``, ``2h`` or ``1d`` as seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    text = text.strip().lower()
    scale = units.get(text[-1:], 0)
    number = text[:-1] if scale else text
    try:
        value = float(number) * (scale or 1)
    except ValueError:
        raise ValueError(f"--since {text!r}: use seconds or a duration like 90s, 10m, 2h") from None
    if value < 0:
        raise ValueError(f"--since {text!r}: must not be negative")
    return value


def event_group(event: Mapping[str, Any]) -> str | None:
    """The consumer group an action is about (params.group, a halt's scope, reason.group)."""
    params = event.get("params")
    reason = event.get("reason")
    params = params if isinstance(params, Mapping) else {}
    reason = reason if isinstance(reason, Mapping) else {}
    for value in (params.get("group"), params.get("scope"), reason.get("group")):
        if isinstance(value, str):
            return value
    return None


class TailFilter:
    """Which events ``tail`` shows: by type and by group. An outcome has no group of its
    own: it takes its action's (actions come before their outcomes on the topics)."""

    def __init__(self, groups: Sequence[str] = (), types: Sequence[str] = ()) -> None:
        self.groups, self.types = set(groups), set(types)
        self._action_groups: dict[str, str | None] = {}

    def __call__(self, event: Mapping[str, Any]) -> bool:
        if event.get("event") == "worker_outcome":
            kind, group = event.get("action_type"), event.get("group")
        elif event.get("event") == "outcome":
            kind = event.get("action_type")
            group = self._action_groups.get(str(event.get("action_id")), event.get("group"))
        else:
            kind, group = event.get("type"), event_group(event)
            self._action_groups[str(event.get("id"))] = group
        if self.types and kind not in self.types:
            return False
        return not self.groups or group in self.groups


def _start_positions(consumer: Any, args: argparse.Namespace, names: Sequence[str]) -> list[Any]:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition

    wanted = partitions_at_end(consumer, names, bootstrap=args.bootstrap,
                               timeout_s=args.connect_timeout_s,
                               missing="the pipeline creates it (lagpilot run), or pass the "
                               "right --topic / --outcomes-topic")  # fmt: skip
    if args.from_beginning:
        return [TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING) for tp in wanted]
    if args.since is not None:
        found = positions_since(consumer, wanted, parse_since(args.since), args.connect_timeout_s)
        # no message after the time: the end (offset -1 means "none", not "from the start")
        return [tp if tp.offset >= 0 else TopicPartition(tp.topic, tp.partition, OFFSET_END)
                for tp in found]  # fmt: skip
    return wanted


def tail(args: argparse.Namespace) -> int:
    """Print the events of the control and outcomes topics until --max or --idle-exit."""
    from confluent_kafka import KafkaError

    if args.since is not None:
        parse_since(args.since)  # a usage error before any I/O
    try:
        key: Verifier | None = load_verifier(args.env)
    except ConfigError:
        key = None  # the table still shows events; the sig column says "?"
    for name in (args.topic, args.outcomes_topic):
        connect(args.bootstrap, args.kafka, args.connect_timeout_s, topic=name)
    consumer = reader(args.bootstrap, args.kafka, "control-tail")
    keep = TailFilter(args.group or (), args.type or ())
    tally = InstanceTally()
    try:
        consumer.assign(_start_positions(consumer, args, sorted({args.topic, args.outcomes_topic})))
        if not args.json:
            print(format_row([name for name, _ in COLUMNS]), flush=True)
        shown, idle_since = 0, time.monotonic()
        while args.max is None or shown < args.max:
            if args.idle_exit is not None and time.monotonic() - idle_since > args.idle_exit:
                break
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    log.warning("reading %s: %s", msg.topic(), msg.error())
                continue
            idle_since = time.monotonic()
            try:
                event = decode(msg.value() or b"")
            except EventError as exc:
                log.warning("skipped a malformed event at %s/%s@%s: %s",
                            msg.topic(), msg.partition(), msg.offset(), exc)  # fmt: skip
                continue
            if not keep(event):
                continue
            applied_by = tally.add(event) if event.get("event") == "worker_outcome" else 0
            if args.json:
                extra = {"applied_by": applied_by} if applied_by else {}
                print(orjson.dumps({"topic": msg.topic(), **event, **extra}).decode(), flush=True)
            else:
                print(format_row(_row(str(msg.topic()), event, key, applied_by)), flush=True)
            shown += 1
    finally:
        consumer.close()
    return 0
