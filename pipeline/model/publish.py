"""The lag model's events onto ``lagpilot.lag``: one message each, produced as they are made.

A tick of a large topic makes hundreds of events (a ``group_lag`` summary per group each
second, the partitions' snapshots every 30 s): thousands a second at scale. Through Quix's
``expand`` and ``to_topic`` each event is a row of the dataframe (its own serializer calls,
key function, headers copied, producer wrapper), which at that rate takes a large share of
a core. ``LagEvents`` is a Quix sink that takes a message's events as one list and
produces each with a plain producer, several times cheaper per event. Delivery stays
at-least-once as ``to_topic``'s: Quix flushes its sinks at every checkpoint before it
commits the input offsets, and ``flush`` raises when an event was not delivered, so the
checkpoint is not committed and its messages are processed again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from quixstreams.sinks import BaseSink

from runtime.cli import CLIENT_LOG
from schemas.errors import LagpilotError

log = logging.getLogger(__name__)

#: how long a checkpoint waits for the events produced since the last one
FLUSH_TIMEOUT_S = 30.0


class LagPublishError(LagpilotError):
    """Events of the model were not delivered to ``lagpilot.lag`` by the checkpoint: the
    checkpoint is not committed, and its input is processed again (``retriable``)."""

    retriable = True
    hint = "check that the broker is reachable and the pipeline may write its lag topic"


class LagEvents(BaseSink):
    """``sdf.sink(LagEvents(...))`` after the lag operator (its events as one list per
    input message, not expanded). Each event goes to ``topic`` keyed by ``key(event)``,
    with the input message's timestamp, as ``to_topic`` would write it."""

    def __init__(
        self,
        broker_config: Mapping[str, Any],
        topic: str,
        key: Callable[[dict[str, Any]], str],
        *,
        producer_config: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.broker_config = dict(broker_config)
        # 10 ms of linger: events at thousands a second go in far fewer produce requests
        # for the broker; an event waits at most that long
        self.producer_config = dict(producer_config or {"linger.ms": 10})
        self.topic = topic
        self.key = key
        self._producer: Any = None
        self._failed: list[str] = []  # delivery errors since the last flush
        self.produced = 0

    def setup(self) -> None:
        from confluent_kafka import Producer

        self._producer = Producer(
            {**self.broker_config, **self.producer_config, "logger": CLIENT_LOG}
        )

    def _delivered(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self._failed.append(str(err))

    def add(
        self,
        value: Any,
        key: Any,
        timestamp: int,
        headers: Any,
        topic: str,
        partition: int,
        offset: int,
    ) -> None:
        if not value:
            return
        if self._producer is None:
            self.setup()
        produce, dumps, key_of = self._producer.produce, orjson.dumps, self.key
        for event in value:
            body, k = dumps(event), key_of(event)
            while True:
                try:
                    produce(self.topic, body, k, timestamp=timestamp, on_delivery=self._delivered)
                    break
                except BufferError:  # the local queue is full: let librdkafka send some
                    self._producer.poll(0.1)
        self.produced += len(value)
        self._producer.poll(0)

    def flush(self) -> None:
        if self._producer is None:
            return
        left = self._producer.flush(FLUSH_TIMEOUT_S)
        failed, self._failed = self._failed, []
        if left or failed:
            raise LagPublishError(
                f"{left} lag event(s) still queued after {FLUSH_TIMEOUT_S:.0f}s and "
                f"{len(failed)} not delivered to {self.topic} (first: "
                f"{failed[0] if failed else 'timed out'})"
            )

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(5)
            self._producer = None
