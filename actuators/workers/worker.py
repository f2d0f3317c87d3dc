"""``Worker``: the consumer agent workers use in place of a raw confluent-kafka consumer.

It subscribes with static membership and incremental rebalances (cooperative-sticky under
the classic group protocol, the broker's assignor under KIP-848: see group_protocol), runs
the handler on lanes off the poll loop (see lanes), commits only processed prefixes (see
tracker), keeps side effects once-only (see dedupe), and obeys the control topic within one
poll cycle (~0.1 s): halt/resume, spread/restore lanes, and hand-off of a partition to a
pool (the owner side of handoff).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import replace
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from actuators.workers.control import Command
from actuators.workers.engine import Engine
from actuators.workers.group_protocol import group_settings
from actuators.workers.handoff import (
    HANDOFF,
    HANDOFF_MARGIN_MS,
    RETURNED,
    TAKEN,
    Marker,
    OffsetPeek,
    handoff_marker,
    parse_marker,
    pool_group_id,
)
from actuators.workers.lanes import TopicPart
from actuators.workers.outcomes import HANDOFF_RETURNED, HANDOFF_STARTED, RESTORED, SPREAD
from schemas import ActionType, ConfigError

log = logging.getLogger(__name__)

INSTANCE_ID_ENV = "LAGPILOT_WORKER_INSTANCE_ID"


class Worker(Engine):
    """A member of consumer group ``group`` processing ``topics`` with ``handler(msg, ctx)``.

    ``instance_id`` is the static membership id (``group.instance.id``): a restart with the
    same id within ``session.timeout.ms`` gets its partitions back without a rebalance. It
    must be unique per live process; it defaults to ``$LAGPILOT_WORKER_INSTANCE_ID``, else
    the host name (stable for Kubernetes StatefulSet pods). Pass ``instance_id=""`` for
    dynamic membership. ``group_protocol`` (an ``Engine`` keyword): ``"classic"`` or
    ``"consumer"`` (KIP-848), default ``$LAGPILOT_WORKER_GROUP_PROTOCOL``, else classic;
    under both, a static member that restarts within the session timeout gets its
    partitions back (group_protocol says what differs). Other settings: see ``Engine``'s
    keywords in docs/workers.md.
    """

    kind = "worker"

    def __init__(
        self,
        *,
        topics: list[str],
        instance_id: str | None = None,
        handoff_check_s: float = 0.25,
        handoff_confirm_s: float = 10.0,
        **settings: Any,
    ) -> None:
        super().__init__(**settings)
        if (
            isinstance(topics, str)
            or not topics
            or not all(isinstance(t, str) and t for t in topics)
        ):
            # a bare string would be read as a list of one-letter topics
            raise ConfigError(f"topics={topics!r}: pass a non-empty list of topic names")
        self.topics = list(topics)
        if instance_id is None:
            instance_id = os.environ.get(INSTANCE_ID_ENV) or f"{socket.gethostname()}-{self.group}"
        self.instance_id = instance_id
        self._handoff_check_s = handoff_check_s
        if handoff_confirm_s * 1000 <= 2 * HANDOFF_MARGIN_MS:
            raise ConfigError(
                f"handoff_confirm_s={handoff_confirm_s}: must be over "
                f"{2 * HANDOFF_MARGIN_MS / 1000:g} s (the pool takes a hand-off only "
                f"{HANDOFF_MARGIN_MS / 1000:g} s before it); 10 s is the default"
            )
        self._handoff_confirm_ms = int(handoff_confirm_s * 1000)
        self._handing: dict[TopicPart, Marker] = {}  # waiting for running messages to finish
        self._handed: dict[TopicPart, Marker] = {}  # out with a pool
        self._handoff_pos: dict[TopicPart, int] = {}  # position fixed when running work ended
        self._last_check: dict[TopicPart, float] = {}
        self._intents: dict[TopicPart, Command] = {}  # the latest spread/restore per partition
        self._mirrored: dict[TopicPart, int] = {}  # the pool's position last committed here
        self._peek = OffsetPeek(self.base_config())
        self.rebalances = 0

    def consumer_config(self) -> dict[str, Any]:
        config = {
            "group.id": self.group,
            # classic: cooperative-sticky and a short heartbeat; consumer: the broker's
            **group_settings(self.group_protocol),
            "auto.offset.reset": "earliest",
            **self.base_config(),
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "on_commit": self._on_commit,
        }
        if self.instance_id:
            config["group.instance.id"] = self.instance_id
        return config

    def _open(self) -> None:
        self._consumer = Consumer(self.consumer_config())
        self._consumer.subscribe(
            self.topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )

    # -- rebalances (called inside consume()) ----------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.rebalances += 1
        if partitions:
            # a hand-off outlives its owner: a new owner finds the marker and keeps off
            for tp in consumer.committed(partitions, timeout=10):
                marker = parse_marker(tp.metadata)
                if marker is not None and marker.kind == HANDOFF:
                    self._handed[(tp.topic, tp.partition)] = marker
        consumer.incremental_assign(partitions)
        tps = [(tp.topic, tp.partition) for tp in partitions]
        self._assigned.update(tps)
        log.info("worker %s assigned %s", self.instance_id, tps)
        now_ms = int(time.time() * 1000)
        for tp in tps:  # a command sent while the partition had no owner is obeyed now
            intent = self._intents.get(tp)
            if intent is not None and intent.expires_at >= now_ms:
                self._act(tp, intent)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.rebalances += 1
        tps = [(tp.topic, tp.partition) for tp in partitions]
        log.info("worker %s revoked %s", self.instance_id, tps)
        for tp in tps:
            if tp in self._handing:  # finish the hand-off so the pool is not left waiting
                self._finish_handoff(tp, self._close_timeout_s)
        self._close_partitions(tps, self._close_timeout_s)
        self._forget(tps)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Lost, not revoked: someone else may own them already; a commit would be refused.
        self.rebalances += 1
        tps = [(tp.topic, tp.partition) for tp in partitions]
        self._dispatcher.close(tps, 0)
        self._forget(tps)
        self._count("lost", len(tps))

    def _forget(self, tps: list[TopicPart]) -> None:
        self._released(tps)
        for tp in tps:
            self._assigned.discard(tp)
            self._paused.discard(tp)
            self._acked.pop(tp, None)
            self._handing.pop(tp, None)
            self._handed.pop(tp, None)
            self._handoff_pos.pop(tp, None)
            self._mirrored.pop(tp, None)

    # -- control -------------------------------------------------------------------------------

    def _apply(self, cmd: Command) -> None:
        """Obey now if the partition is ours; remember it as the partition's intent anyway.

        Every worker of the group sees every command, so each one keeps the latest command
        per partition: a partition that has no owner when the command arrives (mid-rebalance,
        its owner just died) is handed off or spread by whoever is assigned it next, until
        the command expires.
        """
        assert cmd.topic is not None and cmd.partition is not None
        tp = (cmd.topic, cmd.partition)
        self._intents[tp] = cmd
        if tp in self._assigned:
            self._act(tp, cmd)

    def _act(self, tp: TopicPart, cmd: Command) -> None:
        if cmd.type is ActionType.SPREAD_PARTITION and cmd.pool:
            if not self._held(tp):
                self._handing[tp] = Marker(HANDOFF, cmd.action_id, cmd.pool)
                assert self._consumer is not None
                self._consumer.pause([TopicPartition(*tp)])
                self._paused.add(tp)
                self._dispatcher.begin_close(tp)
        elif cmd.type is ActionType.SPREAD_PARTITION:
            lanes = cmd.lanes or self._default_lanes
            self._dispatcher.set_lanes(tp, lanes)
            self._report(cmd, SPREAD, tp, lanes=lanes)
        elif cmd.type is ActionType.RESTORE_PARTITION:
            if tp in self._handed:
                self._last_check.pop(tp, None)  # the pool is returning it: look now
            else:
                self._dispatcher.set_lanes(tp, self._default_lanes)
                self._report(cmd, RESTORED, tp, lanes=self._default_lanes)

    def _restore_all(self) -> None:
        """An actions halt: lanes back to the default, and no remembered spread is re-applied
        by a later owner. Handed-off partitions come back when their pool, which obeys the
        same halt, writes its RETURNED marker."""
        super()._restore_all()
        for tp, intent in list(self._intents.items()):
            if intent.type is ActionType.SPREAD_PARTITION:
                del self._intents[tp]
        for tp in self._handed:
            self._last_check.pop(tp, None)  # look for the pool's return now

    def _held(self, tp: TopicPart) -> bool:
        return tp in self._handing or tp in self._handed

    def _tick(self, now_ms: int) -> None:
        for tp in [tp for tp in self._handing if not self._dispatcher.running(tp)]:
            self._finish_handoff(tp, 0)
        now = time.monotonic()
        for tp, marker in list(self._handed.items()):
            if now - self._last_check.get(tp, 0.0) < self._handoff_check_s:
                continue
            self._last_check[tp] = now
            assert marker.pool is not None
            offset, theirs = self._peek.committed(pool_group_id(self.group, marker.pool), *tp)
            if theirs is not None and theirs.action_id == marker.action_id:
                if offset is not None and theirs.kind == RETURNED:
                    self._take_back(tp, offset)
                elif offset is not None and theirs.kind == TAKEN and theirs.expired(now_ms):
                    # the pool died (or cannot reach the broker): its lease ran out
                    self._take_back(tp, offset, why="lease_expired")
                elif (
                    offset is not None
                    and theirs.kind == TAKEN
                    and offset > self._mirrored.get(tp, -1)
                ):
                    self._mirror(tp, marker, offset)
            elif marker.expired(now_ms):  # the pool never confirmed: it has nothing
                own, _ = self._peek.committed(self.group, *tp)
                if own is not None:
                    self._take_back(tp, own, why="unconfirmed")

    def _mirror(self, tp: TopicPart, marker: Marker, offset: int) -> None:
        """Commit the pool's processed position in this group, under the same hand-off
        marker: the group's lag (lagpilot's model, KEDA, Burrow: anything that reads this
        group's commits) shows the partition draining in the pool instead of a position
        frozen at the hand-off. Nothing is lost: the pool processed everything below it,
        and the partition stays the pool's until its ``returned`` marker (or its lease ends)."""
        assert marker.pool is not None
        metadata = handoff_marker(marker.pool, marker.action_id, marker.until_ms)
        if self._commit({tp: offset}, asynchronous=False, metadata=metadata):
            self._mirrored[tp] = offset
            self._count("handoff_mirrored")

    def _finish_handoff(self, tp: TopicPart, timeout_s: float) -> None:
        """Step 1 of the protocol: commit the processed prefix with the hand-off marker."""
        marker = self._handing[tp]
        if marker.until_ms is None:  # the pool must confirm by then, counted from now
            marker = replace(marker, until_ms=int(time.time() * 1000) + self._handoff_confirm_ms)
            self._handing[tp] = marker
        assert marker.pool is not None
        pos = self._handoff_pos.get(tp)
        if pos is None:
            pos = self._dispatcher.close([tp], timeout_s)[tp]
            if pos is None:
                pos = self._current_position(tp)
            assert pos is not None
            self._handoff_pos[tp] = pos  # a failed marker commit retries with the same position
        if self._commit(
            {tp: pos},
            asynchronous=False,
            metadata=handoff_marker(marker.pool, marker.action_id, marker.until_ms),
        ):
            del self._handing[tp]
            del self._handoff_pos[tp]
            self._handed[tp] = marker
            self._released([tp], handed_off=True)  # the pool processes it now
            self._count("handed_off")
            self._report_step(
                marker.action_id, ActionType.SPREAD_PARTITION, HANDOFF_STARTED, tp, pos, marker.pool
            )
            log.info("handed %s off to pool %s at offset %d", tp, marker.pool, pos)

    def _take_back(self, tp: TopicPart, offset: int, why: str | None = None) -> None:
        """Step 3, owner side: continue exactly where the pool stopped (``why``: the pool
        returned it (None), its lease ran out, or it never confirmed)."""
        assert self._consumer is not None
        target = TopicPartition(tp[0], tp[1], offset)
        try:
            self._consumer.seek(target)
        except KafkaException:
            self._consumer.incremental_unassign([TopicPartition(*tp)])
            self._consumer.incremental_assign([target])
            self._paused.discard(tp)
        if self._commit({tp: offset}, asynchronous=False, metadata=""):
            marker = self._handed.pop(tp)
            self._mirrored.pop(tp, None)
            restore = self._intents.get(tp)
            if restore is not None and restore.type is ActionType.RESTORE_PARTITION:
                self._report(restore, HANDOFF_RETURNED, tp, offset=offset, pool=marker.pool)
            else:  # the pool returned it on its own (e.g. caught up): credit the hand-off
                self._report_step(
                    marker.action_id,
                    ActionType.SPREAD_PARTITION,
                    HANDOFF_RETURNED,
                    tp,
                    offset,
                    marker.pool,
                )
            self._count("taken_back")
            if why is not None:
                self._count(f"taken_back_{why}")
            log.info("took %s back from the pool at offset %d (%s)", tp, offset, why or "returned")

    def _report_step(
        self,
        action_id: str,
        kind: ActionType,
        did: str,
        tp: TopicPart,
        offset: int,
        pool: str | None,
    ) -> None:
        self._report(Command(action_id, kind), did, tp, offset=offset, pool=pool)

    def _before_drain(self) -> None:
        # a hand-off under way is completed, so the pool is not left waiting for the marker
        for tp in list(self._handing):
            self._finish_handoff(tp, self._close_timeout_s)

    def _before_close(self) -> None:
        self._peek.close()
