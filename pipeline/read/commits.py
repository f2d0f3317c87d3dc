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
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import orjson
from quixstreams.sources import Source

from pipeline.model.group_health import GroupHealth, HealthConfig
from pipeline.read.coalesce import Coalescer
from pipeline.read.counters import CounterChannel
from pipeline.read.membership_scan import MembershipScan
from pipeline.read.poll import apply_scans, read_poll
from pipeline.read.sampler_process import PendingSamples, SampledTicks
from pipeline.read.topic_ids import TopicIdResolver
from pipeline.read.watermarks import HighWatermarkSource, Tick
from runtime.cli import CLIENT_LOG, watch_client_logs
from runtime.procs import die_with_parent
from schemas import topics

log = logging.getLogger(__name__)

HEALTH_KEY_PREFIX = "group_health|"  # a topic name never holds "|": no topic's key
FETCH_WAIT_MS = 10
FETCH_MIN_BYTES = 64 * 1024
#: a small buffer is flushed this soon (ms) instead of at the batching cadence (flush_ms):
#: the model re-judges a group-partition when its commits land, so at a 250 ms cadence a
#: consumer that commits every 100 ms and stalls was seen ~150 ms later (detection p99 495
#: -> 693 ms); a quiet estate pays nothing for the quick flushes, a busy one keeps the batches
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
    message, not two (each costs the framework's per-message work: at 50 topics, 200
    samples and ~240 batches a second)."""
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


class CommitsSource(Source):
    """``__consumer_offsets`` -> coalesced ``commits`` events keyed by topic.

    The constructor holds plain data only (Quix pickles it into a spawned process); the
    consumer is built in ``run``. Its counters, and its sampler's, go to the main process
    (Prometheus lives there) on ``counters`` (``pipeline.read.counters``).
    """

    def __init__(
        self,
        name: str,
        broker_config: dict[str, Any],
        *,
        consumer_group: str,
        offsets_topic: str = topics.CONSUMER_OFFSETS,
        progress_topic: str | None = topics.PROGRESS,
        own_prefix: str = topics.OWN_GROUP_PREFIX,
        instance_id: str = "",
        flush_ms: int = 50,
        max_pending: int = 20_000,
        auto_offset_reset: str = "earliest",
        sampler: HighWatermarkSource | None = None,
        model_group: str = "",
        resend_first_s: float = 5.0,
        resend_every_s: float = 60.0,
        commit_every_s: float = 1.0,
        align_timeout_s: float = 1.0,
        shutdown_timeout: float = 10,
        health: HealthConfig | None = None,
    ) -> None:
        super().__init__(name=name, shutdown_timeout=shutdown_timeout)
        self.broker_config = dict(broker_config)
        self.consumer_group = consumer_group
        self.offsets_topic = offsets_topic
        self.progress_topic = progress_topic
        self.own_prefix = own_prefix
        self.instance_id = instance_id
        self.flush_ms = flush_ms
        self.max_pending = max_pending
        self.auto_offset_reset = auto_offset_reset
        self.stats: Counter[str] = Counter()
        self.counters = CounterChannel()  # made here, in the main process, before the spawn
        self._sampler_errors: dict[str, int] = {}  # the sampler's, by kind, as of its last tick
        self.sampler = sampler
        self.model_group = model_group
        self.resend_first_s = resend_first_s
        self.resend_every_s = resend_every_s
        self.commit_every_s = commit_every_s
        self.align_timeout_s = align_timeout_s
        # group health (pipeline/model/group_health.py) runs here: every record of a group, its
        # membership and its commits, lands on one offsets partition, read by this source
        self.health_cfg = health
        self._resolve_at_ms = 0
        # wall ms up to which every commit record has been read and forwarded: a sample
        # taken before it may go out
        self._read_through_ms = 0
        self._wanted_ms = 0  # the latest sample time held for alignment
        self._ticks: SampledTicks | None = None  # the sampler's process, started in run()
        self._drop_logged_s = -60.0
        self._assigned: set[int] | None = None  # None until the first assignment
        self._assigned_progress: set[int] = set()  # lagpilot.progress partitions read here
        # committed offsets at assignment per (topic, partition), looked up lazily
        self._starts: dict[tuple[str, int], int] = {}
        self._owned: list[frozenset[int]] = [frozenset()]  # assigned offsets partitions
        self._offsets_partitions = 0
        # consume() waits this long for a full batch: short, so a lone commit is forwarded
        # within ~10 ms (detection time counts it); bursts are batched by flush_ms instead
        self.poll_timeout_s = min(0.01, flush_ms / 1000)

    def _start_sampler(self) -> SampledTicks | None:
        """Starts the watermark sampler in a process of its own (``sampler_process``).

        Replicas split the sampling the way they split ``__consumer_offsets``: a topic is
        sampled by the replica that owns offsets partition ``crc32(topic) % N``, so every
        topic has exactly one sampler and adding replicas divides the work."""
        if self.sampler is None:
            return None
        # each tick also asks where this topic's partitions end: a sample goes out once
        # the reader has read that far (``read_up_to``)
        self.sampler.ends_topic = self.offsets_topic
        return SampledTicks(self.sampler, self._offsets_partitions).start()

    def _produce_samples(
        self,
        pending: PendingSamples,
        now_s: float,
        flush: Callable[[Sequence[Tick]], None],
        consumer: Any = None,
    ) -> None:
        """Takes the sampler's new ticks and produces those the commits are read through,
        after the commits they follow (``flush`` with them: each topic's batch rides its
        sample, the others go first; one producer keeps them in order, so the model
        applies every commit read before the sample that follows it)."""
        if self._ticks is None:
            return
        for tick in self._ticks.take():
            pending.add(tick, now_s)
            self._sampler_errors = tick[2].get("by_kind") or self._sampler_errors
        dropped = pending.dropped
        due = pending.due(
            self._read_through_ms,
            now_s,
            self._positions(consumer) if pending.wanted_ms and consumer is not None else None,
            self._read_through_ms if self._assigned_progress else None,
        )
        if due:
            flush(due)
        self._wanted_ms = max(self._wanted_ms, pending.wanted_ms)
        if pending.dropped > dropped:  # counted as the sampler's (lagpilot_sampler_errors_total)
            self.stats[ALIGN_DROPS] = pending.dropped
        if pending.dropped > dropped and now_s >= self._drop_logged_s + 60:
            self._drop_logged_s = now_s
            log.warning(
                "%d samples dropped so far: the commits reader is behind (reading a backlog, "
                "or overloaded); samples resume when it catches up",
                pending.dropped,
            )

    def _send_counters(self, run_id: str) -> None:
        """This run's totals, and its sampler's (``sampler|<where>:<kind>``), to Prometheus."""
        totals = dict(self.stats)
        for kind, n in self._sampler_errors.items():
            totals[f"sampler|{kind}"] = n
        self.counters.send(run_id, totals)

    def _caught_up(self, consumer: Any) -> bool:
        """Has this reader reached the end of every offsets partition it is assigned, as
        of the last fetch responses (the high watermark, or the last stable offset of
        a read_committed consumer)? Not before the first assignment: then nothing is read.

        A partition read from its committed offset that has nothing new has no position
        (nothing consumed): there the committed offset, looked up once, stands in."""
        if self._assigned is None:
            return False
        from confluent_kafka import TopicPartition

        tps = [TopicPartition(self.offsets_topic, p) for p in sorted(self._assigned)]
        if self.progress_topic:
            tps += [TopicPartition(self.progress_topic, p) for p in self._assigned_progress]
        for tp in consumer.position(tps) if tps else []:
            lo, hi = consumer.get_watermark_offsets(tp, cached=True)
            if hi < 0:
                return False  # no fetch response yet
            at = tp.offset if tp.offset >= 0 else self._start_offset(consumer, tp, lo, hi)
            if at < hi:
                return False
        return True

    def _positions(self, consumer: Any) -> dict[int, int] | None:
        """This reader's position on each offsets partition it is assigned (where reading
        began, for one it has consumed nothing from yet); None before the first
        assignment."""
        if self._assigned is None:
            return None
        from confluent_kafka import TopicPartition

        tps = [TopicPartition(self.offsets_topic, p) for p in sorted(self._assigned)]
        out = {}
        for tp in consumer.position(tps) if tps else []:
            if tp.offset >= 0:
                out[tp.partition] = tp.offset
            else:
                low, high = consumer.get_watermark_offsets(tp, cached=True)
                out[tp.partition] = self._start_offset(consumer, tp, low, high)
        return out

    def _start_offset(self, consumer: Any, at: Any, low: int, high: int) -> int:
        """Where reading a partition began, for one nothing has been consumed from (its
        position is unknown then): its committed offset; else (a new group) the log start
        when it reads from the earliest, and when it reads from the latest the end its
        fetches have seen (``high``, the cached high watermark: what was there when it
        reset is skipped, not to be read; -1001 before the first fetch response). A
        reader started at the end of partitions nobody commits to would otherwise wait
        for their old records forever, and drop every sample."""
        key = (at.topic, at.partition)
        if key not in self._starts:
            from confluent_kafka import TopicPartition

            try:
                [tp] = consumer.committed([TopicPartition(*key)], timeout=5)
                self._starts[key] = tp.offset
            except Exception as exc:  # ask again on the next loop
                log.debug("committed offset of %s: %s", key, exc)
                return -1
        start = self._starts[key]
        if start >= 0:
            return start
        return high if self.auto_offset_reset == "latest" else max(low, 0)

    def _read_through(self, ms: int) -> None:
        self._read_through_ms = max(self._read_through_ms, ms)

    def _consumer(self) -> Any:
        from confluent_kafka import Consumer

        conf = {
            **self.broker_config,
            "group.id": self.consumer_group,
            "enable.auto.commit": False,
            "auto.offset.reset": self.auto_offset_reset,
            "session.timeout.ms": 10_000,
            "fetch.wait.max.ms": FETCH_WAIT_MS,
            # a busy __consumer_offsets (50,000 commits/s) is fetched in responses of
            # FETCH_MIN_BYTES, not one fetch per few records: the broker's CPU goes down
            # by a lot, and a record waits at most FETCH_WAIT_MS more
            "fetch.min.bytes": FETCH_MIN_BYTES,
        }
        if self.instance_id:
            conf["group.instance.id"] = self.instance_id
        return Consumer({**conf, "logger": CLIENT_LOG})

    def _wait_for_model(self, timeout_s: float = 30.0) -> None:
        """Until the pipeline's own consumer group (the model) is Stable with members.

        A new pipeline group starts reading the watermarks topic at its end; batches sent
        before the model had its partitions would be skipped (the periodic re-send would
        restore them, seconds later). Waiting here costs one start-up, once."""
        if not self.model_group:
            return
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({**self.broker_config, "logger": CLIENT_LOG})
        deadline = time.monotonic() + timeout_s
        while self.running and time.monotonic() < deadline:
            try:
                desc = admin.describe_consumer_groups([self.model_group])[self.model_group]
                group = desc.result(timeout=5)
                if str(group.state).endswith("STABLE") and group.members:
                    time.sleep(1.0)  # the members look up their start offsets on assignment
                    return
            except Exception as exc:  # not there yet, or the broker is busy: ask again
                log.debug("waiting for the model's group: %s", exc)
            time.sleep(0.2)
        log.warning(
            "the model's group %s is not stable after %.0fs; starting anyway",
            self.model_group,
            timeout_s,
        )

    def _publish_health(
        self, health: GroupHealth, resolver: TopicIdResolver, now_ms: int, resend: bool = False
    ) -> None:
        """``group_health`` events (keyed ``group_health|<group>``: the model passes them to
        ``lagpilot.lag``) and each changed topic's ``owners`` (keyed by the topic, so they
        reach its model in order with its commits)."""
        learnt = resolver.take()
        if learnt:
            health.learn_topic_ids(learnt)
        if now_ms >= self._resolve_at_ms:  # at most once a second: it walks every group
            self._resolve_at_ms = now_ms + 1000
            resolver.want(health.topics_to_resolve())
        for ev in health.due(now_ms):
            self.stats["group_health"] += 1
            self.produce(
                key=HEALTH_KEY_PREFIX + ev["group"], value=orjson.dumps(ev), timestamp=now_ms
            )
        changed = health.drain_owner_changes()
        if resend:
            changed.update(health.owned_topics())
        for topic in sorted(changed):
            owners = {"event": "owners", "v": 1, "topic": topic, "owners": health.owners(topic)}
            self.produce(key=topic, value=orjson.dumps(owners), timestamp=now_ms)

    def run(self) -> None:
        die_with_parent()  # a kill -9 of the pipeline must not leave this reader running
        # Quix's producer in this process: its client lines are detail here too (the sampler,
        # which used to share this process and put the filter on, runs in its own now)
        watch_client_logs()
        run_id = uuid.uuid4().hex[:12]  # the counters below begin again with each run
        self._wait_for_model()
        consumer = self._consumer()
        md = consumer.list_topics(self.offsets_topic, timeout=30).topics.get(self.offsets_topic)
        self._offsets_partitions = len(md.partitions) if md is not None and md.partitions else 1
        self._ticks = ticks = self._start_sampler()
        pending = PendingSamples(self.align_timeout_s)
        buffer = Coalescer(self.own_prefix)
        health = GroupHealth(self.health_cfg) if self.health_cfg is not None else None
        resolver = TopicIdResolver(self.broker_config)
        scans: list[MembershipScan] = []
        next_commit = [time.monotonic() + self.commit_every_s]
        next_counters = time.monotonic()

        def flush(
            samples: Sequence[Tick] = (), consumer: Any = consumer, commit: bool = False
        ) -> None:
            now_ms = int(time.time() * 1000)
            batches = buffer.drain()
            riding, alone = riders(batches, samples)
            for batch in alone:
                self.produce(key=batch["topic"], value=orjson.dumps(batch), timestamp=now_ms)
            for sampled_at_ms, messages, _fields in samples:
                for topic, value in messages:
                    rider = riding.pop(topic, None)
                    if rider is not None:
                        spliced = with_commits(value, rider)
                        if spliced is None:  # (not an object: the batch goes just ahead)
                            self.produce(key=topic, value=orjson.dumps(rider), timestamp=now_ms)
                        value = spliced or value
                    self.produce(key=topic, value=value, timestamp=sampled_at_ms)
            self.stats["batches"] += len(batches)
            if not commit and time.monotonic() < next_commit[0]:
                return
            # at-least-once: the offsets are committed only once the batches holding every
            # record read so far are acknowledged (once a second, not per batch: a flush
            # waits for the broker)
            next_commit[0] = time.monotonic() + self.commit_every_s
            self.flush()
            try:
                consumer.commit(asynchronous=False)
            except Exception as exc:  # nothing to commit yet, or a rebalance: replay is safe
                log.debug("offsets commit skipped: %s", exc)

        def offsets_parts(partitions: Any) -> set[int]:
            return {tp.partition for tp in partitions if tp.topic == self.offsets_topic}

        def progress_parts(partitions: Any) -> set[int]:
            return {tp.partition for tp in partitions if tp.topic == self.progress_topic}

        def on_assign(c: Any, partitions: Any) -> None:
            self._owned[0] = self._owned[0] | offsets_parts(partitions)
            self._assigned = (self._assigned or set()) | offsets_parts(partitions)
            self._assigned_progress |= progress_parts(partitions)
            for tp in partitions:
                self._starts.pop((tp.topic, tp.partition), None)
            if health is not None and offsets_parts(partitions):
                scans.append(
                    MembershipScan(
                        self.broker_config,
                        offsets_topic=self.offsets_topic,
                        source_group=self.consumer_group,
                        partitions=offsets_parts(partitions),
                        own_prefix=self.own_prefix,
                    ).start()
                )
            if ticks is not None:
                ticks.own(self._owned[0])

        def on_revoke(c: Any, partitions: Any) -> None:
            flush(consumer=c, commit=True)
            self._owned[0] = self._owned[0] - offsets_parts(partitions)
            self._assigned = (self._assigned or set()) - offsets_parts(partitions)
            self._assigned_progress -= progress_parts(partitions)
            if health is not None:
                health.forget_partitions(offsets_parts(partitions))
            if ticks is not None:
                ticks.own(self._owned[0])

        subscribed = [self.offsets_topic, *([self.progress_topic] if self.progress_topic else [])]
        consumer.subscribe(subscribed, on_assign=on_assign, on_revoke=on_revoke)
        if health is not None:
            buffer.tracked = health.groups  # their commits, taken fast, reach group health too
        # every known commit re-sent once resend_first_s after start, then a slice each
        # second so that each goes again every resend_every_s (evenly: a quarter of a million
        # at once was a burst the model took a third of a second for); the owners with each
        # round
        next_resend, full = time.monotonic() + self.resend_first_s, True
        next_owners = next_resend
        try:
            while self.running:
                resend = False
                if time.monotonic() >= next_resend:
                    share = 1.0 if full else 1.0 / max(1.0, self.resend_every_s)
                    buffer.resend_known(int(time.time() * 1000), share)
                    full, next_resend = False, time.monotonic() + 1.0
                    resend = time.monotonic() >= next_owners
                    if resend:
                        next_owners = time.monotonic() + self.resend_every_s
                started_ms = int(time.time() * 1000)
                msgs = consumer.consume(num_messages=5000, timeout=self.poll_timeout_s)
                now_ms = int(time.time() * 1000)
                reports = read_poll(
                    msgs,
                    buffer,
                    health,
                    scans,
                    now_ms,
                    self.stats,
                    self.offsets_topic,
                    self.own_prefix,
                )
                if health is not None:
                    if scans:
                        apply_scans(health, scans)
                    self._publish_health(health, resolver, now_ms, resend)
                if ticks is not None:  # new samples: held until the commits are read through
                    self._produce_samples(pending, time.monotonic(), flush, consumer)
                # "caught up" (positions against the watermarks of every assigned
                # partition) is asked only while a sample waits for it, and one that
                # cannot go by its ends alone (``read_up_to``)
                caught_up = (
                    len(msgs) < 5000
                    and self._read_through_ms < self._wanted_ms
                    and (bool(self._assigned_progress) or not pending.exact)
                    and self._caught_up(consumer)
                )
                if (
                    flush_due(
                        buffer.pending,
                        now_ms - buffer.first_ms,
                        reports=bool(reports),
                        flush_ms=self.flush_ms,
                        max_pending=self.max_pending,
                    )
                    or time.monotonic() >= next_commit[0]
                ):
                    flush()
                if caught_up:
                    # what the broker had when this poll began (less its fetch wait) is read
                    # and forwarded, ahead of any sample taken before then
                    self._read_through(started_ms - FETCH_WAIT_MS)
                    self._produce_samples(pending, time.monotonic(), flush, consumer)
                if time.monotonic() >= next_counters:
                    next_counters = time.monotonic() + COUNTERS_EVERY_S
                    self._send_counters(run_id)
            flush(commit=True)
            self._send_counters(run_id)
        finally:
            for scan in scans:
                scan.stop()
            resolver.stop()
            consumer.close()
            if ticks is not None:
                ticks.stop()
