"""Each consumer group's health, from the coordinator's own records (pure, ``now`` passed in).

The group coordinator writes a group's membership to ``__consumer_offsets`` next to its
commits: a classic group one ``GroupMetadata`` (type 2) after every rebalance, a KIP-848
group its epoch, members and assignments (types 3..8). :class:`GroupHealth` folds those
records and the group's commits into, per group: protocol, state, generation (or epoch),
members, the assignment (partition -> member), rebalances per minute, members joined and
left in the window, whether its commits stalled, and a status.

The status rules, in severity order (the first that holds wins):

1. ``STORM``: the generation moved ``storm_rebalances`` times or more within
   ``storm_window_s`` while no commit of the group advanced for ``stall_s``, or while a
   partition held by a member that left in the window did not advance for ``stall_s``
   (one poisoned partition kills each member that takes it, and the rest of the group
   keeps committing). The member identity that left most often in the window (its
   instance id, else client id @ host: a restarted member comes back with a new member
   id) is named, with the stuck partitions (else the partitions it held). Evaluated at
   the record that moves the generation, so it is published with that record's batch
   (well inside a second).
2. ``EMPTY``: no members.
3. ``REBALANCING``: a KIP-848 group assigning or reconciling, or a generation moved
   within the last ``stall_s``.
4. ``OK``.

A group's rebalance times are the records' own timestamps (the coordinator's clock), so a
replay of an old log after a restart does not look like a storm now.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pipeline.model.group_state import (
    STATUSES,
    Group,
    HealthConfig,
    Member,
    Owner,
    deleted_event,
    group_state,
)
from pipeline.model.record_order import RecordOrder
from pipeline.read.consumer_group_records import (
    ConsumerGroupEpoch,
    ConsumerGroupRecord,
    ConsumerGroupTombstone,
    ConsumerMemberAssignment,
    ConsumerMemberMetadata,
    ConsumerPartitionMetadata,
    ConsumerTargetEpoch,
)
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

    def _topic(self, g: Group, key: str) -> str | None:
        return self.topic_names.get(key) if g.protocol == "consumer" else key

    def _index_owners(self, g: Group) -> None:
        new: dict[str, dict[int, Owner]] = {}
        for m in g.members.values():
            owner = Owner(m.member_id, m.client_id, m.client_host)
            for key, parts in m.assignment.items():
                topic = self._topic(g, key)
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

    def _trim(self, g: Group, now_ms: int) -> None:
        edge = now_ms - int(self.cfg.storm_window_s * 1000)
        while g.rebalances and g.rebalances[0] < edge:
            g.rebalances.popleft()
        while g.churn and g.churn[0][0] < edge:
            g.churn.popleft()

    def _stalled(self, g: Group, now_ms: int) -> bool:
        return now_ms - g.last_progress_ms >= self.cfg.stall_s * 1000

    def _stuck(self, g: Group, now_ms: int) -> dict[str, list[int]]:
        """Partitions (topic -> partitions) held by members that left in the window, whose
        commits did not advance for ``stall_s``: what the members keep leaving with."""
        edge = now_ms - self.cfg.stall_s * 1000
        out: dict[str, set[int]] = {}
        for _, kind, _, m in g.churn:
            if kind != "left":
                continue
            for key, parts in m.assignment.items():
                topic = self._topic(g, key)
                if topic is None:
                    continue
                for p in parts:
                    if g.progress_ms.get((topic, p), g.last_progress_ms) <= edge:
                        out.setdefault(topic, set()).add(p)
        return {t: sorted(ps) for t, ps in sorted(out.items())}

    def status(self, name: str, now_ms: int) -> str:
        """The group's status now (rules in the module docstring); "" for an unknown group."""
        g = self.groups.get(name)
        if g is None:
            return ""
        self._trim(g, now_ms)
        stalled = self._stalled(g, now_ms)
        state = group_state(g)
        if len(g.rebalances) >= self.cfg.storm_rebalances and (stalled or self._stuck(g, now_ms)):
            return "STORM"
        if state == "Empty":
            return "EMPTY"
        recent = g.rebalances and now_ms - g.rebalances[-1] < self.cfg.stall_s * 1000
        if state in ("Assigning", "Reconciling") or recent:
            return "REBALANCING"
        return "OK"

    def _flapping(self, g: Group, now_ms: int) -> dict[str, Any] | None:
        leaves: dict[str, list[Member]] = {}
        for _, kind, identity, m in g.churn:
            if kind == "left":
                leaves.setdefault(identity, []).append(m)
        if not leaves:
            return None
        identity, left = max(leaves.items(), key=lambda kv: (len(kv[1]), kv[0]))
        last = left[-1]
        stuck = self._stuck(g, now_ms)
        ids = (
            {self._topic(g, k): k for _, _, _, m in g.churn for k in m.assignment}
            if g.protocol == "consumer"
            else {}
        )
        held = self._assignment(g, last)
        # name the stuck partitions this member held when it last left (a poison partition
        # kills whoever takes it); only when it held none of them, every stuck one
        last_held = {a["topic"]: set(a["partitions"]) for a in held}
        mine = {t: [p for p in ps if p in last_held.get(t, ())] for t, ps in stuck.items()}
        named = {t: ps for t, ps in mine.items() if ps} or stuck
        partitions = (
            [{"topic": t, "topic_id": ids.get(t), "partitions": ps} for t, ps in named.items()]
            if stuck
            else held
        )
        return {
            "identity": identity,
            "member_id": last.member_id,
            "client_id": last.client_id,
            "client_host": last.client_host,
            "instance_id": last.instance_id,
            "leaves": len(left),
            "partitions": partitions,
        }

    def _assignment(self, g: Group, m: Member) -> list[dict[str, Any]]:
        out = []
        for key, parts in sorted(m.assignment.items()):
            topic = self._topic(g, key)
            topic_id = key if g.protocol == "consumer" else None
            out.append({"topic": topic, "topic_id": topic_id, "partitions": sorted(parts)})
        return out

    def event(self, name: str, now_ms: int) -> dict[str, Any] | None:
        """The ``group_health`` event of one group now (``schemas/group_health.v1.json``)."""
        g = self.groups.get(name)
        if g is None:
            return None
        status = self.status(name, now_ms)
        if status != g.status:
            g.status, g.status_since_ms = status, now_ms
        stalled = self._stalled(g, now_ms)
        state = group_state(g)
        window_s = self.cfg.storm_window_s
        last = g.rebalances[-1] if g.rebalances else None
        churn = [kind for _, kind, _, _ in g.churn]
        return {
            "event": "group_health",
            "v": 1,
            "group": g.name,
            "observed_at_ms": now_ms,
            "protocol": g.protocol,
            "state": state,
            "generation": g.generation,
            "status": status,
            "status_since_ms": g.status_since_ms,
            "members": [
                {
                    "member_id": m.member_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "instance_id": m.instance_id,
                    "assignment": self._assignment(g, m),
                }
                for m in sorted(g.members.values(), key=lambda m: m.member_id)
            ],
            "window_s": window_s,
            "rebalances_per_min": round(len(g.rebalances) * 60.0 / window_s, 3),
            "rebalances_total": g.rebalances_total,
            "last_rebalance_ms": last,
            "since_last_rebalance_s": None if last is None else round((now_ms - last) / 1000, 3),
            "joined": churn.count("joined"),
            "left": churn.count("left"),
            "commits_stalled": stalled,
            "last_progress_ms": g.last_progress_ms or None,
            "consumption_stopped": stalled and status in ("STORM", "REBALANCING"),
            "storm": self._flapping(g, now_ms) if status == "STORM" else None,
        }

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
