"""High watermarks with one ListOffsets request per leader broker per tick.

confluent-kafka's ``AdminClient.list_offsets`` sends one request per broker too, but its
Python side builds a future (with a lock and a condition) per partition, validates every
partition in Python and hands back one result object each: 88.5 ms of CPU a tick at 2,500
partitions, 0.35 core at 250 ms sampling (``make bench-list-offsets``,
``bench/results/list_offsets.json``). kafka-python's public ``KafkaConsumer.end_offsets``
groups the partitions by leader, sends one ``ListOffsets`` per broker and returns a plain
dict: 20.6 ms, 4.3x less. A consumer with no group, that never subscribes or fetches: it only
asks for offsets.

It answers all or nothing (a partition whose leader is gone makes the call fail after its
retries); the sampler then takes the AdminClient's way for a while, which reports such a
partition alone (-1 in its topic's message).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from schemas.runtime.kafka import KAFKA_PYTHON_NAMES, kafka_python_unsupported


def kafka_python_config(broker_config: Mapping[str, Any]) -> dict[str, Any] | None:
    """kafka-python's arguments for a librdkafka config, or None when one of its TLS/SASL
    settings has no kafka-python equivalent (the sampler keeps to the AdminClient then)."""
    if kafka_python_unsupported(broker_config):
        return None
    out: dict[str, Any] = {"bootstrap_servers": str(broker_config["bootstrap.servers"])}
    for key, value in broker_config.items():
        if key in KAFKA_PYTHON_NAMES:
            out[KAFKA_PYTHON_NAMES[key]] = value
    if "client.id" in broker_config:
        out["client_id"] = str(broker_config["client.id"])
    return out


class BrokerListOffsets:
    """``latest(partitions)``: the high watermark of each, one request per leader broker.

    Built lazily: the consumer connects when it is made, and ``setup()`` must do no I/O.
    """

    def __init__(self, config: Mapping[str, Any], request_timeout_ms: int) -> None:
        self.config = dict(config)
        self.request_timeout_ms = request_timeout_ms
        self._consumer: Any = None

    def latest(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """High watermarks (read_uncommitted: not the last stable offset); raises when any
        partition did not answer within the request timeout."""
        from kafka import TopicPartition

        if self._consumer is None:
            from kafka import KafkaConsumer

            self._consumer = KafkaConsumer(
                group_id=None,
                enable_auto_commit=False,
                request_timeout_ms=max(self.request_timeout_ms + 1000, 5000),
                **self.config,
            )
        tps = [TopicPartition(t, p) for t, p in partitions]
        ends = self._consumer.end_offsets(tps, timeout_ms=self.request_timeout_ms)
        return {(tp.topic, tp.partition): int(off) for tp, off in ends.items()}

    def close(self) -> None:
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            consumer.close(autocommit=False)
