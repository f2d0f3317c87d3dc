"""What a ``Worker`` and a ``PoolWorker`` share on the poll thread: the poll loop, and the two
parts it holds and delegates to: control commands (``Obeying``, obeying.py), backpressure
and commits (``Committing``, committing.py). Only how partitions are obtained (a
subscription vs. hand-offs) differs, in the two subclasses. The lane threads' side (the
handler wrapper, its retries and counters) is in handling; the settings' checks and
defaults in engine_settings.
"""

from __future__ import annotations

import abc
import logging
import os
import socket
import threading
import time
from collections.abc import Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from actuators.workers.committing import Committing
from actuators.workers.control import Command, ControlReader
from actuators.workers.dedupe import DedupeStore
from actuators.workers.engine_settings import (
    MAX_WORKERS,
    check_settings,
    resolve_store,
)
from actuators.workers.group_protocol import resolve_group_protocol
from actuators.workers.handling import (
    AsyncHandler,
    AsyncHandlerRunner,
    FailureHook,
    Handler,
    HandlerRunner,
    Tally,
    is_async_handler,
)
from actuators.workers.lanes import LaneExecutor, TopicPart
from actuators.workers.obeying import Obeying
from actuators.workers.outcomes import OutcomeReporter
from actuators.workers.process_lanes import ProcessLaneExecutor
from actuators.workers.processes import (
    ProcessRunner,
    pickled_handler,
    resolve_processes,
    store_spec,
)
from actuators.workers.progress import PartitionProgress, ProgressReporter, progress_timing
from runtime import tracing
from schemas import Verifier, load_verifier
from schemas.topics import CONTROL, OUTCOMES, PROGRESS

log = logging.getLogger(__name__)


#: bounds of a poll's batch (``_fetch``): between them, the room the buffers have left
MIN_BATCH = 500
MAX_BATCH = 10_000


def _now_ms() -> int:
    return int(time.time() * 1000)


def is_fatal(err: KafkaError) -> bool:
    """The consumer is unusable after this error. librdkafka delivers a fatal error (a static
    member fenced, or refused because its ``group.instance.id`` is in use) as an error event
    of code ``_FATAL`` whose ``fatal()`` is False, so the code is checked too."""
    return bool(err.fatal()) or err.code() == KafkaError._FATAL


class Engine(abc.ABC):
    """The poll loop. Subclasses implement ``_open``, ``_apply``, ``_tick``, ``_held``.

    Obeying commands is its ``Obeying`` part's (obeying.py); backpressure and commits are
    its ``Committing`` part's (committing.py). The engine builds both with what they use
    (the lanes, the assigned partitions, the tally, its hooks) and delegates to them."""

    kind = "worker"

    def __init__(
        self,
        *,
        bootstrap: str,
        group: str,
        handler: Handler | AsyncHandler,
        lanes: int = 1,
        max_workers: int | None = None,
        max_buffered_per_partition: int | None = None,
        dedupe: DedupeStore | str | os.PathLike[str] | None = None,
        control_topic: str = CONTROL,
        outcomes_topic: str | None = OUTCOMES,
        signing_key: Verifier | None = None,
        commit_interval_s: float = 0.5,
        close_timeout_s: float = 10.0,
        max_attempts: int = 3,
        retry_backoff_s: float = 0.2,
        on_failure: FailureHook | None = None,
        consumer_config: dict[str, Any] | None = None,
        progress_interval_ms: int | None = None,
        progress_lead_ms: int | None = None,
        progress_topic: str = PROGRESS,
        control_replay_s: float = 60.0,
        group_protocol: str | None = None,
        executor: str | None = None,
        processes: int | None = None,
    ) -> None:
        # the argument, else LAGPILOT_WORKER_GROUP_PROTOCOL, else classic (group_protocol.py)
        self.group_protocol = resolve_group_protocol(group_protocol)
        extra = check_settings(
            bootstrap=bootstrap,
            group=group,
            lanes=lanes,
            max_workers=max_workers,
            max_buffered_per_partition=max_buffered_per_partition,
            max_attempts=max_attempts,
            consumer_config=consumer_config,
            control_replay_s=control_replay_s,
            group_protocol=self.group_protocol,
        )
        self.group = group
        self.bootstrap = bootstrap
        self.control_topic = control_topic
        self.outcomes_topic = outcomes_topic  # None: report nothing back
        self._host = socket.gethostname()
        self._reporter: OutcomeReporter | None = None
        self._default_lanes = lanes
        self._close_timeout_s = close_timeout_s
        self._extra = extra
        self._signing_key = signing_key if signing_key is not None else load_verifier()
        tracing.setup(f"lagpilot-{self.kind}")  # only if OTEL_* ask for traces
        # the argument, else LAGPILOT_WORKER_EXECUTOR, else threads; None: threads (processes.py)
        n_processes = resolve_processes(executor, processes)
        if n_processes is not None:
            pickled_handler(handler)  # refused before the store is opened
        self.dedupe, self._owns_store = resolve_store(dedupe, group)
        self._tally = Tally()  # the lanes count every message: no shared lock per message
        # what a lane runs for each message; an async def handler's lanes are event loop tasks
        asynchronous = is_async_handler(handler)
        runner = AsyncHandlerRunner if asynchronous else HandlerRunner
        self._process: HandlerRunner | ProcessRunner = runner(
            handler,
            group=group,
            store=self.dedupe,
            max_attempts=max_attempts,
            retry_backoff_s=retry_backoff_s,
            on_failure=on_failure,
            tally=self._tally,
        )
        self._processes: ProcessRunner | None = None
        if n_processes is not None:  # process mode: a lane waits for a worker process
            self._processes = self._process = ProcessRunner(
                handler,  # type: ignore[arg-type]  # an async one was refused above
                group=group,
                store=store_spec(self.dedupe),
                processes=n_processes,
                max_attempts=max_attempts,
                retry_backoff_s=retry_backoff_s,
                on_failure=on_failure,
                tally=self._tally,
                name=f"lagpilot-{self.kind}-{group}",
            )
        self._dispatcher = LaneExecutor(
            self._process,
            max_workers=max_workers or MAX_WORKERS,
            default_lanes=lanes,
            name=f"lagpilot-{self.kind}-{group}",
            asynchronous=asynchronous,
        )
        if self._processes is not None:  # its lanes go on from the worker processes' answers
            self._dispatcher = ProcessLaneExecutor(
                self._processes, default_lanes=lanes, name=f"lagpilot-{self.kind}-{group}"
            )
        self._stop = threading.Event()
        self._closing = False  # shutting down: every partition released, none reported
        self._thread: threading.Thread | None = None
        self._consumer: Consumer | None = None
        self._control: ControlReader | None = None
        self._assigned: set[TopicPart] = set()
        # the hooks, the consumer, the control reader and the reporter are looked up at each
        # call: the subclass builds its clients when it connects (a unit test wires fakes)
        self._obeying = Obeying(
            kind=self.kind,
            group=group,
            host=self._host,
            dispatcher=self._dispatcher,
            default_lanes=lanes,
            assigned=self._assigned,
            tally=self._tally,
            apply=lambda cmd: self._apply(cmd),
            restore_all=lambda: self._restore_all(),
            control=lambda: self._control,
            reporter=lambda: self._reporter,
            instance_id=lambda: getattr(self, "instance_id", ""),
        )
        self._committing = Committing(
            dispatcher=self._dispatcher,
            assigned=self._assigned,
            buffered=max_buffered_per_partition,
            interval_s=commit_interval_s,
            tally=self._tally,
            consumer=lambda: self._consumer,
            held=lambda tp: self._held(tp),
            metadata=lambda tp: self._metadata(tp),
        )
        # the parts' own state, under the names the subclasses use
        self.actions_halts = self._obeying.actions_halts  # actions halts in force (state keys)
        self._paused = self._committing.paused
        self._acked = self._committing.acked  # last commit the broker acknowledged
        self.error: BaseException | None = None
        # the argument, else LAGPILOT_PROGRESS_INTERVAL_MS / _LEAD_MS, else 125 / 40 ms
        progress_interval_ms, progress_lead_ms = progress_timing(
            progress_interval_ms, progress_lead_ms
        )
        self._progress_interval_ms = progress_interval_ms
        self._progress_lead_ms = progress_lead_ms
        self._progress_topic = progress_topic
        self._progress: ProgressReporter | None = None
        self._control_replay_s = float(control_replay_s)

    # -- lifecycle -----------------------------------------------------------------------------

    def base_config(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, **self._extra}

    def start(self) -> None:
        """Connect, then run the poll loop on a thread. Returns once connected."""
        self._connect()
        self._thread = threading.Thread(
            target=self._loop, name=f"lagpilot-{self.kind}", daemon=True
        )
        self._thread.start()

    def run(self) -> None:
        """Connect and run the poll loop on this thread until ``stop()`` (e.g. from a signal)."""
        self._connect()
        self._loop()

    def stop(self, timeout_s: float | None = None) -> None:
        """Graceful: finish running messages (up to ``close_timeout_s``), commit, leave."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s if timeout_s is not None else self._close_timeout_s + 30)

    def __enter__(self) -> Engine:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _connect(self) -> None:
        if self._processes is not None:
            self._processes.start()  # first: a handler they cannot import fails the start
        self._control = ControlReader(
            self.bootstrap,
            self.control_topic,
            self.group,
            self._signing_key,
            replay_s=self._control_replay_s,
            **self._extra,
        )
        self._control.start()
        if self.outcomes_topic:
            self._reporter = OutcomeReporter(self.base_config(), self.outcomes_topic)
            self._reporter.start()
        self._open()
        if self._progress_interval_ms:
            self._progress = ProgressReporter(
                group=self.group,
                member=self.member_id(),
                snapshot=self._progress_snapshot,
                producer_config=self.base_config(),
                interval_ms=self._progress_interval_ms,
                lead_ms=self._progress_lead_ms,
                topic=self._progress_topic,
            )
            self._progress.start()
        log.info("%s of group %s connected: obeying %s", self.kind, self.group, self.control_topic)

    def member_id(self) -> str:
        """Who this worker is in its progress reports: its static membership id, else
        host and process id."""
        return getattr(self, "instance_id", "") or f"{socket.gethostname()}-{os.getpid()}"

    def _progress_snapshot(self) -> list[PartitionProgress]:
        if self._closing:  # every partition released: it finishes what runs, fetches no more
            return []
        return [
            PartitionProgress(t, p, pos, at_ms, in_flight, running)
            for (t, p), (pos, at_ms, in_flight, running) in self._dispatcher.progress().items()
            if not self._held((t, p))
        ]

    def _released(self, tps: Iterable[TopicPart], *, handed_off: bool = False) -> None:
        """Partitions this worker gave up (or handed to a pool): its next report says so,
        so the pipeline sees a rebalance, not a dead worker."""
        if self._progress is not None:
            self._progress.release(tps, handed_off=handed_off)

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                self._poll_once()
        except BaseException as exc:
            self.error = exc
            log.exception("%s loop of group %s stopped on an error", self.kind, self.group)
            raise
        finally:
            self._shutdown()

    def _poll_once(self) -> None:
        assert self._consumer is not None and self._control is not None
        batch = self._fetch()
        if batch:
            self._intake(batch)
        now_ms = _now_ms()
        for cmd in self._control.poll(now_ms):
            log.info("%s of group %s obeys %s", self.kind, self.group, cmd)
            self._obeying.obey(cmd)
        self._tick(now_ms)
        self._flow()
        self._committing.commit_due()

    def _fetch(self) -> list[Message]:
        """What the consumer holds now (up to the room the lanes' buffers have left), else the
        first message within 0.1 s.

        ``consume(n, timeout=0.1)`` alone returns only when n messages are in or the 0.1 s
        have passed: on a slow topic every message would wait for the timeout, however short
        its work. A batch of what is already fetched, or one message as soon as it lands,
        keeps both the batches and the latency. The batch is as large as the room left, not
        a fixed 500: each poll cycle gives up the interpreter lock in every client call and,
        beside many busy lanes, waits to win it back, so small batches capped the intake."""
        assert self._consumer is not None
        size = max(MIN_BATCH, min(self._committing.room, MAX_BATCH))
        return self._consumer.consume(num_messages=size, timeout=0) or self._consumer.consume(
            num_messages=1, timeout=0.1
        )

    def _intake(self, batch: list[Message]) -> None:
        """Hand a polled batch to the lanes in one go (held partitions' messages dropped)."""
        ok: list[Message] = []
        held: dict[TopicPart, bool] = {}
        dropped = 0
        for msg in batch:
            err = msg.error()
            if err is not None:
                self._count("consumer_error")
                if is_fatal(err):
                    raise KafkaException(err)
                continue
            tp = (msg.topic(), msg.partition())
            hold = held.get(tp)
            if hold is None:
                hold = held[tp] = self._held(tp)
            if hold:
                dropped += 1
            else:
                ok.append(msg)
        dropped += self._dispatcher.submit_many(ok)
        if dropped:
            self._count("dropped_held", dropped)

    def _shutdown(self) -> None:
        try:
            if self._consumer is not None:
                self._before_drain()
                self._closing = True
                self._released(self._assigned)
                self._close_partitions(list(self._assigned), self._close_timeout_s)
                self._before_close()
                self._consumer.close()
        except KafkaException as exc:
            log.warning("closing the %s of group %s: %s", self.kind, self.group, exc)
        finally:
            self._consumer = None
            if self._progress is not None:
                self._progress.stop()  # its last report releases the partitions
            self._dispatcher.shutdown()
            if self._processes is not None:  # after the partitions closed: see its close()
                self._processes.close()
            if self._control is not None:
                self._control.close()
            if self._reporter is not None:
                self._reporter.close()
            if self._owns_store:
                self.dedupe.close()

    # -- subclass hooks -----------------------------------------------------------------------

    @abc.abstractmethod
    def _open(self) -> None:
        """Build the consumer and obtain partitions (subscribe, or assign hand-offs)."""

    @abc.abstractmethod
    def _apply(self, cmd: Command) -> None:
        """Obey a partition-level command (spread, restore, hand-off)."""

    def _tick(self, now_ms: int) -> None:
        return None

    def _held(self, tp: TopicPart) -> bool:
        """True for partitions this worker must neither process nor commit (handed off)."""
        return False

    def _metadata(self, tp: TopicPart) -> str:
        return ""

    def _before_drain(self) -> None:
        """Shutdown, before partitions are drained and committed."""
        return None

    def _before_close(self) -> None:
        return None

    def _restore_all(self) -> None:
        """An actions halt: every spread partition back to the default lanes (subclasses also
        return hand-offs)."""
        self._obeying.restore_lanes()

    # -- the parts' calls, under the names the subclasses (and their tests) use -------------

    def _report(self, cmd: Command, did: str, tp: TopicPart | None = None, **detail: Any) -> None:
        """Say on the outcomes topic what this instance did with ``cmd`` (docs/events.md)."""
        self._obeying.report(cmd, did, tp, **detail)

    @property
    def instance(self) -> str:
        """Who this worker is in its outcome reports: its static membership id, else host:pid."""
        return self._obeying.instance

    def _flow(self) -> None:
        self._committing.flow()

    def _commit(
        self, positions: dict[TopicPart, int], *, asynchronous: bool, metadata: str | None = None
    ) -> bool:
        return self._committing.commit(positions, asynchronous=asynchronous, metadata=metadata)

    def _close_partitions(self, tps: Iterable[TopicPart], timeout_s: float) -> None:
        self._committing.close_partitions(tps, timeout_s)

    def _on_commit(self, err: Any, partitions: list[TopicPartition]) -> None:
        """The consumer's ``on_commit`` callback (runs inside consume() on the poll thread)."""
        self._committing.on_commit(err, partitions)

    def _current_position(self, tp: TopicPart) -> int | None:
        return self._committing.current_position(tp)

    # -- introspection -------------------------------------------------------------------------

    def _count(self, name: str, n: int = 1) -> None:
        self._tally.count(name, n)

    def stats(self) -> dict[str, int]:
        """Counters: processed, retried, failed, commits, paused, obeyed_*, control_*."""
        out = self._tally.snapshot()
        if self._control is not None:
            out.update({f"control_{k}": v for k, v in self._control.counts.items()})
        return out

    def paused(self) -> set[TopicPart]:
        """Partitions paused right now (backpressure, halt, or handed off)."""
        return set(self._paused)

    def assignment(self) -> set[TopicPart]:
        return set(self._assigned)

    def lanes(self, topic: str, partition: int) -> int:
        return self._dispatcher.lanes((topic, partition))

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()
