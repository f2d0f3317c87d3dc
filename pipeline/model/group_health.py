"""Each consumer group's health, from the coordinator's own records (pure, ``now`` passed in).

The group coordinator writes a group's membership to ``__consumer_offsets`` next to its
commits: a classic group one ``GroupMetadata`` (type 2) after every rebalance, a KIP-848
group its epoch, members and assignments (types 3..8). :class:`GroupHealth` folds those
records and the group's commits into, per group: protocol, state, generation (or epoch),
members, the assignment (partition -> member), rebalances per minute, members joined and
left in the window, whether its commits stalled, and a status.

A group's status (``STORM``, ``EMPTY``, ``REBALANCING``, ``OK``) and its ``group_health``
event are judged from that fold by :mod:`pipeline.model.group_status`, where the rules
are; here are the fold, the owners index (KIP-848 topic ids resolved to names) and when
each group's event is due.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pipeline.coordinator.records import (
    ConsumerGroupEpoch,
    ConsumerGroupRecord,
    ConsumerGroupTombstone,
    ConsumerMemberAssignment,
    ConsumerMemberMetadata,
    ConsumerPartitionMetadata,
    ConsumerTargetEpoch,
)
from pipeline.model.group_state import (
    STATUSES,
    Group,
    HealthConfig,
    Member,
    Owner,
    deleted_event,
    topic_of,
)
from pipeline.model.group_status import group_status, health_event
from pipeline.model.record_order import RecordOrder
from schemas.offsets import GroupMetadata, GroupRemoved, OffsetCommit, OffsetDeleted

__all__ = ["STATUSES", "GroupHealth", "HealthConfig", "Owner"]


class GroupHealth:
    """The health of every group seen on ``__consumer_offsets``.

    Feed it decoded records with :meth:`apply` (own groups already filtered) and ask
    :meth:`due` for the ``group_health`` events to publish now; :meth:`owners` gives a
    topic's partition owners for ``partition_lag`` events."""

    def __init__(self, cfg: HealthConfig | None = None) -> None:
        self.cfg = cfg or HealthConfig()
        self.groups: dict[str, Group] = {}
        self.topic_names: dict[str, str] = {}  # KIP-848 topic id -> name
        self._dirty: set[str] = set()
        self._removed: list[tuple[str, bool]] = []
        self._owners: dict[str, dict[str, dict[int, Owner]]] = {}  # topic -> group -> p
        self._owners_changed: set[str] = set()
        self._next_scan_ms = 0
        self._order = RecordOrder()  # live records against a start-up scan's replay
        self._partition_of: dict[str, int] = {}  # group -> its __consumer_offsets partition

    # -- records ---------------------------------------------------------------------------

    def apply(self, record: object, ts_ms: int, offset: int = -1, partition: int = -1) -> None:
        """One decoded record, ``ts_ms`` its timestamp on ``__consumer_offsets``.

        ``offset`` (its offset there; ``-1``: do not order) orders live records against
        those a start-up scan (:mod:`pipeline.read.membership_scan`) reads again, until
        :meth:`forget_order`: all records of a group share one offsets partition, so a
        lower offset of the same record key is older, and one below the group's deletion
        is of a group that is gone. ``partition`` (that offsets partition) lets
        :meth:`forget_partitions` drop the groups of a partition this replica gave up."""
        if offset >= 0 and self._order.stale(record, offset):
            return
        if partition >= 0 and not isinstance(record, OffsetCommit | OffsetDeleted):
            self._partition_of[getattr(record, "group", "")] = partition
        if isinstance(record, OffsetCommit):
            self._commit(record, ts_ms)
        elif isinstance(record, OffsetDeleted):
            g = self.groups.get(record.group)
            if g is not None:
                g.positions.pop((record.topic, record.partition), None)
                g.progress_ms.pop((record.topic, record.partition), None)
        elif isinstance(record, GroupMetadata):
            self._classic(record, ts_ms)
        elif isinstance(record, GroupRemoved):
            self._remove(record.group, ts_ms)
        elif isinstance(record, ConsumerPartitionMetadata):
            for topic_id, name, _ in record.topics:
                self.learn_topic_ids({topic_id: name})
        elif isinstance(
            record,
            ConsumerGroupEpoch
            | ConsumerMemberMetadata
            | ConsumerMemberAssignment
            | ConsumerTargetEpoch
            | ConsumerGroupTombstone,
        ):
            self._consumer(record, ts_ms)

    def forget_partitions(self, partitions: set[int]) -> None:
        """Drop, without a word, the groups of offsets partitions another replica now reads:
        that replica publishes their health from here on."""
        for name in [g for g, p in self._partition_of.items() if p in partitions]:
            del self._partition_of[name]
            g = self.groups.pop(name, None)
            if g is not None:
                g.members = {}
                self._index_owners(g)
                self._dirty.discard(name)

    def forget_order(self) -> None:
        """A start-up scan is over: no older record can come any more."""
        self._order.forget()

    def _group(self, name: str, protocol: str) -> Group:
        g = self.groups.get(name)
        if g is None:
            g = self.groups[name] = Group(name, protocol)
        g.protocol = protocol
        return g

    def _commit(self, c: OffsetCommit, ts_ms: int) -> None:
        self.commit(c.group, c.topic, c.partition, c.offset, c.commit_ts_ms or ts_ms)

    def commit(self, group: str, topic: str, partition: int, offset: int, at: int) -> None:
        """An offset commit of ``group`` at ``at`` (its commit time, ms), as the commits
        source's fast path reads it (no record object): only groups with membership
        records are tracked."""
        g = self.groups.get(group)
        if g is None:  # a group that only commits (no membership records): not tracked
            return
        key = (topic, partition)
        prev = g.positions.get(key)
        g.positions[key] = offset
        if prev is None:
            g.progress_ms.setdefault(key, at)  # first seen: stuck is counted from here
        elif offset > prev:
            g.last_progress_ms = max(g.last_progress_ms, at)
            g.progress_ms[key] = max(g.progress_ms.get(key, 0), at)

    def _moved(self, g: Group, generation: int, ts_ms: int) -> None:
        if generation != g.generation:
            if g.generation >= 0 or generation > 0:
                g.rebalances.append(ts_ms)
                g.rebalances_total += 1
            g.generation = generation
        self._dirty.add(g.name)

    def _left(self, g: Group, m: Member, ts_ms: int) -> None:
        g.churn.append((ts_ms, "left", m.identity, m))

    def _classic(self, r: GroupMetadata, ts_ms: int) -> None:
        g = self._group(r.group, "classic")
        new: dict[str, Member] = {}
        for gm in r.members:
            new[gm.member_id] = Member(
                gm.member_id,
                gm.client_id,
                gm.client_host,
                gm.group_instance_id,
                {a.topic: a.partitions for a in gm.assignment},
            )
        for mid, m in g.members.items():
            if mid not in new:
                self._left(g, m, ts_ms)
        for mid, m in new.items():
            if mid not in g.members:
                g.churn.append((ts_ms, "joined", m.identity, m))
        g.members = new
        self._moved(g, r.generation, ts_ms)
        self._index_owners(g)

    def _consumer(self, r: ConsumerGroupRecord, ts_ms: int) -> None:
        if isinstance(r, ConsumerGroupTombstone) and r.kind == "group_epoch":
            self._remove(r.group, ts_ms)
            return
        g = self._group(r.group, "consumer")
        if isinstance(r, ConsumerGroupEpoch):
            self._moved(g, r.epoch, ts_ms)
        elif isinstance(r, ConsumerTargetEpoch):
            g.target_epoch = r.assignment_epoch
        elif isinstance(r, ConsumerMemberMetadata):
            m = g.members.get(r.member_id)
            if m is None:
                m = g.members[r.member_id] = Member(r.member_id, "", "", None)
                g.churn.append((ts_ms, "joined", "", m))
            m.client_id, m.client_host, m.instance_id = r.client_id, r.client_host, r.instance_id
            m.subscribed = r.subscribed_topics if not r.subscribed_regex else ("*",)
            if g.churn and g.churn[-1][3] is m:  # name the join with the identity just read
                g.churn[-1] = (g.churn[-1][0], "joined", m.identity, m)
        elif isinstance(r, ConsumerMemberAssignment):
            m = g.members.get(r.member_id)
            if m is not None:
                m.assignment = {tp.topic_id: tp.partitions for tp in r.assigned}
                m.member_epoch = r.member_epoch
                self._index_owners(g)
        elif isinstance(r, ConsumerGroupTombstone) and r.kind == "member_metadata":
            m = g.members.pop(r.member_id or "", None)
            if m is not None:
                self._left(g, m, ts_ms)
                self._index_owners(g)
        self._dirty.add(g.name)

    def _remove(self, name: str, ts_ms: int) -> None:
        self._partition_of.pop(name, None)
        g = self.groups.pop(name, None)
        if g is None:
            return
        g.members = {}
        self._index_owners(g)
        self._dirty.discard(name)
        if g.sent_ms:  # never published (e.g. created and deleted in one replayed batch): quiet
            self._removed.append((name, g.protocol == "consumer"))

    # -- ownership -------------------------------------------------------------------------

    def learn_topic_ids(self, names: dict[str, str]) -> None:
        """Topic id -> name (from the cluster's metadata, or pre-4.1 partition metadata)."""
        fresh = {k: v for k, v in names.items() if self.topic_names.get(k) != v}
        if not fresh:
            return
        self.topic_names.update(fresh)
        for g in self.groups.values():
            if g.protocol == "consumer" and any(
                t in fresh for m in g.members.values() for t in m.assignment
            ):
                self._index_owners(g)
                self._dirty.add(g.name)

    def unknown_topic_ids(self) -> set[str]:
        """KIP-848 topic ids in an assignment whose name is not known yet."""
        return {
            t
            for g in self.groups.values()
            if g.protocol == "consumer"
            for m in g.members.values()
            for t in m.assignment
            if t not in self.topic_names
        }

    def topics_to_resolve(self) -> set[str]:
        """Names whose ids to look up: the subscriptions of members with an unknown topic
        id in their assignment (``*``: a regex subscription, every topic)."""
        return {
            name
            for g in self.groups.values()
            if g.protocol == "consumer"
            for m in g.members.values()
            if any(t not in self.topic_names for t in m.assignment)
            for name in m.subscribed
        }

    def _index_owners(self, g: Group) -> None:
        new: dict[str, dict[int, Owner]] = {}
        for m in g.members.values():
            owner = Owner(m.member_id, m.client_id, m.client_host)
            for key, parts in m.assignment.items():
                topic = topic_of(g, key, self.topic_names)
                if topic is not None:
                    new.setdefault(topic, {}).update(dict.fromkeys(parts, owner))
        for topic in set(new) | {t for t, per in self._owners.items() if g.name in per}:
            per = self._owners.setdefault(topic, {})
            if per.get(g.name) != new.get(topic):
                self._owners_changed.add(topic)
                if topic in new:
                    per[g.name] = new[topic]
                else:
                    per.pop(g.name, None)
            if not per:
                del self._owners[topic]

    def owners(self, topic: str) -> list[list[Any]]:
        """``[[group, partition, member_id, client_id, client_host], ...]`` for ``topic``."""
        return [
            [group, p, *owner]
            for group, per in sorted(self._owners.get(topic, {}).items())
            for p, owner in sorted(per.items())
        ]

    def drain_owner_changes(self) -> set[str]:
        """Topics whose owners changed since the last call."""
        out, self._owners_changed = self._owners_changed, set()
        return out

    def owned_topics(self) -> list[str]:
        return sorted(self._owners)

    # -- status and events -----------------------------------------------------------------

    def status(self, name: str, now_ms: int) -> str:
        """The group's status now (:func:`pipeline.model.group_status.group_status`); "" for
        an unknown group."""
        g = self.groups.get(name)
        return "" if g is None else group_status(g, now_ms, self.cfg, self.topic_names)

    def event(self, name: str, now_ms: int) -> dict[str, Any] | None:
        """The ``group_health`` event of one group now (``schemas/group_health.v1.json``)."""
        g = self.groups.get(name)
        return None if g is None else health_event(g, now_ms, self.cfg, self.topic_names)

    def due(self, now_ms: int) -> list[dict[str, Any]]:
        """The events to publish now: every group a record changed, every group whose status
        changed with time (scanned every 250 ms), every deleted group once (status
        ``DELETED``, then forgotten), and every group each ``interval_ms``."""
        names = set(self._dirty)
        self._dirty.clear()
        if now_ms >= self._next_scan_ms:
            self._next_scan_ms = now_ms + 250
            names.update(self.groups)
        window_s = self.cfg.storm_window_s
        out = [deleted_event(name, kip848, now_ms, window_s) for name, kip848 in self._removed]
        self._removed.clear()
        for name in sorted(names):
            g = self.groups.get(name)
            if g is None:
                continue
            ev = self.event(name, now_ms)
            if ev is None:
                continue
            key = (ev["status"], ev["generation"], ev["state"], len(ev["members"]))
            if key != g.sent_key or now_ms - g.sent_ms >= self.cfg.interval_ms:
                g.sent_key, g.sent_ms = key, now_ms
                out.append(ev)
        return out

    def summary(self, now_ms: int) -> Iterable[tuple[str, str, int, int, int]]:
        """(group, status, members, generation, rebalances_total) of every group: metrics."""
        for name, g in sorted(self.groups.items()):
            yield name, self.status(name, now_ms), len(g.members), g.generation, g.rebalances_total
