"""Wiring of lagpilot's Quix Streams application: topics and dataframes, nothing else.

    __consumer_offsets --decode--> commits, re-keyed by topic --+
    HighWatermarkSource --> lagpilot.watermarks (key = topic) <-+  one topic, one key
                                   |
                       LagOperator (state per topic) --> lagpilot.lag
                                   |  group_lag summaries
    lagpilot.control (halt/resume) -+--> lagpilot.policy (one key) --> PolicyOperator
                                                                  --> lagpilot.control

Commits are re-keyed into ``lagpilot.watermarks`` itself, so the model reads ONE topic in
which a topic's samples and commits share a key and a partition: no stream join and no
time alignment between two inputs, and one watermark message serves every partition.
"""

from __future__ import annotations

from typing import Any

from quixstreams import Application
from quixstreams.kafka.configuration import ConnectionConfig
from quixstreams.models import TopicConfig

from pipeline.metrics import PipelineMetrics
from pipeline.model_op import LagOperator, lag_key
from pipeline.offsets import CoordinatorKeyDeserializer, DecodeCounters, make_message_decoder
from pipeline.settings import Settings
from pipeline.watermarks import HighWatermarkSource
from schemas import topics

POLICY_TOPIC = "lagpilot.policy"  # internal: the policy's single-key input


class CountingDecodeCounters(DecodeCounters):
    """DecodeCounters that also feed the Prometheus counters."""

    def __init__(self, metrics: PipelineMetrics) -> None:
        super().__init__()
        self._metrics = metrics

    def record(self, skipped: Any) -> None:
        super().record(skipped)
        self._metrics.decode_skipped.labels(
            skipped.reason, str(skipped.record_type), str(skipped.version)
        ).inc()


def _count_kind(metrics: PipelineMetrics, counters: DecodeCounters) -> Any:
    own_seen = [0]

    def count(value: dict[str, Any] | None) -> bool:
        if counters.own_group_filtered != own_seen[0]:
            metrics.own_group_filtered.inc(counters.own_group_filtered - own_seen[0])
            own_seen[0] = counters.own_group_filtered
        if value is None:
            return False
        metrics.records.labels(value["event"]).inc()
        return value["event"] in ("commit", "offset_deleted")

    return count


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


def build_app(
    settings: Settings,
    metrics: PipelineMetrics,
    *,
    policy: Any = None,
    app_kwargs: dict[str, Any] | None = None,
) -> tuple[Application, LagOperator]:
    """The Application, and its lag operator (the status command and tests read it)."""
    app = Application(
        broker_address=ConnectionConfig.from_librdkafka_dict(settings.broker_config()),
        consumer_group=settings.consumer_group,
        auto_offset_reset=settings.auto_offset_reset,  # type: ignore[arg-type]
        commit_interval=settings.commit_interval_s,
        state_dir=settings.state_dir,
        processing_guarantee="at-least-once",
        consumer_poll_timeout=0.05,
        producer_extra_config={"linger.ms": 2},
        consumer_extra_config=settings.consumer_config(),
        loglevel="WARNING",
        on_consumer_error=_skip_and_count(metrics, "read"),
        on_processing_error=_skip_and_count(metrics, "process"),
        **(app_kwargs or {}),
    )
    rf = settings.replication_factor

    def cfg(partitions: int, **extra: str) -> TopicConfig:
        return TopicConfig(num_partitions=partitions, replication_factor=rf, extra_config=extra)

    offsets_topic = app.topic(
        topics.CONSUMER_OFFSETS,
        key_deserializer=CoordinatorKeyDeserializer(),
        value_deserializer="bytes",
    )
    wm_topic = app.topic(
        topics.WATERMARKS,
        key_deserializer="str",
        key_serializer="str",
        config=cfg(settings.topic_partitions, **{"retention.ms": str(3_600_000)}),
    )
    lag_topic = app.topic(
        topics.LAG,
        key_serializer="str",
        config=cfg(settings.topic_partitions, **{"retention.ms": str(6 * 3_600_000)}),
    )

    # 1. __consumer_offsets -> commits keyed by their topic, into the watermarks topic
    counters = CountingDecodeCounters(metrics)
    commits = app.dataframe(topic=offsets_topic)
    commits = commits.apply(make_message_decoder(counters=counters), metadata=True)
    commits = commits.filter(_count_kind(metrics, counters))
    commits.to_topic(wm_topic, key=lambda v: v["topic"])

    # 2. watermark samples come from the sampler (a Quix Source in its own process)
    if settings.run_sampler:
        app.add_source(
            HighWatermarkSource(
                "lagpilot-watermarks",
                settings.broker_config(),
                include=settings.include,
                exclude=settings.exclude or None,
                sample_interval_ms=settings.sample_interval_ms,
                metadata_refresh_ms=settings.metadata_refresh_ms,
            ),
            topic=wm_topic,
        )

    # 3. the model: one key per topic, samples and commits in one ordered stream
    def on_observations(obs: list[Any]) -> None:
        metrics.lag.update(obs)
        if obs:
            metrics.sample_modelled(obs[0].now_ms)

    operator = LagOperator(
        settings.lag_config(),
        snapshot_interval_ms=settings.partition_snapshot_interval_ms,
        persist_interval_ms=settings.persist_interval_ms,
        on_observations=on_observations,
        on_topic_deleted=metrics.lag.forget_topic,
    )
    model = app.dataframe(topic=wm_topic)
    lag_events = model.apply(operator, stateful=True, metadata=True, expand=True)
    lag_events = lag_events.update(lambda v: metrics.lag_events.labels(v["event"]).inc())
    lag_events.to_topic(lag_topic, key=lag_key)

    # 4. the policy: every summary and every halt/resume under one key
    if settings.run_policy and policy is not None:
        control_topic = app.topic(
            topics.CONTROL, key_serializer="str", key_deserializer="str", config=cfg(1)
        )
        policy_topic = app.topic(
            POLICY_TOPIC,
            key_serializer="str",
            key_deserializer="str",
            config=cfg(1, **{"retention.ms": str(3_600_000)}),
        )
        summaries = lag_events.filter(lambda v: v["event"] == "group_lag")
        summaries.to_topic(policy_topic, key=lambda _: "policy")
        control_in = app.dataframe(topic=control_topic)
        control_in = control_in.filter(
            lambda v: isinstance(v, dict) and v.get("type") in ("halt", "resume")
        )
        control_in.to_topic(policy_topic, key=lambda _: "policy")
        decisions = app.dataframe(topic=policy_topic)
        actions = decisions.apply(policy, stateful=True, metadata=True, expand=True)
        actions.to_topic(control_topic, key=lambda a: a["target"])
    return app, operator
