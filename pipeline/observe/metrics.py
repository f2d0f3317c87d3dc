"""Prometheus metrics of the pipeline, and its /metrics, /healthz and /readyz endpoints.

Per-partition gauges are not ``Gauge.labels(...).set()`` calls on every tick (at 50,000
group-partitions and 4 ticks a second that alone would eat a core): the model keeps its
latest observation per topic, and ``LagCollector`` writes those arrays as exposition text
only when Prometheus scrapes (in a child process: ``pipeline.observe.exposition``).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from pipeline.model.events import TopicObservation
from pipeline.observe.exposition import FAMILIES, Chunk, LabelCache, LagColumns, render_chunks
from pipeline.observe.render_process import RenderError, RenderProcess
from runtime.http import HealthServer
from schemas import ActionType, Mode

__all__ = ["FAMILIES", "BrokerProbe", "HealthServer", "LagCollector", "PipelineMetrics"]

log = logging.getLogger(__name__)

#: Where a message can be skipped as unreadable (``pipeline.app``'s error callbacks).
BAD_MESSAGE_STAGES = ("read", "process")


class LagCollector:
    """Exports the latest observation of every topic, rendered at scrape time.

    The exposition text is written straight from the (groups x partitions) arrays: going
    through prometheus_client's metric objects takes seconds per scrape at tens of thousands
    of group-partitions, holding the GIL against the model. A topic not refreshed for
    ``stale_after_s`` is dropped: every modelled topic gets a sample per tick, so silence
    means this replica no longer owns it (a rebalance moved it, or it is gone). Only the
    columns the families show are kept (``LagColumns``: 8 of an observation's 16 arrays).
    """

    def __init__(self, stale_after_s: float = 10.0, process: RenderProcess | None = None) -> None:
        self._latest: dict[str, tuple[LagColumns, float]] = {}
        self._labels = LabelCache()  # for the scrapes rendered here (shared: see LabelCache)
        self._lock = threading.Lock()
        self.stale_after_s = stale_after_s
        self.process = process

    def update(self, obs: TopicObservation | LagColumns) -> None:
        columns = LagColumns.of(obs)
        with self._lock:
            self._latest[obs.topic] = (columns, time.monotonic())

    def forget_topic(self, topic: str) -> None:
        with self._lock:
            self._latest.pop(topic, None)

    def snapshot(self) -> list[LagColumns]:
        cutoff = time.monotonic() - self.stale_after_s
        with self._lock:
            for topic in [t for t, (_, at) in self._latest.items() if at < cutoff]:
                del self._latest[topic]
            return [o for o, _ in self._latest.values()]

    def stream(self, names: frozenset[str] | None = None) -> Iterator[Chunk]:
        """The lag families in Prometheus' text format (only ``names``, if given), in
        chunks: from the render process if there is one (``pipeline.observe.render_process``),
        else written here, as also when the process fails before its first chunk. A failure
        after it raises: the scrape fails rather than look whole with series missing."""
        if names is not None and not any(name in names for name, _ in FAMILIES):
            return  # a scrape of other families: nothing to send to the child
        observations = self.snapshot()
        if self.process is not None:
            sent = False
            try:
                with contextlib.closing(self.process.stream(observations, names)) as chunks:
                    for chunk in chunks:
                        sent = True
                        yield chunk
                return
            except RenderError as exc:
                if sent:
                    raise
                log.warning("metrics render process: %s; rendering in-process", exc)
        self._labels.keep(o.topic for o in observations)
        yield from render_chunks(observations, names, self._labels)

    def render(self, names: frozenset[str] | None = None) -> bytes:
        """``stream`` as one text (each chunk copied: the render process's chunks are views
        of one buffer)."""
        return b"".join(bytes(chunk) for chunk in self.stream(names))


class PipelineMetrics:
    """Every metric the pipeline exports, on its own registry (tests make many)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.lag = LagCollector()  # rendered after the registry by HealthServer(extra=...)
        self.records = Counter(
            "lagpilot_coordinator_records_total",
            "__consumer_offsets records decoded, by kind (and lagpilot.progress rows: progress).",
            ["kind"],
            registry=r,
        )
        self.share_positions = Counter(
            "lagpilot_share_positions_total",
            "Share-partition positions (KIP-932 share groups) read from the broker and passed "
            "to the model, and deletions of share-partitions gone.",
            registry=r,
        )
        self.share_read_errors = Counter(
            "lagpilot_share_group_read_errors_total",
            "Reads of the share groups' state that failed (read again at the next interval).",
            registry=r,
        )
        self.decode_skipped = Counter(
            "lagpilot_decode_skipped_total",
            "__consumer_offsets records skipped (unknown type/version, malformed), by kind.",
            ["reason", "record_type", "version"],
            registry=r,
        )
        self.own_group_filtered = Counter(
            "lagpilot_own_group_commits_filtered_total",
            "Commits of lagpilot's own consumer groups, ignored (feedback loop).",
            registry=r,
        )
        self.model_inputs = Counter(
            "lagpilot_model_inputs_total",
            "Messages the lag model consumed, by event (watermarks, commit, offset_deleted; "
            "commit_rejected: a commit to a partition the topic cannot have).",
            ["event"],
            registry=r,
        )
        self.samples = Counter(
            "lagpilot_watermark_samples_total",
            "Watermark samples modelled (one per topic per tick).",
            registry=r,
        )
        self.sampler_errors = Counter(
            "lagpilot_sampler_errors_total",
            "Watermark sampler errors, by where and kind (where=align: a sample dropped "
            "because the commits reader was behind).",
            ["where", "kind"],
            registry=r,
        )
        self.record_reads = Counter(
            "lagpilot_record_reads_total",
            "Timestamps of records at committed offsets read where the HWM history could not "
            "answer, by result (read; miss: no record within the timeout; dropped: over the "
            "rate, asked again later).",
            ["result"],
            registry=r,
        )
        self.processing_delay = Histogram(
            "lagpilot_processing_delay_seconds",
            "Wall time from a watermark sample to its modelled lag (pipeline behind-ness).",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.lag_events = Counter(
            "lagpilot_lag_events_total",
            "Events published to lagpilot.lag, by kind and status.",
            ["event", "status"],
            registry=r,
        )
        self.actions = Counter(
            "lagpilot_actions_total",
            "Actions the policy published to lagpilot.control, by type and mode.",
            ["type", "mode"],
            registry=r,
        )
        # Every (type, mode) at 0 from the start: a counter born at 1 shows no increase(),
        # so the dashboard's "Actions published per minute" would miss each first action.
        for kind in ActionType:
            for mode in (Mode.RECOMMEND, Mode.ACT):
                self.actions.labels(kind.value, mode.value)
        self.bad_messages = Counter(
            "lagpilot_bad_messages_total",
            "Messages skipped because they could not be read or processed, by stage.",
            ["stage"],
            registry=r,
        )
        for stage in BAD_MESSAGE_STAGES:  # 0 from the start: a rate and an alert see them
            self.bad_messages.labels(stage)
        self.policy_halted = Gauge(
            "lagpilot_policy_halted", "1 while the kill switch is on.", registry=r
        )
        self.topics_modelled = Gauge(
            "lagpilot_topics_modelled", "Topics this replica models.", registry=r
        )
        # the topics whose observation is fresh, read at scrape time
        self.topics_modelled.set_function(lambda: len(self.lag.snapshot()))
        self.last_sample_age = Gauge(
            "lagpilot_last_sample_age_seconds",
            "Seconds since this replica last modelled a watermark sample.",
            registry=r,
        )
        self.input_backlog = Gauge(
            "lagpilot_input_backlog_records",
            "__consumer_offsets records this replica's reader has not read yet.",
            registry=r,
        )
        self.input_behind = Gauge(
            "lagpilot_input_behind_seconds",
            "Age of the last __consumer_offsets record read while a backlog waits (0: caught "
            "up). Above a few seconds the replica is behind: its lag figures are that old.",
            registry=r,
        )
        self.input_paused = Gauge(
            "lagpilot_input_paused",
            "1 while the reader is paused at LAGPILOT_MAX_BUFFERED_BYTES (output undelivered).",
            registry=r,
        )
        self.input_pauses = Counter(
            "lagpilot_input_pauses_total",
            "Times the reader paused at LAGPILOT_MAX_BUFFERED_BYTES.",
            registry=r,
        )
        self.group_members = Gauge(
            "lagpilot_group_members",
            "Members of each consumer group (group health).",
            ["group"],
            registry=r,
        )
        self.group_generation = Gauge(
            "lagpilot_group_generation",
            "Each group's generation (classic) or group epoch (KIP-848).",
            ["group"],
            registry=r,
        )
        self.group_rebalances = Counter(
            "lagpilot_group_rebalances_total",
            "Generation moves of each group seen since this pipeline started.",
            ["group"],
            registry=r,
        )
        self.group_storm = Gauge(
            "lagpilot_group_storm",
            "1 while a group is in a rebalance STORM (see docs/runbook.md).",
            ["group"],
            registry=r,
        )
        self.silent_workers = Gauge(
            "lagpilot_silent_worker_partitions",
            "Partitions whose SDK worker stopped reporting (hung or dead), by the member and "
            "host of its last report (0 once it reports again or its partitions are OK).",
            ["group", "member", "host"],
            registry=r,
        )
        self.share_group = Gauge(
            "lagpilot_share_group",
            "1 for a share group (KIP-932) on a topic it consumes: its lag series are those of "
            "a share group (join on group and topic); consumer groups have none.",
            ["group", "topic"],
            registry=r,
        )
        self._share_seen: dict[str, frozenset[str]] = {}  # topic -> its share groups shown
        # (group, topic, partition) -> (group, member, host) of a silent worker
        self._silent: dict[tuple[str, str, int], tuple[str, str, str]] = {}
        self._rebalances_seen: dict[str, int] = {}
        self._last_sample_wall = 0.0
        self.last_sample_age.set_function(
            lambda: time.time() - self._last_sample_wall if self._last_sample_wall else -1.0
        )

    def events_published(self, events: list[dict[str, Any]]) -> None:
        """Counted per batch (one ``labels()`` lookup per kind, not per event)."""
        for (event, status), n in collections.Counter(
            (e["event"], e.get("status", "")) for e in events
        ).items():
            self.lag_events.labels(event, status).inc(n)
        touched: set[tuple[str, str, str]] = set()
        for e in events:
            if e["event"] != "partition_lag":
                continue
            key = (e["group"], e["topic"], e["partition"])
            worker = e.get("worker")
            before = self._silent.pop(key, None)
            if before is not None:
                touched.add(before)
            if worker and worker.get("silent") and e["status"] != "OK":
                self._silent[key] = (e["group"], worker["member"], worker["host"])
                touched.add(self._silent[key])
        if touched:
            counts = collections.Counter(self._silent.values())
            for labels in touched:
                self.silent_workers.labels(*labels).set(counts.get(labels, 0))

    def group_health(self, event: dict[str, Any]) -> None:
        """One ``group_health`` event into the group gauges; a deleted group's are removed."""
        group = event["group"]
        if event["status"] == "DELETED":
            self._rebalances_seen.pop(group, None)
            for metric in (
                self.group_members,
                self.group_generation,
                self.group_rebalances,
                self.group_storm,
            ):
                with contextlib.suppress(KeyError):  # never set for this group
                    metric.remove(group)
            return
        self.group_members.labels(group).set(len(event["members"]))
        self.group_generation.labels(group).set(event["generation"])
        self.group_storm.labels(group).set(1 if event["status"] == "STORM" else 0)
        total = int(event["rebalances_total"])
        seen = self._rebalances_seen.get(group, 0)
        # a restarted source counts from 0 again: a lower total is a new run, not a rewind
        self.group_rebalances.labels(group).inc(total - seen if total >= seen else total)
        self._rebalances_seen[group] = total

    def share_groups_of(self, obs: TopicObservation) -> None:
        """``lagpilot_share_group`` for a topic's observation: its
        share groups on, those gone off. Nothing to do on a topic that never had one."""
        before = self._share_seen.get(obs.topic)
        if not obs.share_groups and before is None:
            return
        now = obs.share_groups.intersection(obs.groups)
        for group in now - (before or frozenset()):
            self.share_group.labels(group, obs.topic).set(1)
        self.forget_share_groups(obs.topic, keep=now)

    def forget_share_groups(self, topic: str, keep: frozenset[str] = frozenset()) -> None:
        """Removes the topic's ``lagpilot_share_group`` series but those of ``keep``."""
        for group in self._share_seen.pop(topic, frozenset()) - keep:
            with contextlib.suppress(KeyError):
                self.share_group.remove(group, topic)
        if keep:
            self._share_seen[topic] = keep

    def input_gauge(self, name: str, value: float) -> None:
        """One of the reader's gauges (``pipeline.read.counters.GAUGE_PREFIX``)."""
        gauge = {
            "input_backlog_records": self.input_backlog,
            "input_behind_seconds": self.input_behind,
            "input_paused": self.input_paused,
        }.get(name)
        if gauge is not None:
            gauge.set(value)

    def sample_modelled(self, sampled_at_ms: int) -> None:
        now = time.time()
        self._last_sample_wall = now
        self.samples.inc()
        self.processing_delay.observe(max(0.0, now - sampled_at_ms / 1000.0))


class BrokerProbe:
    """Readiness: the broker answered a metadata request within the last ``max_age_s``.

    Probed at most every ``interval_s`` from the HTTP thread, with a short timeout, so a
    dead broker turns /readyz false within seconds and a live one costs one request.
    """

    def __init__(self, broker_config: dict[str, Any], interval_s: float = 2.0) -> None:
        self._config = broker_config
        self._interval_s = interval_s
        self._checked = 0.0
        self._result: tuple[bool, str] = (False, "not checked yet")
        self._admin: Any = None
        self._lock = threading.Lock()

    def __call__(self) -> tuple[bool, str]:
        with self._lock:
            if time.monotonic() - self._checked >= self._interval_s:
                self._result = self._probe()
                self._checked = time.monotonic()
            return self._result

    def _probe(self) -> tuple[bool, str]:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        try:
            if self._admin is None:
                self._admin = AdminClient(self._config)
            md = self._admin.list_topics(timeout=1.5)
            return True, f"ready: {len(md.brokers)} broker(s)"
        except KafkaException as exc:
            return False, f"broker unreachable: {exc}"
