"""The two ways a sampler tick asks every watched partition's high watermark, and the
fallback from the first to the second.

- Per broker (``pipeline.read.list_offsets``: one ListOffsets request per leader, sent
  with kafka-python's network client), the default.
- ``AdminClient.list_offsets`` (a future per partition, several times the CPU), where
  kafka-python cannot connect (for a while after a failure that waiting may fix, the pause
  doubling up to a cap; for good after one it cannot), or with
  ``list_offsets_per_broker=False``.

A part of ``HighWatermarkSource`` (``pipeline.read.watermarks``), built in its
``setup()`` in the process that samples. Its failures are counted in the sampler's stats
and logged through the sampler's own rate-limited log (passed in): an outage logs once
per stats interval, whichever way failed.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Mapping
from typing import Protocol

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from pipeline.read.list_offsets import BrokerListOffsets
from pipeline.read.sampling import SamplerStats, error_kind, is_retriable

logger = logging.getLogger(__name__)

#: Ticks the sampler asks per partition (AdminClient) after kafka-python could not connect,
#: doubled after each failure in a row up to the cap.
BY_BROKER_PAUSE_TICKS = 20
BY_BROKER_PAUSE_MAX_TICKS = 2400

#: The AdminClient's answer: the offsets that answered, the failures by kind, the first one.
PartitionOffsets = tuple[dict[tuple[str, int], int], dict[str, int], BaseException | None]


class Fail(Protocol):
    """The sampler's failure: counted under ``where`` and its kind, logged (limited)."""

    def __call__(self, where: str, exc: BaseException, then: str) -> None: ...


class LogLimited(Protocol):
    """The sampler's log, at most once per stats interval per ``key``."""

    def __call__(self, key: str, level: int, msg: str, *args: object) -> None: ...


class ListOffsetsWays:
    """The per-broker way while it can connect, else the AdminClient's, over one watch set.

    ``by_broker`` is None when the per-broker way is off or kafka-python has no equivalent
    of a TLS/SASL setting (then the AdminClient's way serves from the start)."""

    def __init__(
        self,
        admin: AdminClient,
        by_broker: BrokerListOffsets | None,
        request_timeout_ms: int,
        stats: SamplerStats,
        fail: Fail,
        log_limited: LogLimited,
    ) -> None:
        self.admin = admin
        self.by_broker = by_broker
        self.request_timeout_ms = request_timeout_ms
        self._stats = stats
        self._fail = fail
        self._log_limited = log_limited
        self._request: dict[TopicPartition, OffsetSpec] = {}  # the AdminClient's way
        self._stable: dict[str, tuple[int, ...]] = {}  # asked by the per-broker way only
        self._by_broker_resume_tick = 0
        self._by_broker_pause_ticks = BY_BROKER_PAUSE_TICKS

    @property
    def partitions(self) -> int:
        """How many partitions a tick asks."""
        return len(self._request)

    def watch(
        self,
        watched: Mapping[str, tuple[int, ...]],
        before: Mapping[str, tuple[int, ...]],
        stable: Mapping[str, tuple[int, ...]] | None = None,
    ) -> None:
        """Ask for ``watched`` (topic -> each partition's leader) from the next tick on;
        ``before`` is the watch set asked until now. ``stable`` (same shape): topics whose
        last stable offsets the per-broker way asks too, in the same round (the AdminClient's
        way asks one isolation level per call: it leaves them out, and they are -1)."""
        if {t: len(v) for t, v in watched.items()} != {t: len(v) for t, v in before.items()}:
            spec = OffsetSpec.latest()
            self._request = {
                TopicPartition(t, p): spec
                for t, leaders in watched.items()
                for p in range(len(leaders))
            }
        stable = dict(stable or {})
        if self.by_broker is not None and (watched != before or stable != self._stable):
            # a request per leader (and isolation level): leaders count
            self.by_broker.set_partitions(watched, stable)
        self._stable = stable

    def per_broker(self) -> BrokerListOffsets | None:
        """The per-broker way (``pipeline.read.list_offsets``), connected; None when it is
        off, or kafka-python cannot connect (the AdminClient's way serves: for a while
        after a failure that waiting may fix, for good after one it cannot)."""
        fast = self.by_broker
        if fast is None or self._stats.ticks < self._by_broker_resume_tick:
            return None
        try:
            if not fast.connect():  # the bootstrap goes on at the next tick
                return None
        except Exception as exc:  # kafka-python raises several kinds: all mean "not here"
            self._stats.count_error("list_offsets_by_broker", error_kind(exc))
            if not is_retriable(exc):
                fast.close()
                self.by_broker = None
                logger.warning(
                    "kafka-python cannot connect with broker_config (%s: %s): the sampler "
                    "asks per partition (AdminClient, 4x the CPU) from now on; fix the "
                    "security settings, or set LAGPILOT_LIST_OFFSETS_PER_BROKER=false to "
                    "ask that way from the start",
                    error_kind(exc),
                    exc,
                )
                return None
            pause = self._by_broker_pause_ticks
            self._by_broker_resume_tick = self._stats.ticks + pause
            self._by_broker_pause_ticks = min(2 * pause, BY_BROKER_PAUSE_MAX_TICKS)
            self._log_limited(
                "list_offsets_by_broker",
                logging.WARNING,
                "kafka-python could not connect (%s: %s); the next %d ticks ask per "
                "partition (AdminClient)",
                error_kind(exc),
                exc,
                pause,
            )
            return None
        self._by_broker_pause_ticks = BY_BROKER_PAUSE_TICKS
        return fast

    def by_partition(self) -> PartitionOffsets | None:
        """``AdminClient.list_offsets``: the offsets that answered, the failures by kind and
        the first failure; None when the call itself failed (counted and logged)."""
        timeout_s = self.request_timeout_ms / 1000
        try:
            futures = self.admin.list_offsets(
                self._request,
                isolation_level=IsolationLevel.READ_UNCOMMITTED,  # the high watermark, not LSO
                request_timeout=timeout_s,
            )
        except (KafkaException, ValueError, TypeError) as exc:
            self._fail("list_offsets", exc, "retrying with backoff")
            return None
        concurrent.futures.wait(futures.values(), timeout=timeout_s + 1.0)
        offsets: dict[tuple[str, int], int] = {}
        failed: dict[str, int] = {}
        first_exc: BaseException | None = None
        for tp, fut in futures.items():
            err = fut.exception(timeout=0) if fut.done() else TimeoutError()
            if err is None:
                offsets[(tp.topic, tp.partition)] = fut.result().offset
            else:
                kind = error_kind(err)
                failed[kind] = failed.get(kind, 0) + 1
                first_exc = first_exc or err
        return offsets, failed, first_exc

    def close(self) -> None:
        """Close the per-broker way's connections (the AdminClient needs no closing)."""
        if self.by_broker is not None:
            self.by_broker.close()
