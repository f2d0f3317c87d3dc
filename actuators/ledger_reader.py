"""The ledger read from the compacted outcomes topic: whole at start, then tailed.

Every actuator reads every outcome (read_committed), so an id applied by any of them is
a ``duplicate`` everywhere, and leases and the kill switch survive restarts.
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from actuators.ledger import Ledger
from schemas import EventError, decode

__all__ = ["REBUILD_TIMEOUT_S", "fold_new", "position", "read_ledger"]

log = logging.getLogger("lagpilot.actuator")

REBUILD_TIMEOUT_S = 60.0


def read_ledger(tail: Consumer, topic: str, timeout_s: float = REBUILD_TIMEOUT_S) -> Ledger:
    """Read ``topic`` from the beginning to its end into a fresh ledger; ``tail`` (with
    ``enable.partition.eof``) stays assigned, for :func:`fold_new`."""
    ledger = Ledger()
    md = tail.list_topics(topic, timeout=10)
    parts = md.topics[topic].partitions
    pending = set(parts)
    tail.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    deadline = time.monotonic() + timeout_s
    while pending:
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"could not read {topic} to its end in {timeout_s:.0f} s (partitions "
                f"{sorted(pending)} pending); is the broker healthy? an open transaction "
                "holds read_committed readers until it times out"
            )
        for msg in tail.consume(1000, timeout=0.5):
            err = msg.error()
            if err is not None and err.code() == KafkaError._PARTITION_EOF:
                pending.discard(msg.partition())
            elif err is None:
                _fold_message(ledger, msg)
    return ledger


def fold_new(tail: Consumer, ledger: Ledger) -> None:
    """Fold what arrived since the last call (other actuators' applies, releases, halts)."""
    for msg in tail.consume(1000, timeout=0):
        if msg.error() is None:
            _fold_message(ledger, msg)


def _fold_message(ledger: Ledger, msg: Message) -> None:
    try:
        value = msg.value()
        if value is None:
            return
        ledger.fold(decode(value))
    except (EventError, TypeError, ValueError):
        log.warning("skipped an unreadable outcome at %s", position(msg))


def position(msg: Message) -> str:
    """``topic/partition@offset``: where a record sits, for logs and rejected outcomes."""
    return f"{msg.topic()}/{msg.partition()}@{msg.offset()}"
