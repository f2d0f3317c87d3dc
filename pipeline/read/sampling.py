"""The sampler's pure core: which topics to watch, ``Watermarks`` from a ListOffsets result,
the tick schedule, backoff, error kinds and the sampler's counters.

Plain data and ``now`` in, plain data out; unit-tested without a broker.
``pipeline.read.watermarks`` is the edge (``HighWatermarkSource``) that uses it.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

import kafka.errors as kafka_python_errors
import orjson
from confluent_kafka import KafkaError

from runtime.backoff import backoff_s
from runtime.kafka import kafka_error, waiting_may_fix
from schemas import ConfigError, Watermarks

#: Topics never worth watching unless asked for: Kafka's internal topics (``__*``),
#: lagpilot's own output (watching it would sample our own firehose), and Quix Streams'
#: internal ``repartition__*`` / ``changelog__*`` topics. Matched against the full name.
INTERNAL_TOPICS = r"__.*|lagpilot\..*|repartition__.*|changelog__.*"

#: The header every produced message carries: this tick's number, the sampler's total
#: error count and the ListOffsets round trip, so a consumer can see the sampler's health.
STATS_HEADER = "lagpilot-sampler"

#: Errors a deleted topic's partitions answer ListOffsets with (a node that is down fails
#: its partitions with transport errors instead: not a sign the topic is gone).
TOPIC_GONE_ERRORS = frozenset({"unknown_topic_or_part", "_unknown_topic", "_unknown_partition"})

#: Errors meaning the cluster's topology moved under us (a topic was deleted or shrank, a
#: leader moved, a broker the metadata names is unknown): the metadata is refreshed at the
#: next tick instead of waiting for the refresh period.
TOPOLOGY_ERRORS = frozenset(
    {
        "unknown_topic_or_part",
        "_unknown_partition",
        "_unknown_topic",
        "not_leader_for_partition",
        "leader_not_available",
        "fenced_leader_epoch",
        "unknown_leader_epoch",
        "_unknown_broker",
    }
)

NS_PER_MS = 1_000_000


# --------------------------------------------------------------------------- pure core


@dataclasses.dataclass(frozen=True, slots=True)
class TopicSelector:
    """Which topics are watched: ``include`` and not ``exclude`` and not internal.

    Patterns are matched against the whole topic name (``re.fullmatch``), so
    ``orders`` means the topic ``orders`` and ``orders.*`` means its prefix.
    """

    include: re.Pattern[str]
    exclude: re.Pattern[str] | None = None
    internal: re.Pattern[str] | None = None

    def watches(self, topic: str) -> bool:
        if self.internal is not None and self.internal.fullmatch(topic):
            return False
        if self.exclude is not None and self.exclude.fullmatch(topic):
            return False
        return self.include.fullmatch(topic) is not None


def _compile(key: str, pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ConfigError(
            f"{key}={pattern!r} is not a valid regular expression ({exc}); "
            f"fix the pattern (it is matched against whole topic names)"
        ) from None


def make_selector(
    include: str = ".*", exclude: str | None = None, exclude_internal: bool = True
) -> TopicSelector:
    """A ``TopicSelector`` from pattern strings; a bad pattern is a ``ConfigError``."""
    return TopicSelector(
        include=_compile("include", include),
        exclude=_compile("exclude", exclude) if exclude else None,
        internal=re.compile(INTERNAL_TOPICS) if exclude_internal else None,
    )


def select_watched(
    cluster: Mapping[str, Mapping[int, int]], selector: TopicSelector
) -> dict[str, tuple[int, ...]]:
    """The watched topics of one metadata snapshot: topic -> leader of each partition.

    ``cluster`` maps topic -> {partition: leader broker id}. A topic with no partitions
    (still being created, or failing its metadata) is left out until it has some; a
    partition id missing from a snapshot gets leader -1, so the tuple is always indexed
    by partition.
    """
    watched: dict[str, tuple[int, ...]] = {}
    for topic, partitions in cluster.items():
        if not partitions or not selector.watches(topic):
            continue
        count = max(partitions) + 1
        watched[topic] = tuple(partitions.get(p, -1) for p in range(count))
    return watched


def keep_vanished(
    watched: Mapping[str, tuple[int, ...]],
    previous: Mapping[str, tuple[int, ...]],
    vanished_since_ms: Mapping[str, int],
    now_ms: int,
    grace_ms: int,
    answered_ms: Mapping[str, int] | None = None,
) -> tuple[dict[str, tuple[int, ...]], dict[str, int]]:
    """Keep a watched topic that one metadata snapshot left out, with its previous leaders,
    until it has been missing ``grace_ms`` and has not answered ListOffsets for as long;
    returns the watch set and when each kept topic was first missed.

    A node that has just restarted answers metadata before it has caught up with the
    cluster's, and a topic whose leaders are moving can come back with no partitions, for
    tens of seconds while its partitions still answer ListOffsets: dropping the topic then
    would pause detection on it. ``answered_ms``: when a partition of each topic last
    answered ListOffsets; a topic that answers is there, whatever metadata says. A deleted
    topic goes at the first tick none of its partitions answers ListOffsets
    (``HighWatermarkSource._drop_gone``), or ``grace_ms`` after both stopped at the latest.
    """
    answered = answered_ms or {}
    out = dict(watched)
    since: dict[str, int] = {}
    for topic, leaders in previous.items():
        if topic in watched:
            continue
        first = vanished_since_ms.get(topic, now_ms)
        if now_ms - max(first, answered.get(topic, 0)) < grace_ms:
            out[topic], since[topic] = leaders, first
    return out, since


def hwms_by_topic(
    watched: Mapping[str, tuple[int, ...]], offsets: Mapping[tuple[str, int], int]
) -> dict[str, list[int]]:
    """A ListOffsets result keyed by (topic, partition) as one list per watched topic,
    indexed by partition, -1 where a partition did not answer (what the per-broker way
    fills in directly)."""
    return {
        topic: [offsets.get((topic, p), -1) for p in range(len(leaders))]
        for topic, leaders in watched.items()
    }


def build_watermarks(
    watched: Mapping[str, tuple[int, ...]],
    hwms: Mapping[str, Sequence[int]],
    sampled_at_ms: int,
) -> list[Watermarks]:
    """One ``Watermarks`` per topic from one ListOffsets result.

    ``hwms`` holds each topic's high watermarks by partition; a partition that failed this
    tick is -1 (so is one missing from a list shorter than the topic). A topic none of
    whose partitions answered is left out: a message of nothing but -1 tells the model
    nothing, and the gap in samples is the signal.
    """
    samples = []
    for topic, leaders in watched.items():
        row = hwms.get(topic, ())
        n = len(leaders)
        got = tuple(row[:n]) if len(row) >= n else (*row, *([-1] * (n - len(row))))
        if got and max(got) >= 0:
            samples.append(Watermarks(topic, sampled_at_ms, got, leaders))
    return samples


def next_deadline_ns(
    anchor_ns: int, interval_ns: int, last_deadline_ns: int, now_ns: int, delay_ns: int = 0
) -> tuple[int, int]:
    """The next tick on the grid ``anchor + k * interval``, and how many ticks were skipped.

    Ticks stay on the grid laid from ``anchor`` (a monotonic clock reading) so the beat
    never drifts by the time each sample takes. The next tick is after
    ``last_deadline_ns`` and not before ``now_ns + delay_ns`` (``delay_ns`` is the
    backoff after a failure); ticks that slipped past while a slow sample ran are skipped,
    not fired in a burst, and counted.
    """
    earliest = max(last_deadline_ns + 1, now_ns + delay_ns)
    k = -((anchor_ns - earliest) // interval_ns)  # ceil((earliest - anchor) / interval)
    deadline = anchor_ns + k * interval_ns
    skipped = (deadline - last_deadline_ns) // interval_ns - 1
    return deadline, max(skipped, 0)


def wall_grid_anchor_ns(mono_ns: int, wall_ns: int, interval_ns: int) -> int:
    """A monotonic anchor whose grid ``anchor + k * interval`` falls on the wall-clock
    multiples of ``interval`` (``mono_ns`` and ``wall_ns`` read at the same instant).

    SDK workers time their progress reports just before the same wall-clock grid
    (``actuators/workers/progress.py``), so each sample finds every worker's report fresh,
    not up to one interval old, and detection with worker progress does not wait an extra
    interval. Clocks kept in sync (NTP) hold the two grids together across hosts."""
    return mono_ns - (wall_ns % interval_ns)


def backoff_ms(failures: int, initial_ms: int, max_ms: int) -> int:
    """Exponential backoff after ``failures`` consecutive failures: 0, initial, 2x, ... cap."""
    if failures <= 0:
        return 0
    return int(backoff_s(failures - 1, initial_ms, max_ms))


def error_code_kind(code: int) -> str:
    """The word for a broker error code: librdkafka's name for it (``unknown_topic_or_part``),
    so both ListOffsets ways count a partition's error under the same kind."""
    name = str(KafkaError(code).name())
    return f"error_{code}" if name.endswith("?") else name.lower()


#: kafka-python's errors that carry no broker code, as the words librdkafka uses for them
_KAFKA_PYTHON_KINDS: tuple[tuple[type[BaseException], str], ...] = (
    (kafka_python_errors.KafkaTimeoutError, "timed_out"),
    (kafka_python_errors.NodeNotReadyError, "_transport"),
    (kafka_python_errors.KafkaConnectionError, "_transport"),
    (kafka_python_errors.UnknownBrokerIdError, "_unknown_broker"),
)


def _broker_code(exc: BaseException) -> int | None:
    """The broker error code of a kafka-python error (the per-broker ListOffsets way)."""
    code = getattr(exc, "errno", None)
    if isinstance(exc, kafka_python_errors.KafkaError) and isinstance(code, int):
        return code
    return None


def error_kind(exc: BaseException) -> str:
    """A short, stable word for an exception, for counters and logs (``timed_out``...):
    librdkafka's error names, for confluent-kafka's and kafka-python's errors alike."""
    err = kafka_error(exc)
    if err is not None:
        return str(err.name()).lower()
    code = _broker_code(exc)
    if code is not None:
        return error_code_kind(code)
    for cls, kind in _KAFKA_PYTHON_KINDS:
        if isinstance(exc, cls):
            return kind
    if isinstance(exc, BufferError):
        return "queue_full"
    if isinstance(exc, TimeoutError | concurrent.futures.TimeoutError):
        return "timed_out"
    return type(exc).__name__.lower()


def is_retriable(exc: BaseException) -> bool:
    """Whether waiting may fix it: authorization, authentication and fatal errors need a person."""
    code = _broker_code(exc)
    return waiting_may_fix(exc if code is None else KafkaError(code))


@dataclasses.dataclass(slots=True)
class SamplerStats:
    """The sampler's counters, kept in the process that samples.

    Quix runs a Source in a spawned process, so prometheus_client metrics registered there
    are invisible to the parent's /metrics. The counts travel instead on every produced
    message (header ``lagpilot-sampler``) and in the stats line logged every
    ``stats_log_interval_ms``; ``as_dict()`` is what both show.
    """

    ticks: int = 0
    samples: int = 0
    messages: int = 0
    missed_ticks: int = 0
    metadata_refreshes: int = 0
    topics: int = 0
    partitions: int = 0
    consecutive_failures: int = 0
    last_sample_ms: float = 0.0
    last_tick_ms: float = 0.0
    errors: dict[str, int] = dataclasses.field(default_factory=dict)

    def count_error(self, where: str, kind: str, n: int = 1) -> None:
        key = f"{where}:{kind}"
        self.errors[key] = self.errors.get(key, 0) + n

    @property
    def errors_total(self) -> int:
        return sum(self.errors.values())

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["errors_total"] = self.errors_total
        return d

    def header_fields(self) -> dict[str, Any]:
        """What the per-message health header holds (a copy: safe to send elsewhere)."""
        return {
            "tick": self.ticks,
            "errors": self.errors_total,
            "by_kind": dict(self.errors),
            "sample_ms": self.last_sample_ms,
        }

    def header(self) -> bytes:
        """The compact per-message health header (same bytes for every message of a tick)."""
        return orjson.dumps(self.header_fields())


def cluster_from_metadata(metadata: Any) -> dict[str, dict[int, int]]:
    """confluent-kafka ``ClusterMetadata`` as plain data: topic -> {partition: leader}."""
    return {
        name: {p: pm.leader for p, pm in tm.partitions.items()}
        for name, tm in metadata.topics.items()
    }


# --------------------------------------------------------------------------- the edge
