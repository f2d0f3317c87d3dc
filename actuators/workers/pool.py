"""``PoolWorker``: the overflow pool's side of a hand-off (see handoff for the protocol).

A pool serves one owner group under a pool name (e.g. workers with more memory for the
partition full of 500-page PDFs). It holds no subscription: it takes exactly the partitions
handed to it, by ``assign()`` from the owner's recorded position, processes them with the
same handler machinery (lanes, dedupe with the owner group's idempotency keys), and gives
them back on ``restore_partition``. Run one pool process per pool name; a restart resumes
the partitions it held from its own group's committed ``taken`` markers.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from actuators.workers.control import Command
from actuators.workers.engine import Engine
from actuators.workers.handoff import (
    HANDOFF_MARGIN_MS,
    TAKEN,
    OffsetPeek,
    check_pool_name,
    parse_marker,
    pool_group_id,
    returned_marker,
    taken_marker,
)
from actuators.workers.lanes import TopicPart
from schemas import ActionType, ConfigError

log = logging.getLogger(__name__)


class PoolWorker(Engine):
    """Processes partitions of ``group`` handed off to pool ``pool``.

    ``take_timeout_s``: how long to wait for the owner's hand-off marker before giving up on
    a hand-off (the owner may have lost the partition before recording it).
    ``lease_s``: how long each ``taken`` commit lets the pool hold a partition; renewed every
    third of it while the owner's marker still names this hand-off. A pool that dies holds
    nothing longer than this: the owner takes the partition back (see handoff).
    """

    kind = "pool"

    def __init__(
        self,
        *,
        pool: str,
        take_timeout_s: float = 60.0,
        check_s: float = 0.1,
        lease_s: float = 10.0,
        **settings: Any,
    ) -> None:
        super().__init__(**settings)
        self.pool = check_pool_name(pool)
        self.pool_group = pool_group_id(self.group, pool)
        self._take_timeout_s = take_timeout_s
        self._check_s = check_s
        self._taking: dict[TopicPart, tuple[str, float]] = {}  # action id, deadline
        self._held_ids: dict[TopicPart, str] = {}  # held partition -> hand-off action id
        self._returning: dict[TopicPart, str] = {}
        self._return_asked: set[TopicPart] = set()
        self._return_pos: dict[TopicPart, int] = {}  # fixed once running work ended
        self._last_check = 0.0
        if lease_s < 1.0:
            raise ConfigError(f"lease_s={lease_s}: use at least 1 s (10 s is the default)")
        self._lease_ms = int(lease_s * 1000)
        self._last_renew = 0.0
        self._peek = OffsetPeek(self.base_config())

    def consumer_config(self) -> dict[str, Any]:
        return {
            "auto.offset.reset": "earliest",
            **self.base_config(),
            # assign() only: it never joins (so no group protocol applies), commits as a
            # simple consumer
            "group.id": self.pool_group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "on_commit": self._on_commit,
        }

    def _open(self) -> None:
        self._consumer = Consumer(self.consumer_config())
        self._resume_held()

    def _resume_held(self) -> None:
        """After a restart: take back what this pool held (``taken`` markers in its group)."""
        admin = AdminClient(self.base_config())
        request = [ConsumerGroupTopicPartitions(self.pool_group)]
        result = admin.list_consumer_group_offsets(request)[self.pool_group].result(timeout=10)
        for tp in result.topic_partitions or []:
            marker = parse_marker(tp.metadata)
            if marker is not None and marker.kind == TAKEN and tp.offset >= 0:
                if not self._still_ours((tp.topic, tp.partition), marker.action_id):
                    self._count("lease_lost")  # the owner took it back while we were down
                    continue
                self._assign((tp.topic, tp.partition), tp.offset, marker.action_id)

    # -- control -------------------------------------------------------------------------------

    def _apply(self, cmd: Command) -> None:
        assert cmd.topic is not None and cmd.partition is not None
        tp = (cmd.topic, cmd.partition)
        if cmd.type is ActionType.SPREAD_PARTITION and cmd.pool == self.pool:
            if tp not in self._held_ids and tp not in self._taking:
                self._taking[tp] = (cmd.action_id, time.monotonic() + self._take_timeout_s)
        elif cmd.type is ActionType.SPREAD_PARTITION and cmd.pool is None and tp in self._held_ids:
            self._dispatcher.set_lanes(tp, cmd.lanes or self._default_lanes)
        elif cmd.type is ActionType.RESTORE_PARTITION:
            if tp in self._held_ids:
                self._begin_return(tp)
            elif tp in self._taking:
                self._return_asked.add(tp)

    def _restore_all(self) -> None:
        """An actions halt: give back every partition held or being taken."""
        super()._restore_all()
        for tp in list(self._held_ids):
            if tp not in self._returning:
                self._begin_return(tp)
        self._return_asked.update(self._taking)

    def _held(self, tp: TopicPart) -> bool:
        return tp in self._returning

    def _metadata(self, tp: TopicPart) -> str:
        action_id = self._held_ids.get(tp)
        lease = int(time.time() * 1000) + self._lease_ms
        return taken_marker(action_id, lease) if action_id else ""

    def _still_ours(self, tp: TopicPart, action_id: str) -> bool:
        """The owner's committed marker still names this pool's hand-off ``action_id``."""
        _, marker = self._peek.committed(self.group, *tp)
        return marker is not None and marker.is_handoff(action_id, self.pool)

    def _renew(self) -> None:
        """Renew the lease of every held partition, or let go of one the owner took back."""
        for tp, action_id in list(self._held_ids.items()):
            if tp in self._returning:
                continue
            if not self._still_ours(tp, action_id):
                self._let_go(tp)
                continue
            pos = self._dispatcher.positions().get(tp)
            if pos is None:
                pos = self._current_position(tp)
            if pos is not None:
                self._commit({tp: pos}, asynchronous=False)

    def _let_go(self, tp: TopicPart) -> None:
        """The owner took the partition back (our lease had run out): stop, commit nothing."""
        assert self._consumer is not None
        self._dispatcher.close([tp], 0)
        self._consumer.incremental_unassign([TopicPartition(*tp)])
        for held in (self._held_ids, self._return_pos):
            held.pop(tp, None)
        self._assigned.discard(tp)
        self._paused.discard(tp)
        self._count("lease_lost")
        log.warning("pool %s lost %s: the owner took it back", self.pool, tp)

    # -- the protocol --------------------------------------------------------------------------

    def _tick(self, now_ms: int) -> None:
        now = time.monotonic()
        if self._held_ids and now - self._last_renew >= self._lease_ms / 3000:
            self._last_renew = now
            self._renew()
        if self._taking and now - self._last_check >= self._check_s:
            self._last_check = now
            for tp, (action_id, deadline) in list(self._taking.items()):
                offset, marker = self._peek.committed(self.group, *tp)
                mine = marker is not None and marker.is_handoff(action_id, self.pool)
                if (
                    mine
                    and marker is not None
                    and marker.until_ms is not None
                    and (now_ms > marker.until_ms - HANDOFF_MARGIN_MS)
                ):  # too late: the owner takes it back at its deadline
                    del self._taking[tp]
                    self._return_asked.discard(tp)
                    self._count("take_too_late")
                elif offset is not None and mine:
                    del self._taking[tp]
                    self._commit({tp: offset}, asynchronous=False, metadata=taken_marker(action_id))
                    self._assign(tp, offset, action_id)
                    if tp in self._return_asked:
                        self._return_asked.discard(tp)
                        self._begin_return(tp)
                elif now > deadline:
                    del self._taking[tp]
                    self._return_asked.discard(tp)
                    self._count("take_timeout")
                    log.warning("no hand-off marker for %s from %s: gave up", tp, self.group)
        for tp in [tp for tp in self._returning if not self._dispatcher.running(tp)]:
            self._finish_return(tp)

    def _assign(self, tp: TopicPart, offset: int, action_id: str) -> None:
        assert self._consumer is not None
        self._consumer.incremental_assign([TopicPartition(tp[0], tp[1], offset)])
        self._held_ids[tp] = action_id
        self._assigned.add(tp)
        self._count("taken")
        log.info("pool %s took %s at offset %d", self.pool, tp, offset)

    def _begin_return(self, tp: TopicPart) -> None:
        assert self._consumer is not None
        self._returning[tp] = self._held_ids[tp]
        self._consumer.pause([TopicPartition(*tp)])
        self._paused.add(tp)
        self._dispatcher.begin_close(tp)

    def _finish_return(self, tp: TopicPart) -> None:
        """Step 3, pool side: record the final position with the ``returned`` marker."""
        assert self._consumer is not None
        action_id = self._returning[tp]
        pos = self._return_pos.get(tp)
        if pos is None:
            pos = self._dispatcher.close([tp], 0)[tp]
            if pos is None:
                pos = self._current_position(tp)
            assert pos is not None
            self._return_pos[tp] = pos
        if not self._commit({tp: pos}, asynchronous=False, metadata=returned_marker(action_id)):
            return  # retried on the next tick with the same position
        self._consumer.incremental_unassign([TopicPartition(*tp)])
        for held in (self._returning, self._held_ids, self._return_pos):
            held.pop(tp, None)
        self._assigned.discard(tp)
        self._paused.discard(tp)
        self._count("returned")
        log.info("pool %s returned %s at offset %d", self.pool, tp, pos)

    def _before_close(self) -> None:
        self._peek.close()

    def held(self) -> set[TopicPart]:
        return set(self._held_ids)
