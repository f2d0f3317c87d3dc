"""Reads ``__consumer_offsets``, decodes it, and forwards commits coalesced per topic.

Commits only matter to the model as "the latest committed offset of each group-partition
at the next tick", so this source keeps, per topic, the latest commit of every
group-partition it has read and forwards them as ONE ``commits`` message per topic, keyed
by the topic, into the topic the watermark samples go to. At 25,000 commits/s over 20
topics and a 250 ms flush, that is 80 messages/s instead of 25,000 through the framework; a
small buffer (a quiet estate) goes out after 50 ms (``flush_due``). The batch flushed as a
topic's sample is released rides that sample (its ``commits``: ``riders``,
``with_commits``), so most ticks of a topic are one message to the model, not two.

It is a Quix Streams Source (its own process: the second core decodes while the first
models; the watermark sampler runs in a process of its own and hands its samples to this
one, which produces them, since Quix lets only one source write a topic and the samples
must follow the commits they are aligned with: ``pipeline.read.sampler_process``) rather
than a dataframe because coalescing needs a clock: a
dataframe function runs only when a message arrives, so the last commits of a burst would
wait for the next one. Here an empty poll flushes at once, so at low rates nothing waits at all.

It also reads ``lagpilot.progress``, where SDK workers report their processed positions
every sampling tick, and forwards the latest report of each group-partition in the same
``commits`` message (its ``progress`` rows): keyed like the commits, so the reports reach
the model with no re-keying hop, and aligned with the samples like the commits. A poll that
read reports flushes at once (a report is worth something only while it is fresh: the
model judges a stalled worker's report the moment it lands, ``TopicModel.judge_reports``).

Delivery is at-least-once: consumer offsets are committed only after the batches holding
every record read so far are acknowledged; a crash replays, and the model ignores commits
older than what it has. Own groups (``lagpilot*``) are filtered: reading our own commits
would feed our consumption back into our lag model.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from quixstreams.sources import Source

from pipeline.read.backlog import (
    DEFAULT_MAX_BUFFERED_BYTES,
    BufferBudget,
)
from pipeline.read.coalesce import Coalescer
from pipeline.read.counters import CounterChannel
from pipeline.read.health import HealthFactory, HealthFold
from pipeline.read.input_watch import INPUT_KEY_PREFIX, InputWatch
from pipeline.read.membership_scan import MembershipScan
from pipeline.read.poll import apply_scans, read_poll
from pipeline.read.positions import ReadPositions
from pipeline.read.sampler_process import PendingSamples, SampledTicks
from pipeline.read.share_positions import SharePoller, group_partition, release_report
from pipeline.read.topic_ids import TopicIdResolver
from pipeline.read.watermarks import HighWatermarkSource, Tick
from runtime.cli import CLIENT_LOG, watch_client_logs
from runtime.procs import die_with_parent
from schemas import topics

log = logging.getLogger(__name__)

HEALTH_KEY_PREFIX = "group_health|"  # a topic name never holds "|": no topic's key
FETCH_WAIT_MS = 10
FETCH_MIN_BYTES = 64 * 1024
#: a poll takes at most this many records (fewer: the reader may be at the end)
POLL_MAX = 5000
#: a small buffer is flushed this soon (ms) instead of at the batching cadence (flush_ms):
#: the model re-judges a group-partition when its commits land, so the sooner a stalled
#: consumer's last commits arrive, the sooner it is seen; a quiet estate pays nothing for
#: the quick flushes, and a busy one keeps its batches
QUICK_FLUSH_MS = 50
#: below this many pending commits a buffer counts as small (20,000 commits/s at 50 ms)
QUICK_FLUSH_BELOW = 1_000


def flush_due(
    pending: int,
    age_ms: int,
    *,
    reports: bool,
    flush_ms: int,
    max_pending: int,
    quick_ms: int = QUICK_FLUSH_MS,
    quick_below: int = QUICK_FLUSH_BELOW,
) -> bool:
    """Whether a buffer of ``pending`` commits, the oldest ``age_ms`` old, goes out now:
    with worker reports in it (fresh or worthless), when full, at the batching cadence
    ``flush_ms``, or, while it is small, after ``quick_ms`` (pure)."""
    if not pending:
        return False
    return (
        reports
        or pending >= max_pending
        or age_ms >= flush_ms
        or (pending < quick_below and age_ms >= min(quick_ms, flush_ms))
    )


#: samples dropped because the commits were not read through their time within the timeout
ALIGN_DROPS = "sampler|align:commits_behind"
#: the counters go to the main process at most this often (s), and when the source stops
COUNTERS_EVERY_S = 0.5


def riders(
    batches: list[dict[str, Any]], samples: Sequence[Tick]
) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """Which batches ride a sample (by topic: the first sample of that topic in
    ``samples``) and which go alone (pure). A batch rides instead of going just ahead of
    its sample: the model applies it before the sample all the same, and takes one
    message, not two (each message costs the framework's per-message work)."""
    sampled = {topic for _, messages, _ in samples for topic, _ in messages}
    riding = {b["topic"]: b for b in batches if b["topic"] in sampled}
    return riding, [b for b in batches if b["topic"] not in riding]


def with_commits(sample: bytes, batch: dict[str, Any]) -> bytes | None:
    """A ``watermarks`` message (a JSON object) with ``batch`` as its ``commits`` (pure;
    None if ``sample`` is not a non-empty object). The sample is the sampler's bytes: the
    batch is spliced in, not the sample parsed again."""
    if not (sample.startswith(b"{") and sample.endswith(b"}")) or sample.endswith(b"{}"):
        return None
    return b"".join((sample[:-1], b',"commits":', orjson.dumps(batch), b"}"))


@dataclass(frozen=True)
class CommitsConfig:
    """The commits source's settings (plain data: pickled into the source's process)."""

    #: the reader's own consumer group on ``offsets_topic`` (and ``progress_topic``)
    consumer_group: str
    offsets_topic: str = topics.CONSUMER_OFFSETS
    #: where SDK workers report their progress (None: not read)
    progress_topic: str | None = topics.PROGRESS
    #: groups named with this prefix are lagpilot's own: never modelled
    own_prefix: str = topics.OWN_GROUP_PREFIX
    #: static membership of the reader's group ("": none)
    instance_id: str = ""
    #: the reader's session in its group: the pipeline's own, so a replica's death hands
    #: its offsets partitions on as soon as its other partitions
    session_timeout_ms: int = 10_000
    #: the batching cadence of a busy buffer (ms)
    flush_ms: int = 50
    #: a buffer this full goes out at once
    max_pending: int = 20_000
    auto_offset_reset: str = "earliest"
    #: the pipeline's own group (the model), waited for at start ("": no wait)
    model_group: str = ""
    #: every known commit is re-sent this long after start, then a slice each second so
    #: that each goes again every ``resend_every_s``
    resend_first_s: float = 5.0
    resend_every_s: float = 60.0
    #: how often the reader's offsets are committed (s)
    commit_every_s: float = 1.0
    #: how long a sample waits for the commits to be read through its time (s)
    align_timeout_s: float = 1.0
    #: how often share groups are read (s; 0: not read): ``pipeline.read.share_positions``
    share_groups_interval_s: float = 0.0
    #: the bound on the bytes the reader's queues hold (``pipeline.read.backlog``)
    max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES

    @property
    def poll_timeout_s(self) -> float:
        """How long a poll waits for a full batch: short, so a lone commit is forwarded
        within ~10 ms (detection time counts it); bursts are batched by ``flush_ms``."""
        return min(0.01, self.flush_ms / 1000)

    @property
    def subscribed(self) -> list[str]:
        return [self.offsets_topic, *([self.progress_topic] if self.progress_topic else [])]

    def consumer(self, broker_config: dict[str, Any]) -> Any:
        """The reader's consumer (not subscribed yet)."""
        from confluent_kafka import Consumer

        conf = {
            **broker_config,
            "group.id": self.consumer_group,
            "enable.auto.commit": False,
            "auto.offset.reset": self.auto_offset_reset,
            "session.timeout.ms": self.session_timeout_ms,
            "heartbeat.interval.ms": max(500, self.session_timeout_ms // 10),
            "fetch.wait.max.ms": FETCH_WAIT_MS,
            # a busy __consumer_offsets is fetched in responses of FETCH_MIN_BYTES, not one
            # fetch per few records: that spares the broker's CPU, and a record waits at
            # most FETCH_WAIT_MS more
            "fetch.min.bytes": FETCH_MIN_BYTES,
            **BufferBudget(self.max_buffered_bytes).reader_consumer(),
        }
        if self.instance_id:
            conf["group.instance.id"] = self.instance_id
        return Consumer({**conf, "logger": CLIENT_LOG})


class CommitsLoop:
    """One run of the commits source in its process: its consumer, buffers and clocks.

    ``run`` polls until the source stops (``poll_once``); the consumer's rebalance
    callbacks are ``on_assign`` and ``on_revoke``. What it forwards goes out through the
    source's producer (``source.produce``)."""

    def __init__(
        self,
        source: CommitsSource,
        consumer: Any,
        *,
        ticks: SampledTicks | None = None,
        health: HealthFold | None = None,
    ) -> None:
        self.source = source
        self.cfg = source.config
        self.consumer = consumer
        self.ticks = ticks  # the sampler's process, if this replica samples
        self.health = health  # group health, if this replica keeps it
        self.positions = ReadPositions(self.cfg)
        self.buffer = Coalescer(self.cfg.own_prefix)
        if health is not None:  # their commits, taken fast, reach group health too
            self.buffer.tracked = health.groups
        self.pending = PendingSamples(self.cfg.align_timeout_s)
        self.resolver = TopicIdResolver(source.broker_config)
        self.shares: SharePoller | None = None
        self.share_groups: frozenset[str] = frozenset()  # share groups seen: their batches say so
        self.offsets_partitions = 1
        self.scans: list[MembershipScan] = []  # start-up membership scans still running
        self.stats: Counter[str] = Counter()
        # the bound on what the reader holds, and what it says of itself
        self.input = InputWatch(self.cfg, consumer, source, self.positions)
        self.sampler_errors: dict[str, int] = {}  # the sampler's, by kind, as of its last tick
        self.run_id = uuid.uuid4().hex[:12]  # the counters begin again with each run
        # wall ms up to which every commit record has been read and forwarded: a sample
        # taken before it may go out
        self.read_through_ms = 0
        self.wanted_ms = 0  # the latest sample time held for alignment
        self.drop_logged_s = -60.0
        self.error_logged_s: dict[int, float] = {}  # by error code: when it was last said
        self.resolve_at_ms = 0
        now = time.monotonic()
        self.next_commit_s = now + self.cfg.commit_every_s
        self.next_counters_s = now
        self.next_resend_s = now + self.cfg.resend_first_s
        self.next_owners_s = self.next_resend_s
        self.resend_all = True  # the first re-send is of every known commit

    # -- the loop ------------------------------------------------------------------------

    def subscribe(self) -> None:
        self.consumer.subscribe(
            self.cfg.subscribed, on_assign=self.on_assign, on_revoke=self.on_revoke
        )

    def run(self, running: Callable[[], bool]) -> None:
        """Polls while ``running()``; then forwards and commits what is left."""
        if self.cfg.share_groups_interval_s > 0:
            self.shares = SharePoller(
                self.source.broker_config, self.cfg.share_groups_interval_s, self.owns_group
            ).start()
        self.subscribe()
        self.next_resend_s = time.monotonic() + self.cfg.resend_first_s
        self.next_owners_s = self.next_resend_s
        while running():
            self.poll_once()
        self.flush(commit=True)
        self.send_counters()

    def poll_once(self) -> None:
        """One poll: its records into the buffer and group health, then whatever is due
        (group health's events, samples, a flush, the counters)."""
        resend = self.resend_due()
        self.input.hold_back()
        started_ms = int(time.time() * 1000)
        msgs = self.consumer.consume(num_messages=POLL_MAX, timeout=self.cfg.poll_timeout_s)
        now_ms = int(time.time() * 1000)
        if msgs and not msgs[-1].error():
            self.input.last_record_ms = msgs[-1].timestamp()[1]
        if any(m.error() is not None for m in msgs):
            self.consumer_errors(msgs)
        reports = read_poll(
            msgs,
            self.buffer,
            self.health,
            self.scans,
            now_ms,
            self.stats,
            self.cfg.offsets_topic,
            self.cfg.own_prefix,
        )
        if self.health is not None:
            if self.scans:
                apply_scans(self.health, self.scans)
            self.publish_health(self.health, now_ms, resend)
        if self.shares is not None:
            self.take_shares(now_ms)
        if self.ticks is not None:  # new samples: held until the commits are read through
            self.produce_samples()
        # "caught up" (positions against the watermarks of every assigned partition) is
        # asked only while a sample waits for it, and one that cannot go by its ends alone
        # (``read_up_to``)
        caught_up = (
            len(msgs) < POLL_MAX
            and self.read_through_ms < self.wanted_ms
            and (bool(self.positions.assigned_progress) or not self.pending.exact)
            and self.positions.caught_up(self.consumer)
        )
        if (
            flush_due(
                self.buffer.pending,
                now_ms - self.buffer.first_ms,
                reports=bool(reports),
                flush_ms=self.cfg.flush_ms,
                max_pending=self.cfg.max_pending,
            )
            or time.monotonic() >= self.next_commit_s
        ):
            self.flush()
        if caught_up:
            # what the broker had when this poll began (less its fetch wait) is read and
            # forwarded, ahead of any sample taken before then
            self.read_through_ms = max(self.read_through_ms, started_ms - FETCH_WAIT_MS)
            self.produce_samples()
        if time.monotonic() >= self.next_counters_s:
            self.next_counters_s = time.monotonic() + COUNTERS_EVERY_S
            self.send_counters()

    def consumer_errors(self, msgs: Sequence[Any]) -> None:
        """Say what the consumer reported (the first of each kind a minute), and renew it
        after a fatal error: a static member that its failed-over coordinator fenced
        (librdkafka#3437) reads nothing more, and this replica's groups would go silent
        until something else restarted the source."""
        from confluent_kafka import KafkaError

        fatal = None
        for m in msgs:
            err = m.error()
            if err is None:
                continue
            if err.fatal() or err.code() == KafkaError._FATAL:
                fatal = err
            now_s = time.monotonic()
            if now_s - self.error_logged_s.get(err.code(), -60.0) >= 60.0:
                self.error_logged_s[err.code()] = now_s
                log.warning("the commits reader's consumer reports: %s", err.str())
        if fatal is not None:
            self.renew_consumer(fatal)

    def renew_consumer(self, err: Any) -> None:
        """A new consumer in the reader's group, under the same member id, reading on from
        the committed offsets; the fenced one is closed on a thread of its own (its close
        can wait on the coordinator) and left behind if it does not finish."""
        log.warning(
            "the commits reader's consumer failed (%s); a new one rejoins its group", err.str()
        )
        old = self.consumer
        # nothing is this replica's until the new consumer is assigned (no on_revoke came)
        self.positions.assigned, self.positions.assigned_progress = set(), set()
        if self.ticks is not None:
            self.ticks.own(self.positions.owned)
        self.consumer = self.cfg.consumer(self.source.broker_config)
        threading.Thread(target=old.close, name="fenced-reader-close", daemon=True).start()
        self.subscribe()

    def resend_due(self) -> bool:
        """Queues known commits again when due: all of them ``resend_first_s`` after start,
        then a slice each second so that each goes again every ``resend_every_s`` (evenly:
        all at once would be a burst the model stalls on). True when the owners are due
        again too (every ``resend_every_s``)."""
        if time.monotonic() < self.next_resend_s:
            return False
        share = 1.0 if self.resend_all else 1.0 / max(1.0, self.cfg.resend_every_s)
        self.buffer.resend_known(int(time.time() * 1000), share)
        self.resend_all, self.next_resend_s = False, time.monotonic() + 1.0
        if time.monotonic() < self.next_owners_s:
            return False
        self.next_owners_s = time.monotonic() + self.cfg.resend_every_s
        return True

    def owns_group(self, group: str) -> bool:
        """Is ``group`` this replica's to model (its offsets partition is assigned here)?"""
        return group_partition(group, self.offsets_partitions) in self.positions.owned

    def take_shares(self, now_ms: int) -> None:
        """The share groups' positions read since the last poll, into the buffer."""
        assert self.shares is not None
        got = self.shares.take()
        if got is None:
            return
        for record in got.records:
            self.buffer.add(record, now_ms)
        interval_ms = round(self.cfg.share_groups_interval_s * 1000)
        for group, cells in got.unconsumed.items():
            self.buffer.add_progress(release_report(group, cells, now_ms, interval_ms), now_ms)
        self.stats["share_position"] += len(got.records)
        self.stats["share_read_errors"] += got.errors
        if not got.share_groups <= self.share_groups:
            self.share_groups = self.share_groups | got.share_groups

    def close(self) -> None:
        if self.shares is not None:
            self.shares.stop()
        for scan in self.scans:
            scan.stop()
        self.resolver.stop()
        self.consumer.close()
        if self.ticks is not None:
            self.ticks.stop()

    # -- rebalances ----------------------------------------------------------------------

    def on_assign(self, consumer: Any, partitions: Any) -> None:
        """New partitions: read from their committed offsets; group health scans the new
        offsets partitions for the membership recorded before that."""
        self.positions.assign(partitions)
        offsets_parts = self.positions.offsets_parts(partitions)
        if self.health is not None and offsets_parts:
            self.scans.append(
                MembershipScan(
                    self.source.broker_config,
                    offsets_topic=self.cfg.offsets_topic,
                    source_group=self.cfg.consumer_group,
                    partitions=offsets_parts,
                    own_prefix=self.cfg.own_prefix,
                ).start()
            )
        if self.ticks is not None:
            self.ticks.own(self.positions.owned)

    def on_revoke(self, consumer: Any, partitions: Any) -> None:
        """Partitions going to another replica: what was read of them is forwarded and
        committed first, and group health forgets their groups (the other replica
        publishes them from here on)."""
        self.flush(commit=True)
        self.positions.revoke(partitions)
        if self.health is not None:
            self.health.forget_partitions(self.positions.offsets_parts(partitions))
        if self.ticks is not None:
            self.ticks.own(self.positions.owned)

    # -- out -----------------------------------------------------------------------------

    def produce(self, key: str, value: bytes, timestamp: int) -> None:
        self.input.gate.sent(len(value))
        self.source.produce(key=key, value=value, timestamp=timestamp)

    def flush(self, samples: Sequence[Tick] = (), commit: bool = False) -> None:
        """Forwards the buffer (each batch riding its topic's sample in ``samples``, the
        others first) and the samples; commits the reader's offsets when due, or when
        ``commit``."""
        now_ms = int(time.time() * 1000)
        batches = self.buffer.drain()
        if self.share_groups:
            for batch in batches:
                shares = [g for g in batch["groups"] if g in self.share_groups]
                if shares:
                    batch["share_groups"] = shares
        riding, alone = riders(batches, samples)
        for batch in alone:
            self.produce(batch["topic"], orjson.dumps(batch), now_ms)
        for sampled_at_ms, messages, _fields in samples:
            for topic, value in messages:
                rider = riding.pop(topic, None)
                if rider is not None:
                    spliced = with_commits(value, rider)
                    if spliced is None:  # (not an object: the batch goes just ahead)
                        self.produce(topic, orjson.dumps(rider), now_ms)
                    value = spliced or value
                self.produce(topic, value, sampled_at_ms)
        self.stats["batches"] += len(batches)
        if not commit and time.monotonic() < self.next_commit_s:
            return
        # at-least-once: the offsets are committed only once the batches holding every
        # record read so far are acknowledged (once a second, not per batch: waiting for
        # the acknowledgements blocks the loop)
        self.next_commit_s = time.monotonic() + self.cfg.commit_every_s
        self.source.flush()
        try:
            self.consumer.commit(asynchronous=False)
        except Exception as exc:  # nothing to commit yet, or a rebalance: replay is safe
            log.debug("offsets commit skipped: %s", exc)

    def produce_samples(self) -> None:
        """Takes the sampler's new ticks and produces those the commits are read through,
        after the commits they follow (``flush`` with them: each topic's batch rides its
        sample, the others go first; one producer keeps them in order, so the model
        applies every commit read before the sample that follows it)."""
        if self.ticks is None:
            return
        now_s = time.monotonic()
        pending = self.pending
        for tick in self.ticks.take():
            pending.add(tick, now_s)
            self.sampler_errors = tick[2].get("by_kind") or self.sampler_errors
        dropped = pending.dropped
        due = pending.due(
            self.read_through_ms,
            now_s,
            self.positions.positions(self.consumer) if pending.wanted_ms else None,
            self.read_through_ms if self.positions.assigned_progress else None,
        )
        if due:
            self.flush(due)
        self.wanted_ms = max(self.wanted_ms, pending.wanted_ms)
        if pending.dropped > dropped:  # counted as the sampler's (lagpilot_sampler_errors_total)
            self.stats[ALIGN_DROPS] = pending.dropped
        if pending.dropped > dropped and now_s >= self.drop_logged_s + 60:
            self.drop_logged_s = now_s
            log.warning(
                "%d samples dropped so far: the commits reader is behind (reading a backlog, "
                "or overloaded); samples resume when it catches up",
                pending.dropped,
            )

    def publish_health(self, health: HealthFold, now_ms: int, resend: bool = False) -> None:
        """``group_health`` events (keyed ``group_health|<group>``: the model passes them to
        ``lagpilot.lag``) and each changed topic's ``owners`` (keyed by the topic, so they
        reach its model in order with its commits); every owned topic's when ``resend``."""
        learnt = self.resolver.take()
        if learnt:
            health.learn_topic_ids(learnt)
        if now_ms >= self.resolve_at_ms:  # at most once a second: it walks every group
            self.resolve_at_ms = now_ms + 1000
            self.resolver.want(health.topics_to_resolve())
        for ev in health.due(now_ms):
            self.stats["group_health"] += 1
            self.produce(HEALTH_KEY_PREFIX + ev["group"], orjson.dumps(ev), now_ms)
        changed = health.drain_owner_changes()
        if resend:
            changed.update(health.owned_topics())
        for topic in sorted(changed):
            owners = {"event": "owners", "v": 1, "topic": topic, "owners": health.owners(topic)}
            self.produce(topic, orjson.dumps(owners), now_ms)

    def send_counters(self) -> None:
        """This run's totals, and its sampler's (``sampler|<where>:<kind>``), to Prometheus."""
        totals: dict[str, float] = dict(self.stats)
        now_ms = int(time.time() * 1000)
        gauges, event = self.input.state(now_ms, self.cfg.instance_id or self.run_id)
        totals.update(gauges)
        if event is not None:
            self.produce(INPUT_KEY_PREFIX + event["replica"], orjson.dumps(event), now_ms)
        for kind, n in self.sampler_errors.items():
            totals[f"sampler|{kind}"] = n
        self.source.counters.send(self.run_id, totals)


class CommitsSource(Source):
    """``__consumer_offsets`` -> coalesced ``commits`` events keyed by topic.

    The constructor holds plain data only (Quix pickles it into a spawned process: the
    settings, the sampler, and group health as a factory); ``run`` builds the consumer and
    runs a ``CommitsLoop``. Its counters, and its sampler's, go to the main process
    (Prometheus lives there) on ``counters`` (``pipeline.read.counters``).
    """

    def __init__(
        self,
        name: str,
        broker_config: dict[str, Any],
        config: CommitsConfig,
        *,
        sampler: HighWatermarkSource | None = None,
        health: HealthFactory | None = None,
        shutdown_timeout: float = 10,
    ) -> None:
        super().__init__(name=name, shutdown_timeout=shutdown_timeout)
        self.broker_config = dict(broker_config)
        self.config = config
        self.sampler = sampler
        # group health runs here: every record of a group, its membership and its commits,
        # lands on one offsets partition, read by this source
        self.health = health
        self.counters = CounterChannel()  # made here, in the main process, before the spawn

    def undelivered(self) -> int:
        """Messages produced and not yet acknowledged (librdkafka's queue, in flight too)."""
        producer: Any = getattr(self.producer, "_producer", self.producer)
        return len(producer)

    def serve_deliveries(self, timeout_s: float) -> None:
        self.producer.poll(timeout_s)

    def _start_sampler(self, offsets_partitions: int) -> SampledTicks | None:
        """Starts the watermark sampler in a process of its own (``sampler_process``).

        Replicas split the sampling the way they split ``__consumer_offsets``: a topic is
        sampled by the replica that owns offsets partition ``crc32(topic) % N``, so every
        topic has exactly one sampler and adding replicas divides the work."""
        if self.sampler is None:
            return None
        # each tick also asks where this topic's partitions end: a sample goes out once
        # the reader has read that far (``read_up_to``)
        self.sampler.ends_topic = self.config.offsets_topic
        return SampledTicks(self.sampler, offsets_partitions).start()

    def _wait_for_model(self, timeout_s: float = 30.0) -> None:
        """Until the pipeline's own consumer group (the model) is Stable with members.

        A new pipeline group starts reading the watermarks topic at its end; batches sent
        before the model had its partitions would be skipped (the periodic re-send would
        restore them, seconds later). Waiting here costs one start-up, once."""
        model_group = self.config.model_group
        if not model_group:
            return
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({**self.broker_config, "logger": CLIENT_LOG})
        deadline = time.monotonic() + timeout_s
        while self.running and time.monotonic() < deadline:
            try:
                desc = admin.describe_consumer_groups([model_group])[model_group]
                group = desc.result(timeout=5)
                if str(group.state).endswith("STABLE") and group.members:
                    time.sleep(1.0)  # the members look up their start offsets on assignment
                    return
            except Exception as exc:  # not there yet, or the broker is busy: ask again
                log.debug("waiting for the model's group: %s", exc)
            time.sleep(0.2)
        log.warning(
            "the model's group %s is not stable after %.0fs; starting anyway",
            model_group,
            timeout_s,
        )

    def run(self) -> None:
        die_with_parent()  # a kill -9 of the pipeline must not leave this reader running
        # Quix's producer runs in this process: its client log lines are detail here
        watch_client_logs()
        self._wait_for_model()
        consumer = self.config.consumer(self.broker_config)
        offsets_topic = self.config.offsets_topic
        md = consumer.list_topics(offsets_topic, timeout=30).topics.get(offsets_topic)
        partitions = len(md.partitions) if md is not None and md.partitions else 1
        loop = CommitsLoop(
            self,
            consumer,
            ticks=self._start_sampler(partitions),
            health=self.health() if self.health is not None else None,
        )
        loop.offsets_partitions = partitions
        try:
            loop.run(lambda: self.running)
        finally:
            loop.close()
