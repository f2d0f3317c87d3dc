"""HighWatermarkSource: every partition's high watermark, sampled on a fixed beat.

The lag model needs the log end of every watched partition every ``sample_interval_ms``
(250 ms by default), not only when a consumer commits. One tick is one ListOffsets request
per leader broker, all sent at once and answered per partition
(``pipeline.read.list_offsets``; ``AdminClient.list_offsets`` where kafka-python cannot
connect, or with ``list_offsets_per_broker=False``), and ONE message per topic carrying all
its partitions: per-message cost dominates in Python, so the cost must grow with topics,
not partitions (one message per partition would be 40,000 messages/s for 10,000
partitions at 250 ms).

Split the house way: the pure core (topic selection, building ``Watermarks`` from a
ListOffsets result, the tick schedule, backoff, error kinds) is ``pipeline.read.sampling``,
unit-tested without a broker; ``HighWatermarkSource`` here is the thin edge that talks to
the cluster and produces: its tick loop, metadata refresh and messages, with the two ways
it asks for offsets (and the fallback between them) in ``pipeline.read.list_offsets_ways``;
the ``lagpilot sample`` command is ``pipeline.commands.sample``.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from quixstreams.sources import Source

from pipeline.read.list_offsets import BrokerListOffsets, kafka_python_config
from pipeline.read.list_offsets_ways import ListOffsetsWays
from pipeline.read.sampling import (
    NS_PER_MS,
    STATS_HEADER,
    TOPIC_GONE_ERRORS,
    TOPOLOGY_ERRORS,
    SamplerStats,
    TopicSelector,
    backoff_ms,
    build_watermarks,
    cluster_from_metadata,
    error_kind,
    hwms_by_topic,
    is_retriable,
    keep_vanished,
    make_selector,
    next_deadline_ns,
    select_watched,
    wall_grid_anchor_ns,
)
from runtime.cli import (
    CLIENT_LOG,
    watch_client_logs,
)
from runtime.kafka import kafka_python_unsupported
from runtime.procs import die_with_parent
from schemas import ConfigError, encode

logger = logging.getLogger(__name__)

#: The shortest time between two metadata refreshes that partitions' errors ask for: a
#: deleted topic asks once, but a partition left without a leader asks every tick.
TOPOLOGY_REFRESH_MIN_MS = 1000
#: How long a topic missing from metadata snapshots is still sampled (at least 3 refreshes).
VANISHED_GRACE_MS = 15_000

#: Selects any topic, internal ones too: the ends topic (``__consumer_offsets``) is chosen by
#: name, its leaders built as a watched topic's are.
EVERY_TOPIC = TopicSelector(include=re.compile(".*"))

#: One tick's samples: (sample time ms, [(topic, encoded Watermarks)], header fields).
Tick = tuple[int, list[tuple[str, bytes]], dict[str, Any]]
#: A tick's header field: the last stable offset of each partition of ``ends_topic`` (by
#: partition, -1 where it did not answer), asked in the same round as the samples' high
#: watermarks: what was written to it before the samples were read is below it
ENDS_FIELD = "ends"


class HighWatermarkSource(Source):
    """A Quix Streams Source producing one ``Watermarks`` message per topic per tick.

    Message key = topic name, value = ``schemas.encode(Watermarks)``, timestamp = the
    sample time (the event time of a high watermark is when it was read, not when it was
    produced). The constructor holds plain data only: Quix pickles the source into a
    spawned process and the clients are built there, in ``setup()``.

    Broker trouble never kills the source: a failed ListOffsets or metadata call is
    logged, counted in ``stats()``, and retried with capped exponential backoff; a
    partition that fails alone is -1 in that tick's message. Only a configuration error
    (a bad regex, an unknown client property) stops it, because waiting cannot fix it.
    """

    def __init__(
        self,
        name: str,
        broker_config: Mapping[str, Any],
        include: str = ".*",
        exclude: str | None = None,
        *,
        exclude_internal: bool = True,
        sample_interval_ms: int = 250,
        metadata_refresh_ms: int = 5000,
        request_timeout_ms: int = 2000,
        backoff_initial_ms: int = 250,
        backoff_max_ms: int = 5000,
        stats_log_interval_ms: int = 60_000,
        list_offsets_per_broker: bool = True,
        shutdown_timeout: float = 10,
    ) -> None:
        super().__init__(name=name, shutdown_timeout=shutdown_timeout)
        if not str(broker_config.get("bootstrap.servers") or "").strip():
            raise ConfigError(
                "broker_config['bootstrap.servers'] is missing: pass the cluster address, "
                "e.g. {'bootstrap.servers': 'host:9092'} (plus any security.protocol/sasl.*)"
            )
        for key, value in (
            ("sample_interval_ms", sample_interval_ms),
            ("metadata_refresh_ms", metadata_refresh_ms),
            ("request_timeout_ms", request_timeout_ms),
            ("backoff_initial_ms", backoff_initial_ms),
            ("backoff_max_ms", backoff_max_ms),
            ("stats_log_interval_ms", stats_log_interval_ms),
        ):
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{key}={value!r}: set it to a positive integer (milliseconds)")
        make_selector(include, exclude, exclude_internal)  # fail here, not in the child
        self.broker_config = dict(broker_config)
        self.include, self.exclude, self.exclude_internal = include, exclude, exclude_internal
        self.sample_interval_ms = sample_interval_ms
        self.metadata_refresh_ms = metadata_refresh_ms
        self.request_timeout_ms = request_timeout_ms
        self.backoff_initial_ms = backoff_initial_ms
        self.backoff_max_ms = backoff_max_ms
        self.stats_log_interval_ms = stats_log_interval_ms
        self._log_level = logging.getLogger().getEffectiveLevel()
        self._stats = SamplerStats()
        # Built in setup(), in the process that samples (unpicklable or process-bound).
        self._admin: AdminClient | None = None
        self._selector: TopicSelector | None = None
        self._watched: dict[str, tuple[int, ...]] = {}
        self._vanished_since_ms: dict[str, int] = {}  # kept topics a snapshot left out
        self._answered_ms: dict[str, int] = {}  # kept topics: when a partition last answered
        self.list_offsets_per_broker = list_offsets_per_broker
        self._ways: ListOffsetsWays | None = None  # per broker, else the AdminClient
        self._refresh_now = True
        self._topology_moved = False  # a partition's error said so: re-read metadata soon
        # Set by the process that runs this sampler when several replicas share the work:
        # a topic is sampled only where ``owns_topic(topic)`` is true.
        self.owns_topic: Callable[[str], bool] | None = None
        # Set by the sampler's own process: a topic (``__consumer_offsets``) whose last
        # stable offsets each tick asks too, in its round (``ENDS_FIELD`` of the tick's
        # header fields): the commits reader holds the tick until it has read that far
        self.ends_topic: str | None = None
        self._ends_leaders: dict[str, tuple[int, ...]] = {}
        self._last_logged_ns: dict[str, int] = {}
        # Set where the sampler runs in a process of its own (``pipeline.read.sampler_process``):
        # each tick's messages go to it, as (sample time, [(topic, value)], header fields),
        # instead of being produced here: it holds each until the commits written before
        # the sample time are forwarded (a sample ahead of them shows healthy groups as
        # stopped), and drops it after ``align_timeout_s``.
        self.emit: Callable[[Tick], None] | None = None

    # -- lifecycle

    def setup(self) -> None:
        """Build the AdminClient; no network I/O, so an unreachable broker is not fatal."""
        if not logging.getLogger().handlers:  # a spawned child starts with bare logging
            logging.basicConfig(
                level=self._log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s"
            )
        self._selector = make_selector(self.include, self.exclude, self.exclude_internal)
        try:
            self._admin = AdminClient({**self.broker_config, "logger": CLIENT_LOG})
        except KafkaException as exc:
            raise ConfigError(
                f"broker_config is rejected by the Kafka client: {exc.args[0].str()}; "
                "fix or remove that key (librdkafka property names, e.g. 'sasl.mechanism')"
            ) from None
        config = kafka_python_config(self.broker_config)
        by_broker = None
        if self.list_offsets_per_broker and config is not None:
            # a tick waits a sample interval for every leader (a slow one's partitions are
            # -1); while none has answered, up to the request timeout
            by_broker = BrokerListOffsets(
                config, self.request_timeout_ms, wait_ms=self.sample_interval_ms
            )
        elif self.list_offsets_per_broker:
            logger.info(
                "sampling with the AdminClient (a future per partition): kafka-python has no "
                "equivalent of %s in broker_config",
                kafka_python_unsupported(self.broker_config),
            )
        self._ways = ListOffsetsWays(
            self._admin,
            by_broker,
            self.request_timeout_ms,
            self._stats,
            fail=self._fail,
            log_limited=self._log_limited,
        )

    def stats(self) -> dict[str, Any]:
        """The counters (see ``SamplerStats``): samples, errors by kind, durations."""
        return self._stats.as_dict()

    def run(self) -> None:
        """The tick loop: refresh metadata when due, sample, sleep to the next grid tick.

        Runs until ``stop()`` (SIGTERM from Quix in the child, or a call from a thread).
        After a tick in which nothing answered, the next one waits for the backoff.
        """
        die_with_parent()  # in Quix's source process: never outlive the pipeline
        watch_client_logs()  # its producer's client lines are detail here too
        interval_ns = self.sample_interval_ms * NS_PER_MS
        anchor = deadline = wall_grid_anchor_ns(time.monotonic_ns(), time.time_ns(), interval_ns)
        next_refresh = anchor
        topology_refresh_after = anchor
        refresh_failures = 0
        next_stats_log = anchor + self.stats_log_interval_ms * NS_PER_MS
        while self.running:
            now = time.monotonic_ns()
            if now < deadline:
                # Short naps so stop() (a signal in the child, a call in a thread) is seen.
                time.sleep(min(deadline - now, 50 * NS_PER_MS) / 1e9)
                continue
            moved = self._topology_moved and now >= topology_refresh_after
            if self._refresh_now or moved or now >= next_refresh:
                self._refresh_now = self._topology_moved = False  # a failure: its backoff
                topology_refresh_after = now + TOPOLOGY_REFRESH_MIN_MS * NS_PER_MS
                if self._refresh_metadata():
                    refresh_failures = 0
                    next_refresh = now + self.metadata_refresh_ms * NS_PER_MS
                else:
                    refresh_failures += 1
                    delay = backoff_ms(
                        refresh_failures, self.backoff_initial_ms, self.backoff_max_ms
                    )
                    next_refresh = now + delay * NS_PER_MS
            ok = self._sample()
            stats = self._stats
            stats.consecutive_failures = 0 if ok else stats.consecutive_failures + 1
            delay_ms = backoff_ms(
                stats.consecutive_failures, self.backoff_initial_ms, self.backoff_max_ms
            )
            after = time.monotonic_ns()
            deadline, skipped = next_deadline_ns(
                anchor, interval_ns, deadline, after, delay_ms * NS_PER_MS
            )
            stats.missed_ticks += skipped if ok else 0
            if after >= next_stats_log:
                logger.info("watermark sampler stats %s", orjson.dumps(self.stats()).decode())
                next_stats_log = after + self.stats_log_interval_ms * NS_PER_MS
        if self._ways is not None:
            self._ways.close()

    def run_alone(self, emit: Callable[[Tick], None]) -> None:
        """Sample outside Quix (no producer: each tick goes to ``emit``) until ``stop()``."""
        self.emit = emit
        self.setup()
        self._running = True  # what Quix's Source.start() sets before run()
        self.run()

    # -- one metadata refresh, one tick

    def request_refresh(self) -> None:
        """Re-read metadata (and ``owns_topic``) before the next tick."""
        self._refresh_now = True

    def _refresh_metadata(self) -> bool:
        """Re-read the cluster's topics; keep the old watch set if the broker fails us."""
        assert self._admin is not None and self._selector is not None
        try:
            metadata = self._admin.list_topics(timeout=self.request_timeout_ms / 1000)
        except KafkaException as exc:
            self._fail("metadata", exc, "keeping the previous topic list")
            return False
        cluster = cluster_from_metadata(metadata)
        watched = select_watched(cluster, self._selector)
        ends = self.ends_topic
        if ends is not None:
            # its leaders, as a watched topic's are; none while it is itself watched (the
            # high watermarks are asked for it then, not its ends: ticks go by the old rule)
            mine = {} if ends in watched else {ends: cluster.get(ends) or {}}
            self._ends_leaders = select_watched(mine, EVERY_TOPIC)
        grace_ms = max(VANISHED_GRACE_MS, 3 * self.metadata_refresh_ms)
        watched, self._vanished_since_ms = keep_vanished(
            watched,
            self._watched,
            self._vanished_since_ms,
            int(time.time() * 1000),
            grace_ms,
            self._answered_ms,
        )
        owns = self.owns_topic
        if owns is not None:  # replicas split the sampling: each topic has one sampler
            watched = {t: leaders for t, leaders in watched.items() if owns(t)}
        if watched.keys() != self._watched.keys():
            added = sorted(watched.keys() - self._watched.keys())
            dropped = sorted(self._watched.keys() - watched.keys())
            logger.info("watching %d topics (+%s -%s)", len(watched), added[:20], dropped[:20])
        self._set_watched(watched)
        self._stats.metadata_refreshes += 1
        return True

    def _set_watched(self, watched: dict[str, tuple[int, ...]]) -> None:
        assert self._ways is not None
        self._ways.watch(watched, self._watched, self._ends_leaders)
        self._watched = watched
        self._answered_ms = {
            t: ms for t, ms in self._answered_ms.items() if t in self._vanished_since_ms
        }
        self._stats.topics = len(watched)
        self._stats.partitions = self._ways.partitions  # (the watched topics': not the ends)

    def _drop_gone(self, hwms: Mapping[str, list[int]]) -> None:
        """A topic kept though metadata left it out (``keep_vanished``) goes at once when
        none of its partitions answered and the tick's errors say a topic is unknown:
        deleted, not a snapshot that lagged (a node that is down fails its partitions
        with transport errors; those topics wait for the grace)."""
        gone = [t for t in self._vanished_since_ms if max(hwms.get(t) or [-1]) < 0]
        if gone:
            for t in gone:
                del self._vanished_since_ms[t]
            logger.info("watching %d topics (-%s: gone)", len(self._watched) - len(gone), gone)
            self._set_watched({t: v for t, v in self._watched.items() if t not in gone})

    def _sample(self) -> bool:
        """One tick: one ListOffsets for every watched partition, one message per topic.

        Returns False when no partition answered (the caller backs off); partitions that
        failed alone are -1 in their topic's message and counted.
        """
        ways = self._ways
        assert ways is not None
        stats = self._stats
        stats.ticks += 1
        if not ways.partitions:
            return True
        fast = ways.per_broker()
        started_wall, started = time.time_ns(), time.perf_counter_ns()
        ends: list[int] | None = None
        if fast is not None:
            answer = fast.latest()
            hwms, failed, answered = answer.hwms, answer.failed, answer.answered
            first_exc = answer.first_error
            if self._ends_leaders:
                ends = hwms.pop(next(iter(self._ends_leaders)), None)
        else:
            by_partition = ways.by_partition()
            if by_partition is None:
                return False
            offsets, failed, first_exc = by_partition
            hwms, answered = hwms_by_topic(self._watched, offsets), len(offsets)
        # The sample time is the midpoint of the round trip: the broker read the offsets
        # somewhere inside it, and the midpoint halves the worst-case error.
        sampled_at_ms = (started_wall + time.time_ns()) // 2 // NS_PER_MS
        stats.last_sample_ms = round((time.perf_counter_ns() - started) / 1e6, 3)
        if failed:
            self._topology_moved |= not failed.keys().isdisjoint(TOPOLOGY_ERRORS)
            if not answered:
                self._fail(
                    "list_offsets",
                    first_exc or TimeoutError("no partition answered"),
                    "retrying with backoff",
                )
                return False
            for kind, n in failed.items():
                stats.count_error("partition", kind, n)
            self._log_limited(
                "partition",
                logging.WARNING,
                "ListOffsets failed for %d partitions %s; they are -1 this tick",
                sum(failed.values()),
                failed,
            )
        if self._vanished_since_ms:  # only kept topics need to say they are still there
            for topic in self._vanished_since_ms:
                if max(hwms.get(topic) or [-1]) >= 0:
                    self._answered_ms[topic] = sampled_at_ms
            if not failed.keys().isdisjoint(TOPIC_GONE_ERRORS):
                self._drop_gone(hwms)
        if self.emit is not None:  # the commits reader aligns and produces them
            stats.samples += 1
            built = build_watermarks(self._watched, hwms, sampled_at_ms)
            tick = [(wm.topic, encode(wm)) for wm in built]
            stats.messages += len(tick)
            fields = stats.header_fields()
            if ends is not None:
                fields[ENDS_FIELD] = ends
            self.emit((sampled_at_ms, tick, fields))
            stats.last_tick_ms = round((time.perf_counter_ns() - started) / 1e6, 3)
            return True
        stats.samples += 1
        header = [(STATS_HEADER, stats.header())]
        for wm in build_watermarks(self._watched, hwms, sampled_at_ms):
            try:
                self.produce(
                    value=encode(wm), key=wm.topic, headers=header, timestamp=sampled_at_ms
                )
            except Exception as exc:  # librdkafka/Quix raise several types; all mean "not sent"
                stats.count_error("produce", error_kind(exc))
                self._log_limited("produce", logging.WARNING, "produce failed: %r", exc)
            else:
                stats.messages += 1
        stats.last_tick_ms = round((time.perf_counter_ns() - started) / 1e6, 3)
        return True

    def _fail(self, where: str, exc: BaseException, then: str) -> None:
        kind = error_kind(exc)
        self._stats.count_error(where, kind)
        if is_retriable(exc):
            self._log_limited(
                where, logging.WARNING, "%s failed (%s): %s; %s", where, kind, exc, then
            )
        else:
            self._log_limited(
                where,
                logging.ERROR,
                "%s failed (%s, not retriable): %s; grant the sampler's "
                "principal Describe on the watched topics and check the security settings in "
                "broker_config; %s",
                where,
                kind,
                exc,
                then,
            )

    def _log_limited(self, key: str, level: int, msg: str, *args: object) -> None:
        """Log at most once per stats interval per key: an outage must not flood the log."""
        now = time.monotonic_ns()
        last = self._last_logged_ns.get(key)
        if last is None or now - last >= self.stats_log_interval_ms * NS_PER_MS:
            self._last_logged_ns[key] = now
            logger.log(level, msg, *args)
