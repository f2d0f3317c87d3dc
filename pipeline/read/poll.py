"""One poll of ``__consumer_offsets`` (and ``lagpilot.progress``) into the commits buffer
and group health (pure: the messages are handed in; the commits source polls them).

Plain commits take the fast path (``Coalescer.take_many``); everything else is decoded the
careful way (``pipeline.read.offsets.decode_record``), in log order. Counters go to the
reader's ``stats``, which reach the pipeline's metrics on the counters channel
(``pipeline.read.counters``).
"""

from __future__ import annotations

import logging
import queue
from collections import Counter
from typing import Any

import orjson

from pipeline.read.coalesce import Coalescer
from pipeline.read.health import HealthFold
from pipeline.read.membership_scan import MembershipScan
from pipeline.read.offsets import Skipped, decode_record, is_own_group
from schemas import OffsetCommit, OffsetDeleted

log = logging.getLogger(__name__)


def read_poll(
    msgs: list[Any],
    buffer: Coalescer,
    health: HealthFold | None,
    scans: list[MembershipScan],
    now_ms: int,
    stats: Counter[str],
    offsets_topic: str,
    own_prefix: str,
) -> bool:
    """One poll's records into the buffer (and group health); True when it read
    progress reports (forwarded at once). Plain commits take the fast path
    (``Coalescer.take_many``); everything else is decoded the careful way, in order: the
    fast commits of tracked groups reach group health before the next record that does.
    While a start-up membership scan runs, every record goes the careful way (group
    health orders them against the scan by offset)."""
    reports = False
    i, n = 0, len(msgs)
    while i < n:
        if not scans:
            i = buffer.take_many(msgs, i, now_ms)
            if i == n:
                break
        msg = msgs[i]
        i += 1
        if msg.error():
            stats["read_errors"] += 1
            continue
        if msg.topic() != offsets_topic:
            try:
                rows = buffer.add_progress(orjson.loads(msg.value() or b""), now_ms)
                stats["progress"] += rows
                reports = reports or rows > 0
            except (AttributeError, KeyError, TypeError, ValueError):  # JSON too
                stats["progress_malformed"] += 1
            continue
        record = decode_record(msg.key(), msg.value())
        if isinstance(record, Skipped):
            kind = f"{record.reason}|{record.record_type}|{record.version}"
            stats[f"skipped|{kind}"] += 1
            continue
        commit = isinstance(record, OffsetCommit | OffsetDeleted)
        if is_own_group(record.group, own_prefix):
            stats["own_group"] += commit
            continue
        if health is not None:  # offsets order it against a start-up scan
            apply_tracked(health, buffer)
            offset = msg.offset() if scans else -1
            health.apply(record, msg.timestamp()[1], offset, msg.partition())
        if isinstance(record, OffsetCommit | OffsetDeleted):
            stats[record.event] += 1
            buffer.add(record, now_ms)
        else:  # membership: read by group health only
            stats[getattr(record, "event", "consumer_group")] += 1
    taken, own = buffer.take_counts()
    if taken:
        stats["commit"] += taken
    if own:
        stats["own_group"] += own
    if health is not None:
        apply_tracked(health, buffer)
    return reports


def apply_tracked(health: HealthFold, buffer: Coalescer) -> None:
    """The fast path's commits of groups that group health tracks, in read order."""
    for (topic, group, partition), offset, ts in buffer.take_tracked():
        health.commit(group, topic, partition, offset, ts)


def apply_scans(health: HealthFold, scans: list[MembershipScan], limit: int = 5000) -> None:
    """Apply what the start-up scans read (at most ``limit`` records a loop, so commits
    keep flowing); once every scan is done, the model stops ordering records by offset."""
    for scan in list(scans):
        for _ in range(limit):
            try:
                item = scan.out.get_nowait()
            except queue.Empty:
                break
            if item is None:
                scans.remove(scan)
                log.info("membership scan done: %d records", scan.records)
                break
            partition, offset, ts_ms, record = item
            health.apply(record, ts_ms, offset, partition)
    if not scans:
        health.forget_order()
