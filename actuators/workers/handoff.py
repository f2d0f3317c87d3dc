"""The hand-off protocol: a hot partition moves to an overflow pool and back, exactly.

The durable hand-off record is Kafka's own committed offset with its metadata string, so
nothing new has to be stored and it survives any process dying:

1. The owner (a ``Worker`` of group G) gets ``spread_partition{pool: P}``: it pauses the
   partition, abandons queued messages, waits for the running ones, and commits position X
   in G with metadata ``lagpilot:handoff:P:<action id>``. From then on it neither processes
   nor commits that partition (a new owner after a rebalance reads the marker on assignment
   and keeps it paused too).
2. The pool (a ``PoolWorker`` serving G as P, group ``G.pool.P``) gets the same event, waits
   until G's committed metadata carries that marker, commits X in its own group with
   ``lagpilot:taken:<id>`` and reads the partition by ``assign()`` from exactly X, committing
   its progress there (a pool restart resumes from it).
   While the pool holds it, the owner copies the pool's committed position into G under
   the same hand-off marker (every ``handoff_check_s``), so G's lag shows the partition
   draining there.
3. ``restore_partition`` makes the pool pause, finish its running messages and commit its
   position Y with ``lagpilot:returned:<id>``, then let go. The owner polls the pool group's
   metadata; on ``returned`` for its marker's id it seeks to Y, commits Y in G (clearing the
   marker) and resumes.

Leases, so that a hand-off cannot orphan a partition. The hand-off marker carries a confirm
deadline (``lagpilot:handoff:P:<id>:<confirm_by_ms>``); the pool takes only before it, and
every ``taken`` commit carries the pool's lease (``lagpilot:taken:<id>:<lease_until_ms>``),
renewed a few times per lease while it holds the partition. The owner takes the partition
back, from the pool's last committed position (or from X if the pool never took it), when
the pool has not confirmed by the deadline or its lease has run out: a pool that died, or
never ran, holds nothing for long. A pool renews only while the owner's marker still names
its hand-off; when the owner took it back, the pool lets go without committing. What a pool
processed after its last commit is processed again by the owner, and the dedupe store
(shared across hosts: PostgresDedupeStore) skips its side effects. Hosts' clocks must agree
to well within ``HANDOFF_MARGIN_MS``.

Nothing is lost: X and Y are contiguous processed prefixes, each side starts exactly at the
other's. Nothing is repeated: the only messages processed on both sides are the ones above
the prefix that happened to finish on another lane; their idempotency keys are the owner
group's on both sides, so the dedupe store skips their side effects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, TopicPartition

PREFIX = "lagpilot"
HANDOFF = "handoff"
TAKEN = "taken"
RETURNED = "returned"


#: the pool takes a hand-off only this long before its confirm deadline, so that an owner
#: taking it back at the deadline and a pool taking it cannot both hold it (clock skew)
HANDOFF_MARGIN_MS = 2000


@dataclass(frozen=True)
class Marker:
    kind: str  # HANDOFF, TAKEN or RETURNED
    action_id: str
    pool: str | None = None  # HANDOFF only
    until_ms: int | None = None  # HANDOFF: the confirm deadline; TAKEN: the lease's end

    def is_handoff(self, action_id: str, pool: str) -> bool:
        return self.kind == HANDOFF and self.action_id == action_id and self.pool == pool

    def expired(self, now_ms: int) -> bool:
        """A deadline or lease that has passed (markers written before leases never do)."""
        return self.until_ms is not None and now_ms > self.until_ms


def pool_group_id(group: str, pool: str) -> str:
    """The consumer group a pool commits its hand-off progress in; both sides derive it."""
    return f"{group}.pool.{pool}"


def check_pool_name(pool: str) -> str:
    if not pool or ":" in pool:
        raise ValueError(f"pool name {pool!r} must be non-empty and contain no ':'")
    return pool


def handoff_marker(pool: str, action_id: str, confirm_by_ms: int | None = None) -> str:
    base = f"{PREFIX}:{HANDOFF}:{check_pool_name(pool)}:{action_id}"
    return base if confirm_by_ms is None else f"{base}:{confirm_by_ms}"


def taken_marker(action_id: str, lease_until_ms: int | None = None) -> str:
    base = f"{PREFIX}:{TAKEN}:{action_id}"
    return base if lease_until_ms is None else f"{base}:{lease_until_ms}"


def returned_marker(action_id: str) -> str:
    return f"{PREFIX}:{RETURNED}:{action_id}"


def parse_marker(metadata: str | None) -> Marker | None:
    """The marker in a committed offset's metadata, or None (plain commits, other tools)."""
    if not metadata:
        return None
    parts = metadata.split(":")
    if parts[0] != PREFIX:
        return None
    until = _ms(parts[4]) if len(parts) == 5 and parts[1] == HANDOFF else None
    if len(parts) in (4, 5) and parts[1] == HANDOFF and parts[2] and parts[3]:
        if len(parts) == 5 and until is None:
            return None
        return Marker(HANDOFF, parts[3], parts[2], until)
    if len(parts) == 4 and parts[1] == TAKEN and parts[2]:
        lease = _ms(parts[3])
        return None if lease is None else Marker(TAKEN, parts[2], None, lease)
    if len(parts) == 3 and parts[1] in (TAKEN, RETURNED) and parts[2]:
        return Marker(parts[1], parts[2])
    return None


def _ms(text: str) -> int | None:
    return int(text) if text.isdigit() else None


class OffsetPeek:
    """Reads another group's committed offsets and metadata (OffsetFetch needs no membership).

    One idle consumer per group, created on first use; none of them ever joins its group.
    """

    def __init__(self, config: dict[str, Any]) -> None:
        self._config = config
        self._consumers: dict[str, Consumer] = {}

    def committed(
        self, group: str, topic: str, partition: int, timeout_s: float = 5.0
    ) -> tuple[int | None, Marker | None]:
        consumer = self._consumers.get(group)
        if consumer is None:
            consumer = Consumer({**self._config, "group.id": group, "enable.auto.commit": False})
            self._consumers[group] = consumer
        (tp,) = consumer.committed([TopicPartition(topic, partition)], timeout=timeout_s)
        offset = tp.offset if tp.offset >= 0 else None
        return offset, parse_marker(tp.metadata)

    def close(self) -> None:
        for consumer in self._consumers.values():
            consumer.close()
        self._consumers.clear()
