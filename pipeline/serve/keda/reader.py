"""The scaler's inputs from the broker: ``lagpilot.lag`` and the groups' membership.

``LagTopicReader`` assigns every partition of ``lagpilot.lag`` itself (no group: any
number of scaler replicas read the whole topic side by side, and none waits for a
rebalance), starting ``lookback_s`` back, so a restarted scaler has every partition's last
snapshot and the recent summaries at once. ``MembershipPoller`` asks the broker how many
members of each served group hold partitions of its topic: the consumers whose measured
rate the capacity rule divides by.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, Self

from runtime.cli import unreachable_sentence
from schemas import EventError, decode, topics

log = logging.getLogger("lagpilot.scaler")


class _Reading:
    """What both inputs share: the broker's client settings and a daemon thread running
    ``_run`` from ``start`` until ``stop``."""

    def __init__(self, broker_config: dict[str, Any], thread_name: str) -> None:
        self.config = broker_config
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        raise NotImplementedError


class LagTopicReader(_Reading):
    def __init__(
        self,
        broker_config: dict[str, Any],
        on_event: Callable[[dict[str, Any]], None],
        lookback_s: float = 35.0,
        on_bad: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(broker_config, "lag-reader")
        self.on_event = on_event
        self.on_bad = on_bad or (lambda: None)
        self.lookback_s = lookback_s
        self.caught_up = threading.Event()
        self.last_event_at = 0.0

    def _run(self) -> None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        consumer = Consumer(
            {
                **self.config,
                "group.id": f"lagpilot-scaler-{uuid.uuid4().hex[:8]}",  # never joined
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 10,
                "enable.partition.eof": False,
            }
        )
        failures = 0
        try:
            while not self._stop.is_set():
                try:
                    md = consumer.list_topics(topics.LAG, timeout=5).topics.get(topics.LAG)
                    if md is not None and md.error is None and md.partitions:
                        start_ms = int((time.time() - self.lookback_s) * 1000)
                        wanted = [TopicPartition(topics.LAG, p, start_ms) for p in md.partitions]
                        at = consumer.offsets_for_times(wanted, timeout=10)
                        ends = {
                            p: consumer.get_watermark_offsets(
                                TopicPartition(topics.LAG, p), timeout=10
                            )[1]
                            for p in md.partitions
                        }
                        break
                except KafkaException as exc:
                    if failures % 60 == 0:  # once a minute at one try a second
                        where = str(self.config.get("bootstrap.servers", "?"))
                        log.warning("%s", unreachable_sentence(where, str(exc)))
                    failures += 1
                else:
                    if failures % 60 == 0:
                        log.info("waiting for %s (is the pipeline running?)", topics.LAG)
                    failures += 1
                self._stop.wait(1.0)
            else:
                return
            # a partition with nothing since the start time: read from its end
            assigned = [
                tp
                if tp.offset >= 0
                else TopicPartition(topics.LAG, tp.partition, ends[tp.partition])
                for tp in at
            ]
            consumer.assign(assigned)
            behind = {
                tp.partition: ends[tp.partition]
                for tp in assigned
                if tp.offset < ends[tp.partition]
            }
            if not behind:
                self.caught_up.set()
            while not self._stop.is_set():
                msg = consumer.poll(0.05)
                if msg is None:
                    continue
                if msg.error():
                    continue
                p, off = msg.partition(), msg.offset()
                if p in behind and off + 1 >= behind[p]:
                    del behind[p]
                    if not behind:
                        self.caught_up.set()
                try:
                    ev = decode(msg.value() or b"")
                except EventError:
                    self.on_bad()
                    continue
                self.last_event_at = time.time()
                self.on_event(ev)
        finally:
            consumer.close()


class MembershipPoller(_Reading):
    """Every ``interval_s``: members of each served group holding partitions of its topic."""

    def __init__(
        self,
        broker_config: dict[str, Any],
        served: Callable[[], set[tuple[str, str]]],
        report: Callable[[tuple[str, str], int | None], None],
        interval_s: float = 5.0,
    ) -> None:
        super().__init__(broker_config, "membership")
        self.served = served
        self.report = report
        self.interval_s = interval_s

    def _run(self) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(self.config)
        wait_s = 0.0
        while not self._stop.wait(wait_s):
            wait_s = self.interval_s
            served = self.served()
            groups = sorted({g for g, _ in served})
            if not groups:
                continue
            try:
                futures = admin.describe_consumer_groups(groups, request_timeout=5)
            except Exception as exc:  # reported, retried next round
                log.warning("describe_consumer_groups failed: %s", exc)
                continue
            for group, fut in futures.items():
                try:
                    desc = fut.result(timeout=10)
                except Exception as exc:  # one group's failure is its own
                    log.warning("cannot describe group %s: %s", group, exc)
                    for g, t in served:
                        if g == group:
                            self.report((g, t), None)
                    continue
                for g, t in served:
                    if g != group:
                        continue
                    n = sum(
                        1
                        for m in desc.members
                        if m.assignment
                        and any(tp.topic == t for tp in m.assignment.topic_partitions)
                    )
                    self.report((g, t), n)
