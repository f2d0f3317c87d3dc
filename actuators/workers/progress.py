"""Progress reports: what a worker has processed, every sampling tick, whatever its commits.

A consumer's commits are lagpilot's only view of its progress unless it says more: a group
that commits every 5 s (Kafka's and Quix Streams' default) shows a stall only once its next
commit is overdue, 7.5 s later. So SDK workers publish, every ``interval_ms`` (125 ms, half
the pipeline's sampling cadence; ``LAGPILOT_PROGRESS_INTERVAL_MS``), one small ``progress``
event (``schemas/progress.v1.json``) to ``lagpilot.progress``: per owned partition, the
contiguous processed prefix, when it last advanced, and how many messages are queued and
running. The lag model judges the status from it (``pipeline/model/progress.py``) and sees a
stall within half a second.

The model judges a report that shows a stalled worker the moment it lands, so a stall is
seen one report interval (at most) after it shows, whatever the sampler's phase. Reports
also go out ``lead_ms`` (``LAGPILOT_PROGRESS_LEAD_MS``) before each wall-clock multiple of
the interval, where the pipeline's sampler ticks: a sample then finds every report a few
milliseconds old rather than up to one interval. Clocks must be in sync (NTP) for that, and
for the model's reading of ``progress_ms``; a late report costs detection time, not a false
alarm.

A worker that stops reporting while its partitions' watermarks move is itself the signal
(hung or dead): the model reports those partitions STOP, naming the member and host of the
last report. Partitions the worker gives up are listed once in ``released`` (no one
consumes them until their new owner does: a rebalance is seen from its first moment, and
never as a dead worker), those it hands to a pool in ``handed_off``.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from schemas import ConfigError, topics

log = logging.getLogger(__name__)

# Half the pipeline's sampling interval: the model judges a report that shows a stalled
# worker the moment it lands (not at the next sample), so the report cadence, not the
# sampler's, bounds detection: half the sampling interval keeps it well under half a second,
# with a margin for late reports. One small message per worker every 125 ms.
DEFAULT_INTERVAL_MS = 125
# before the sampler's tick: room for a thread that wakes late on a busy host and for the
# trip through the broker to the pipeline's reader
DEFAULT_LEAD_MS = 40
INTERVAL_ENV = "LAGPILOT_PROGRESS_INTERVAL_MS"
LEAD_ENV = "LAGPILOT_PROGRESS_LEAD_MS"


def progress_timing(
    interval_ms: int | None = None,
    lead_ms: int | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[int, int]:
    """The reporting cadence and lead: the argument, else ``LAGPILOT_PROGRESS_INTERVAL_MS``
    / ``LAGPILOT_PROGRESS_LEAD_MS``, else the defaults (125, 40); validated. An interval
    of 0 turns the reports off (the lead is then ignored)."""
    env = os.environ if env is None else env

    def pick(value: int | None, key: str, name: str, default: int) -> int:
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{name}={value!r}: expected a whole number of milliseconds")
            return value
        raw = (env.get(key) or "").strip()
        if not raw:
            return default
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(
                f"{key}={raw!r}: expected a whole number of milliseconds (default {default})"
            ) from None

    interval = pick(interval_ms, INTERVAL_ENV, "progress_interval_ms", DEFAULT_INTERVAL_MS)
    lead = pick(lead_ms, LEAD_ENV, "progress_lead_ms", DEFAULT_LEAD_MS)
    if interval == 0:
        return 0, 0
    if not 10 <= interval <= 60_000:
        raise ConfigError(
            f"progress_interval_ms / {INTERVAL_ENV}={interval}: must be between 10 and 60000 "
            f"(default {DEFAULT_INTERVAL_MS}; at most the pipeline's sample_interval_ms for "
            "sub-second detection), or 0 to turn the reports off"
        )
    if not 0 <= lead < interval:
        raise ConfigError(
            f"progress_lead_ms / {LEAD_ENV}={lead}: must be >= 0 and below the interval "
            f"({interval} ms); default {DEFAULT_LEAD_MS}"
        )
    return interval, lead


@dataclass(frozen=True, slots=True)
class PartitionProgress:
    """One partition's processed position, as a worker reports it."""

    topic: str
    partition: int
    processed_offset: int  # next offset to process: everything below it is processed
    progress_ms: int  # when processed_offset last advanced (or the first delivery)
    in_flight: int = 0  # delivered, not finished
    running: int = 0  # of those, in a handler now


def progress_event(
    *,
    group: str,
    member: str,
    host: str,
    sent_at_ms: int,
    interval_ms: int,
    partitions: Iterable[PartitionProgress],
    released: Iterable[tuple[str, int]] = (),
    handed_off: Iterable[tuple[str, int]] = (),
) -> dict[str, Any]:
    """The ``progress`` event (schemas/progress.v1.json) of one report."""
    event = {
        "event": "progress",
        "v": 1,
        "group": group,
        "member": member,
        "host": host,
        "sent_at_ms": sent_at_ms,
        "interval_ms": interval_ms,
        "partitions": [
            {
                "topic": p.topic,
                "partition": p.partition,
                "processed_offset": p.processed_offset,
                "progress_ms": p.progress_ms,
                "in_flight": p.in_flight,
                "running": p.running,
            }
            for p in partitions
        ],
        "released": [[t, p] for t, p in released],
    }
    handed = [[t, p] for t, p in handed_off]
    if handed:
        event["handed_off"] = handed
    return event


def next_report_s(now_s: float, interval_s: float, lead_s: float) -> float:
    """The wall-clock time of the next report: ``lead_s`` before the next multiple of
    ``interval_s`` (the sampler's grid) that is more than ``lead_s`` away."""
    return (math.floor((now_s + lead_s) / interval_s) + 1) * interval_s - lead_s


class ProgressReporter:
    """Publishes ``snapshot()`` as a ``progress`` event every ``interval_ms`` on a thread.

    ``snapshot`` returns the worker's partitions (``PartitionProgress``); it runs on the
    reporter's thread and must be thread-safe. ``release(tps)`` queues partitions the
    worker gave up for the next report. ``producer`` (anything with confluent-kafka's
    ``produce``/``poll``/``flush``) is built from ``producer_config`` when not given.
    """

    def __init__(
        self,
        *,
        group: str,
        member: str,
        snapshot: Callable[[], list[PartitionProgress]],
        producer_config: dict[str, Any] | None = None,
        producer: Any = None,
        host: str | None = None,
        interval_ms: int | None = None,
        lead_ms: int | None = None,
        topic: str = topics.PROGRESS,
    ) -> None:
        interval_ms, lead_ms = progress_timing(interval_ms, lead_ms)
        if interval_ms == 0:
            raise ConfigError(
                "progress_interval_ms=0 turns the reports off: do not build a ProgressReporter"
            )
        if producer is None and producer_config is None:
            raise ConfigError("ProgressReporter needs producer_config or producer")
        self.group, self.member = group, member
        self.host = host if host is not None else socket.gethostname()
        self.interval_ms, self.lead_ms, self.topic = interval_ms, lead_ms, topic
        self._snapshot = snapshot
        self._producer_config = producer_config
        self._producer = producer
        self._released: list[tuple[str, int]] = []
        self._handed: list[tuple[str, int]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.sent = 0
        self.errors = 0

    def release(self, tps: Iterable[tuple[str, int]], *, handed_off: bool = False) -> None:
        """Say in the next report that these partitions are no longer this worker's:
        released (no one consumes them until a new owner does) or handed to a pool."""
        with self._lock:
            (self._handed if handed_off else self._released).extend(tps)

    def report(self, now_ms: int | None = None) -> dict[str, Any]:
        """Build and publish one report now (the thread calls this every interval)."""
        with self._lock:
            released, self._released = list(dict.fromkeys(self._released)), []
            handed, self._handed = list(dict.fromkeys(self._handed)), []
        event = progress_event(
            group=self.group,
            member=self.member,
            host=self.host,
            sent_at_ms=int(time.time() * 1000) if now_ms is None else now_ms,
            interval_ms=self.interval_ms,
            partitions=self._snapshot(),
            released=released,
            handed_off=handed,
        )
        if event["partitions"] or event["released"] or handed:
            try:
                self._producer.produce(
                    self.topic,
                    orjson.dumps(event),
                    key=self.group.encode(),
                    on_delivery=self._delivered,
                )
                self.sent += 1
            except Exception as exc:  # a full queue (BufferError), an unknown topic
                self.errors += 1
                log.debug("progress report not sent: %s", exc)
            self._producer.poll(0)
        return event

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors += 1
            log.debug("progress report failed: %s", err)

    def start(self) -> None:
        if self._producer is None:
            from confluent_kafka import Producer

            # no batching delay: a report is worth something only before the next sample
            self._producer = Producer({**(self._producer_config or {}), "linger.ms": 0})
        self._thread = threading.Thread(target=self._run, name="lagpilot-progress", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        interval_s, lead_s = self.interval_ms / 1000, self.lead_ms / 1000
        while not self._stop.is_set():
            due = next_report_s(time.time(), interval_s, lead_s)
            if self._stop.wait(max(0.0, due - time.time())):
                break
            try:
                self.report()
            except Exception:  # a snapshot error must not end the reports
                self.errors += 1
                log.exception("progress report of group %s failed", self.group)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop reporting; send the partitions released meanwhile, then flush."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self._producer is not None:
            with self._lock:
                pending = bool(self._released or self._handed)
            if pending:
                self._snapshot = list  # the last report releases, it claims nothing
                self.report()
            self._producer.flush(timeout_s)
