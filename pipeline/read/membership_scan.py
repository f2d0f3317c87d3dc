"""At start, read the group membership that ``__consumer_offsets`` already holds (an I/O edge).

The commits source resumes ``__consumer_offsets`` where its consumer group left off, which
is right for commits (the lag model keeps positions in its state store) but leaves group
health blind to every group that does not rebalance again: its membership records are
older than that position. The topic is compacted, so each group's latest membership
records are still there. This scan reads each newly assigned offsets partition from its
beginning up to where the source starts, in a thread with its own consumer, and hands
the membership records (commits are skipped by their key's record type, undecoded: they
are nearly all of the topic) to the reading loop, which applies them with
their offsets: group health drops a record the live reader already superseded
(``HealthFold.apply`` in ``pipeline.read.health``).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from typing import Any

from pipeline.read.offsets import Skipped, decode_record, is_own_group
from runtime.cli import CLIENT_LOG
from schemas import OffsetCommit, OffsetDeleted

log = logging.getLogger(__name__)

#: (partition, offset, timestamp ms, record) of one membership record; None: scan done
Item = tuple[int, int, int, Any] | None


class MembershipScan:
    """Scans ``partitions`` of ``offsets_topic`` up to the source group's committed offsets."""

    def __init__(
        self,
        broker_config: dict[str, Any],
        *,
        offsets_topic: str,
        source_group: str,
        partitions: set[int],
        own_prefix: str,
        timeout_s: float = 120.0,
    ) -> None:
        self.broker_config = broker_config
        self.offsets_topic = offsets_topic
        self.source_group = source_group
        self.partitions = sorted(partitions)
        self.own_prefix = own_prefix
        self.timeout_s = timeout_s
        self.out: queue.Queue[Item] = queue.Queue(maxsize=50_000)
        self.records = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="membership-scan", daemon=True)

    def start(self) -> MembershipScan:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        try:
            self._scan()
        except Exception as exc:  # group health then learns groups at their next rebalance
            log.warning("membership scan of %s failed: %s", self.offsets_topic, exc)
        finally:
            self.out.put(None)

    def _ends(self) -> dict[int, int]:
        """Where the source starts each partition: its group's committed offset (nothing
        to scan without one: the source itself reads that partition from the start)."""
        from confluent_kafka import TopicPartition

        tps = [TopicPartition(self.offsets_topic, p) for p in self.partitions]
        lookup = _committed_lookup(self.broker_config, self.source_group)
        return {tp.partition: tp.offset for tp in lookup(tps) if tp.offset > 0}

    def _scan(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            {
                **self.broker_config,
                "logger": CLIENT_LOG,
                "group.id": f"lagpilot-scan-{uuid.uuid4().hex[:8]}",  # never joins
                "enable.auto.commit": False,
                "enable.partition.eof": True,
            }
        )
        try:
            ends = self._ends()
            if not ends:
                return
            consumer.assign([TopicPartition(self.offsets_topic, p, -2) for p in ends])
            todo = set(ends)
            deadline = time.monotonic() + self.timeout_s
            while todo and not self._stop.is_set() and time.monotonic() < deadline:
                for msg in consumer.consume(num_messages=2000, timeout=0.2):
                    p = msg.partition()
                    if p not in todo:
                        continue
                    if msg.error():
                        if msg.error().code() == -191:  # _PARTITION_EOF
                            todo.discard(p)
                        continue
                    if msg.offset() >= ends[p]:
                        todo.discard(p)
                        consumer.incremental_unassign([TopicPartition(self.offsets_topic, p)])
                        continue
                    key = msg.key()
                    if key is None or key[:2] in (b"\x00\x00", b"\x00\x01"):  # commits: skipped
                        continue
                    record = decode_record(key, msg.value())
                    if isinstance(record, Skipped | OffsetCommit | OffsetDeleted):
                        continue
                    if is_own_group(record.group, self.own_prefix):
                        continue
                    self.records += 1
                    self.out.put((p, msg.offset(), msg.timestamp()[1], record))
            if todo:
                log.warning("membership scan stopped before the end of partitions %s", todo)
        finally:
            consumer.close()


def _committed_lookup(broker_config: dict[str, Any], group: str) -> Any:
    """``committed(tps)`` of ``group`` without joining it: a consumer that never subscribes."""
    from confluent_kafka import Consumer

    def lookup(tps: list[Any]) -> list[Any]:
        c = Consumer(
            {**broker_config, "logger": CLIENT_LOG, "group.id": group, "enable.auto.commit": False}
        )
        try:
            return list(c.committed(tps, timeout=10))
        finally:
            c.close()

    return lookup
