"""Wiring of lagpilot's Quix Streams application: topics and dataframes, nothing else.

    __consumer_offsets --CommitsSource: decode, coalesce--> commits batches --+
    HighWatermarkSource -----------------> lagpilot.watermarks (key = topic) <-+
                                   |
                       LagOperator (state per topic) --> lagpilot.lag
                                   |  group_lag summaries, group_health
    lagpilot.control (halt/resume) -+
    lagpilot.outcomes (outcome) ----+--> lagpilot.policy (one key) --> PolicyOperator
    lagpilot.producers (rates) -----+        actions --> lagpilot.control
    lagpilot.requests (mcp) --------+        verification, request verdicts --> outcomes

Commits are re-keyed into ``lagpilot.watermarks`` itself, so the model reads ONE topic in
which a topic's samples and commits share a key and a partition: no stream join and no
time alignment between two inputs, one watermark message serves every partition, and one
commits message carries every group-partition's latest commit since the last flush.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping
from typing import Any

from quixstreams import Application
from quixstreams.kafka.configuration import ConnectionConfig
from quixstreams.models import TopicConfig
from quixstreams.state.rocksdb import RocksDBOptions

from pipeline.model.events import TopicObservation
from pipeline.model.group_health import GroupHealth
from pipeline.model.model_op import LagOperator, lag_key
from pipeline.model.publish import LagEvents
from pipeline.model.truth import ReadLimits, RecordTimeReader
from pipeline.observe.metrics import PipelineMetrics
from pipeline.read.backlog import BufferBudget
from pipeline.read.commits import CommitsConfig, CommitsSource
from pipeline.read.counters import GAUGE_PREFIX, CounterChannel, RunTotals
from pipeline.read.sampling import make_selector
from pipeline.read.watermarks import HighWatermarkSource
from pipeline.settings import Settings
from runtime import tracing
from schemas import topics

#: The state store's memory. Quix's defaults (64 MB memtables, up to 3, per store partition:
#: 16 of them here; a 1 GiB block cache) are sized for large state; the model's is a few
#: MB (positions, the HWM history, windows written every few seconds), and with those
#: defaults the memtables alone would grow a replica by up to 3 GB before they flush.
STATE_OPTIONS = RocksDBOptions(
    write_buffer_size=4 * 1024 * 1024,
    max_write_buffer_number=2,
    block_cache_size=64 * 1024 * 1024,
)


def policy_topic_name(consumer_group: str) -> str:
    """The policy's single-key input: internal to one pipeline (its consumer group)."""
    return f"{consumer_group}.policy"


class SourceStats:
    """Folds the commits source's counters (and its sampler's) into the Prometheus counters,
    by the increase since the last totals of the same run (``pipeline.read.counters``: they
    come from this replica's source alone, on a queue from its process)."""

    def __init__(self, metrics: PipelineMetrics) -> None:
        self.metrics = metrics
        self.totals = RunTotals()

    def fold(self, run: str, totals: dict[str, float]) -> None:
        gauges = {k: v for k, v in totals.items() if k.startswith(GAUGE_PREFIX)}
        for stat, value in gauges.items():
            self.metrics.input_gauge(stat.removeprefix(GAUGE_PREFIX), value)
        totals = {k: v for k, v in totals.items() if k not in gauges}
        for stat, delta in self.totals.increase(run, totals).items():
            self._count(stat, delta)

    def pump(self, channel: CounterChannel) -> None:
        """Folds what ``channel`` brings, for the life of the process (a daemon thread),
        or until the channel closes."""
        while True:
            try:
                got = channel.receive(timeout_s=1.0)
            except EOFError:
                return  # closed: the process is ending (not an error to print)
            if got is not None:
                self.fold(*got)

    def _count(self, stat: str, delta: float) -> None:
        m = self.metrics
        if stat.startswith("skipped|"):
            _, reason, record_type, version = stat.split("|")
            m.decode_skipped.labels(reason, record_type, version).inc(delta)
        elif stat == "own_group":
            m.own_group_filtered.inc(delta)
        elif stat == "read_errors":
            m.bad_messages.labels("read").inc(delta)
        elif stat == "input_pauses":
            m.input_pauses.inc(delta)
        elif stat == "share_position":
            m.share_positions.inc(delta)
        elif stat == "share_read_errors":
            m.share_read_errors.inc(delta)
        elif stat == "progress_malformed":
            m.bad_messages.labels("progress").inc(delta)
        elif stat in (
            "commit",
            "offset_deleted",
            "group_metadata",
            "group_removed",
            "consumer_group",
            "group_health",
            "progress",
        ):
            m.records.labels(stat).inc(delta)
        elif stat.startswith("sampler|"):
            where, _, kind = stat.removeprefix("sampler|").partition(":")
            m.sampler_errors.labels(where, kind).inc(delta)


def _skip_and_count(metrics: PipelineMetrics, stage: str) -> Any:
    """An error callback: a message that cannot be read or processed is logged, counted
    and skipped; one bad record never stops the pipeline."""

    def callback(exc: Exception, row: Any, logger: Any) -> bool:
        metrics.bad_messages.labels(stage).inc()
        where = ""
        if row is not None:
            t, p, o = (
                (row.topic(), row.partition(), row.offset())
                if callable(getattr(row, "topic", None))
                else (row.topic, row.partition, row.offset)
            )
            where = f" at {t}[{p}]@{o}"
        logger.warning("skipped a message%s (%s): %s", where, stage, exc)
        return True

    return callback


def quix_connection(config: Mapping[str, Any]) -> tuple[ConnectionConfig, dict[str, Any]]:
    """``Settings.broker_config()`` as Quix Streams takes it: the settings its
    ``ConnectionConfig`` knows (bootstrap, TLS, SASL), and the rest, any other librdkafka
    setting passed as ``LAGPILOT_KAFKA_<NAME>`` (``debug``, ``client.rack``, ...), for its
    consumer and producer. ``ConnectionConfig`` refuses a setting it does not know:
    ``LAGPILOT_KAFKA_DEBUG=cgrp`` ended the pipeline at start with a validation error."""
    known = set(ConnectionConfig.model_fields) | {"sasl_mechanism", "sasl_mechanisms"}
    connection = {k: v for k, v in config.items() if k.replace(".", "_") in known}
    extra = {k: v for k, v in config.items() if k not in connection}
    return ConnectionConfig.from_librdkafka_dict(connection), extra


def build_app(
    settings: Settings,
    metrics: PipelineMetrics,
    *,
    policy: Any = None,
    app_kwargs: dict[str, Any] | None = None,
) -> tuple[Application, LagOperator]:
    """The Application, and its lag operator (the status command and tests read it)."""
    connection, client_extra = quix_connection(settings.broker_config())
    budget = BufferBudget(settings.max_buffered_bytes)
    app = Application(
        broker_address=connection,
        consumer_group=settings.consumer_group,
        auto_offset_reset=settings.auto_offset_reset,  # type: ignore[arg-type]
        commit_interval=settings.commit_interval_s,
        state_dir=settings.state_dir,
        processing_guarantee="at-least-once",
        consumer_poll_timeout=0.05,
        producer_extra_config={"linger.ms": 2, **budget.producer(), **client_extra},
        consumer_extra_config={
            **budget.model_consumer(),
            **client_extra,
            **settings.consumer_config(),
        },
        loglevel="WARNING",
        on_consumer_error=_skip_and_count(metrics, "read"),
        on_processing_error=_skip_and_count(metrics, "process"),
        rocksdb_options=STATE_OPTIONS,
        **(app_kwargs or {}),
    )
    rf = settings.replication_factor

    def cfg(partitions: int, **extra: str) -> TopicConfig:
        return TopicConfig(num_partitions=partitions, replication_factor=rf, extra_config=extra)

    wm_topic = app.topic(
        topics.WATERMARKS,
        key_deserializer="str",
        key_serializer="str",
        config=cfg(settings.topic_partitions, **{"retention.ms": str(600_000)}),
    )
    # SDK workers report their processed positions here; the commits source reads it
    app.topic(
        topics.PROGRESS,
        key_serializer="str",
        config=cfg(settings.topic_partitions, **{"retention.ms": str(600_000)}),
    )
    lag_topic = app.topic(
        topics.LAG,
        key_serializer="str",
        config=cfg(settings.topic_partitions, **{"retention.ms": str(6 * 3_600_000)}),
    )

    # 1+2. __consumer_offsets -> decoded, coalesced commits keyed by their topic, and the
    #      watermark samples, into one topic (one Source process: a clock to flush on)
    sampler = None
    if settings.run_sampler:
        sampler = HighWatermarkSource(
            "lagpilot-watermarks",
            settings.broker_config(),
            include=settings.include,
            exclude=settings.exclude or None,
            sample_interval_ms=settings.sample_interval_ms,
            metadata_refresh_ms=settings.metadata_refresh_ms,
            list_offsets_per_broker=settings.list_offsets_per_broker,
        )
    source = CommitsSource(
        "lagpilot-inputs",
        settings.broker_config(),
        CommitsConfig(
            consumer_group=f"{settings.consumer_group}.offsets",
            offsets_topic=settings.offsets_topic,
            instance_id=f"{settings.instance_id}-offsets" if settings.instance_id else "",
            session_timeout_ms=settings.session_timeout_ms,
            flush_ms=settings.commit_flush_ms,
            auto_offset_reset="earliest",
            model_group=settings.consumer_group,
            share_groups_interval_s=settings.share_groups_interval_ms / 1000,
            max_buffered_bytes=settings.max_buffered_bytes,
        ),
        sampler=sampler,
        # group health is the model's, kept in the reader's process (it reads the records);
        # a partial of a class pickles into the source's spawned process
        health=functools.partial(GroupHealth, settings.health_config()),
    )
    app.add_source(source, topic=wm_topic)
    threading.Thread(
        target=SourceStats(metrics).pump,
        args=(source.counters,),
        name="source-counters",
        daemon=True,
    ).start()

    # 3. the model: one key per topic, samples and commits in one ordered stream
    def on_observations(obs: TopicObservation) -> None:
        metrics.lag.update(obs)
        metrics.share_groups_of(obs)
        metrics.sample_modelled(obs.now_ms)

    def on_topic_deleted(topic: str) -> None:
        metrics.lag.forget_topic(topic)
        metrics.forget_share_groups(topic)

    operator = LagOperator(
        settings.lag_config(),
        snapshot_interval_ms=settings.partition_snapshot_interval_ms,
        alert_interval_ms=settings.partition_alert_interval_ms,
        ok_summary_interval_ms=settings.ok_summary_interval_ms,
        max_ok_summaries_per_s=settings.max_ok_summaries_per_s,
        max_snapshots_per_s=settings.max_snapshots_per_s,
        persist_interval_ms=settings.persist_interval_ms,
        window_persist_interval_ms=settings.window_persist_interval_ms,
        on_observations=on_observations,
        on_topic_deleted=on_topic_deleted,
        on_input=lambda event: metrics.model_inputs.labels(event).inc(),
        on_commits=lambda n: metrics.model_inputs.labels("commit").inc(n),
        on_events=metrics.events_published,
        on_group_health=metrics.group_health,
        record_times=RecordTimeReader(
            settings.broker_config(),
            ReadLimits(
                per_partition_s=settings.record_read_interval_s,
                per_s=settings.record_reads_per_s,
            ),
            group_id=f"{settings.consumer_group}.record-times",
            on_result=lambda result, n: metrics.record_reads.labels(result).inc(n),
        )
        if settings.record_reads_per_s > 0
        else None,
        watches=make_selector(settings.include, settings.exclude or None).watches,
    )
    model = app.dataframe(topic=wm_topic)
    # a message's events as one list, produced by the sink (not one dataframe row each)
    lag_events = model.apply(operator, stateful=True, metadata=True)
    lag_events.sink(LagEvents(settings.broker_config(), lag_topic.name, lag_key))

    # 4. the policy: every summary and every halt/resume under one key
    if settings.run_policy and policy is not None:
        control_topic = app.topic(
            settings.control_topic, key_serializer="str", key_deserializer="str", config=cfg(1)
        )
        policy_topic = app.topic(
            policy_topic_name(settings.consumer_group),
            key_serializer="str",
            key_deserializer="str",
            config=cfg(1, **{"retention.ms": str(3_600_000)}),
        )
        outcomes_topic = app.topic(
            settings.outcomes_topic,
            key_serializer="str",
            key_deserializer="str",
            config=cfg(1, **{"cleanup.policy": "compact"}),
        )
        producers_topic = app.topic(
            settings.producers_topic,
            key_serializer="str",
            key_deserializer="str",
            config=cfg(settings.topic_partitions, **{"retention.ms": str(3_600_000)}),
        )
        control_in = app.dataframe(topic=control_topic)
        control_in = control_in.filter(
            lambda v: isinstance(v, dict) and v.get("type") in ("halt", "resume")
        )
        control_in.to_topic(policy_topic, key=lambda _: "policy")
        # in observe mode the operator only answers requests: no summary, outcome or rate
        # takes the extra hop through the policy topic
        if getattr(policy, "decides", True):
            summaries = lag_events.apply(
                lambda events: [e for e in events if e["event"] in ("group_lag", "group_health")],
                expand=True,
            )
            summaries.to_topic(policy_topic, key=lambda _: "policy")
            # outcomes start the verification of a step; only those of actions (not our own
            # verification events, nor duplicates) are forwarded; ``delegated``: the actuator
            # handed a consumer-side action (spread, hand-off) to the SDK workers
            outcomes_in = app.dataframe(topic=outcomes_topic).filter(
                lambda v: (
                    isinstance(v, dict)
                    and v.get("event") == "outcome"
                    and v.get("result")
                    in ("applied", "recorded", "delegated", "failed", "rejected", "expired")
                )
            )
            outcomes_in.to_topic(policy_topic, key=lambda _: "policy")
            rates_in = app.dataframe(topic=producers_topic).filter(
                lambda v: isinstance(v, dict) and v.get("event") == "producer_rates"
            )
            rates_in.to_topic(policy_topic, key=lambda _: "policy")
        # action requests (lagpilot mcp): evaluated with every rail by the same operator
        requests_topic = app.topic(
            settings.requests_topic,
            key_serializer="str",
            key_deserializer="str",
            config=cfg(1, **{"retention.ms": str(3_600_000)}),
        )
        requests_in = app.dataframe(topic=requests_topic).filter(
            lambda v: isinstance(v, dict) and v.get("event") == "action_request"
        )
        requests_in.to_topic(policy_topic, key=lambda _: "policy")
        decisions = app.dataframe(topic=policy_topic)
        out = decisions.apply(policy, stateful=True, metadata=True, expand=True)
        verdicts = out.filter(lambda v: v.get("event") == "verification")
        verdicts.to_topic(outcomes_topic, key=lambda v: f"{v['action_id']}@verify")
        answers = out.filter(lambda v: v.get("event") == "request_verdict")
        answers.to_topic(outcomes_topic, key=lambda v: f"{v['request_id']}@request")
        actions = out.filter(lambda v: v.get("event") == "action")
        if tracing.on():  # the action's traceparent header (no step at all when off)
            actions = actions.set_headers(tracing.action_headers)
        actions.to_topic(control_topic, key=lambda a: a["target"])
    return app, operator
