"""Control events for workers: which events on ``lagpilot.control`` this worker must obey.

``read_command`` is pure: bytes in, a ``Command`` or a rejection reason out, with ``now``
passed in. Every worker reads every control event (no consumer group: each instance must
obey, not one of them) and keeps only signed, schema-valid, unexpired ``act``-mode worker
actions addressed to its own group (halts and resumes: their scope covers the group, see
schemas/halts.py). Anything else is counted by reason
and skipped; a forged or malformed event never changes what a worker does.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from runtime import tracing
from runtime.backoff import backoff_s
from runtime.halts import read_in_force
from runtime.kafka import kafka_error
from schemas import (
    WORKER_ACTIONS,
    ActionType,
    ConfigError,
    EventError,
    Verifier,
    decode,
    encode,
    validate,
    verify,
)
from schemas.halts import halt_scope, halts_topic_for

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Command:
    """A worker action addressed to this group, checked and ready to apply."""

    action_id: str
    type: ActionType
    topic: str | None = None
    partition: int | None = None
    lanes: int | None = None
    pool: str | None = None  # spread_partition with a pool = hand the partition off to it
    expires_at: int = 0  # epoch ms; a remembered command is not obeyed after this
    scope: str | None = None  # halt/resume: its state key, e.g. "actions", "workload:<group>"

    @property
    def scope_kind(self) -> str | None:
        """``actions`` or ``workload`` for a halt/resume (schemas/halts.py), else None."""
        return None if self.scope is None else self.scope.split(":", 1)[0]


# why an event was not obeyed; each is a stats counter "control_<reason>"
ACCEPTED = "accepted"
DUPLICATE = "duplicate"
RECOMMEND = "recommend"
EXPIRED = "expired"
NOT_FOR_WORKERS = "not_for_workers"
OTHER_GROUP = "other_group"


def read_event(payload: bytes | None, key: Verifier) -> dict[str, Any] | str:
    """The control event, decoded, schema-valid and signed by ``key``; or the reason it is
    not (``EventError.reason``). Nothing is read from an event before this accepts it."""
    try:
        event = decode(payload or b"")
        validate(event)
        verify(event, key)
    except EventError as exc:
        return exc.reason
    return event


def read_command(payload: bytes | None, *, group: str, key: Verifier, now_ms: int) -> Command | str:
    """A ``Command`` for ``group``, or the reason the event is not for us / not acceptable.

    Order matters: authenticity before anything is read from the event, so a forged event
    is counted as forged even if it also names another group.
    """
    event = read_event(payload, key)
    if isinstance(event, str):
        return event
    try:
        kind = ActionType(event["type"])
    except ValueError:
        return NOT_FOR_WORKERS
    if kind not in WORKER_ACTIONS:
        return NOT_FOR_WORKERS
    if event["mode"] != "act":
        return RECOMMEND
    if event["expires_at"] < now_ms:
        return EXPIRED
    params: dict[str, Any] = event["params"]
    if kind in (ActionType.HALT, ActionType.RESUME):
        scope = halt_scope(params)
        if not scope.covers(group):
            return OTHER_GROUP
        return Command(event["id"], kind, expires_at=event["expires_at"], scope=scope.state_key)
    if params["group"] != group:
        return OTHER_GROUP
    return Command(
        event["id"],
        kind,
        topic=params["topic"],
        partition=params["partition"],
        lanes=params.get("lanes"),
        pool=params.get("pool"),
        expires_at=event["expires_at"],
    )


class SeenIds:
    """The last ``size`` action ids: a control event replayed or published twice acts once."""

    def __init__(self, size: int = 4096) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._size = size

    def add(self, action_id: str) -> bool:
        """True if new."""
        if action_id in self._ids:
            return False
        self._ids[action_id] = None
        if len(self._ids) > self._size:
            self._ids.popitem(last=False)
        return True


class ControlReader:
    """Reads the control topic with a group-less consumer, from ``replay_s`` before start.

    No consumer group, because every worker must see every event. It starts at the first
    event of the last ``replay_s`` seconds (``0``: at the end): a command is in force until it
    expires, so a worker restarted meanwhile obeys it too (expired ones are counted and
    skipped). A member that dies on a poisoned partition before it could record the
    hand-off (see handoff) comes back knowing that the partition is the pool's; without the
    replay it took the partition again and died again.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        group: str,
        key: Verifier,
        replay_s: float = 60.0,
        halts_topic: str | None = None,
        **config: Any,
    ) -> None:
        self.topic = topic
        self.replay_s = replay_s
        self.halts_topic = halts_topic or halts_topic_for(topic)
        self._pending: list[Command] = []  # halts in force at start, obeyed on the first poll
        self._group = group
        self._key = key
        self._config = {
            "bootstrap.servers": bootstrap,
            "group.id": f"lagpilot-worker-control-{group}",  # never joined, never committed
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            **config,
        }
        self._consumer: Consumer | None = None
        self._seen = SeenIds()
        self.counts: Counter[str] = Counter()
        self.trace_parents: dict[str, Any] = {}  # action id -> its trace context (tracing on)

    def start(self) -> None:
        consumer = Consumer(self._config)
        meta = consumer.list_topics(self.topic, timeout=10)
        info = meta.topics.get(self.topic)
        if info is None or info.error is not None or not info.partitions:
            consumer.close()
            raise ConfigError(
                f"control topic {self.topic!r} does not exist: create it (lagpilot's pipeline "
                "does on start) or pass control_topic= the topic your policy publishes to"
            )
        tps = []
        for p in sorted(info.partitions):
            try:
                high = _end_offset(consumer, TopicPartition(self.topic, p))
            except KafkaException as exc:
                consumer.close()
                raise ConnectionError(f"cannot read the end of {self.topic}[{p}]: {exc}") from exc
            tps.append(TopicPartition(self.topic, p, high))
        if self.replay_s > 0:
            tps = _replay_from(consumer, tps, int(time.time() * 1000 - self.replay_s * 1000))
        consumer.assign(tps)
        self._consumer = consumer
        self._pending = self._halts_in_force()

    def _halts_in_force(self) -> list[Command]:
        """The halts kept on the halts topic that still hold for this group: a worker started
        after a halt obeys it (schemas/halts.py)."""
        now_ms = int(time.time() * 1000)

        def accept(event: dict[str, Any]) -> dict[str, Any] | None:
            got = read_command(encode(event), group=self._group, key=self._key, now_ms=now_ms)
            return event if isinstance(got, Command) else None

        try:
            events = read_in_force(self._config, self.halts_topic, accept)
        except KafkaException as exc:
            raise ConnectionError(f"cannot read the halts in {self.halts_topic}: {exc}") from exc
        out = []
        for event in events:
            got = read_command(encode(event), group=self._group, key=self._key, now_ms=now_ms)
            if isinstance(got, Command) and self._seen.add(got.action_id):
                out.append(got)
                self.counts["replayed_halt"] += 1
        return out

    def poll(self, now_ms: int, max_events: int = 100) -> list[Command]:
        """Commands that arrived since the last call (non-blocking)."""
        if self._consumer is None:
            return []
        out, self._pending = self._pending, []
        for msg in self._consumer.consume(num_messages=max_events, timeout=0):
            if msg.error() is not None:
                self.counts["error"] += 1
                continue
            got = read_command(msg.value(), group=self._group, key=self._key, now_ms=now_ms)
            if isinstance(got, str):
                self.counts[got] += 1
                if got not in (OTHER_GROUP, NOT_FOR_WORKERS, RECOMMEND, EXPIRED):
                    log.warning(
                        "control event rejected at %s@%d: %s", self.topic, msg.offset(), got
                    )
                continue
            if not self._seen.add(got.action_id):
                self.counts[DUPLICATE] += 1
                continue
            self.counts[ACCEPTED] += 1
            if tracing.on():  # the action's trace, continued when the command is obeyed
                self.trace_parents[got.action_id] = tracing.parent_from(msg.headers())
            out.append(got)
        return out

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


_NO_LEADER_YET = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._TIMED_OUT,
}


def _replay_from(
    consumer: Consumer, ends: list[TopicPartition], since_ms: int
) -> list[TopicPartition]:
    """Each partition's first offset at or after ``since_ms`` (its end if none, or if the
    broker cannot say: a replay is a help, never a reason not to start)."""
    try:
        found = consumer.offsets_for_times(
            [TopicPartition(tp.topic, tp.partition, since_ms) for tp in ends], timeout=10
        )
    except KafkaException as exc:
        log.warning("control topic replay skipped: %s", exc)
        return ends
    by_part = {tp.partition: tp.offset for tp in found if tp.error is None}
    return [
        TopicPartition(tp.topic, tp.partition, by_part[tp.partition])
        if 0 <= by_part.get(tp.partition, -1) < tp.offset
        else tp
        for tp in ends
    ]


def _end_offset(consumer: Consumer, tp: TopicPartition, attempts: int = 20) -> int:
    """The partition's end offset, retried while the broker says it is retriable (a topic
    created a moment ago has no leader yet: NOT_LEADER_FOR_PARTITION)."""
    for attempt in range(attempts):
        try:
            _, high = consumer.get_watermark_offsets(tp, timeout=10)
            return int(high)
        except KafkaException as exc:
            err = kafka_error(exc)
            transient = err is not None and (err.retriable() or err.code() in _NO_LEADER_YET)
            if attempt == attempts - 1 or not transient:
                raise
            time.sleep(backoff_s(attempt, 0.05, 1.0))
    raise AssertionError("unreachable")
