"""Reads every share group's state from the brokers, cheaply enough to poll every 0.25 s.

One :meth:`ShareGroupsReader.read` is, per call: ListGroups (type "share") to each broker
(each lists only the groups it coordinates, and only those the principal may describe),
FindCoordinator for groups whose coordinator is not known yet (one batched request), then
per coordinator one ShareGroupDescribe holding all its groups and one
DescribeShareGroupOffsets per group, pipelined (rule 7). Connections stay open between
calls, the broker list is refreshed from Metadata every ``metadata_max_age_s``, and
coordinators are remembered until one says it is not.

The rules, each with its reason:

1. A broker without share groups (no ShareGroupDescribe v1 / DescribeShareGroupOffsets in
   ApiVersions: Redpanda, Kafka < 4.1; or a KRaft Kafka whose finalized features in
   ApiVersions lack ``share.version`` >= 1, as 4.1 ships) reads as ``[]``, with
   :attr:`ShareGroupsReader.served` False and one log line: the pipeline runs on, there is
   nothing to read, and an error every 0.25 s would only be noise.
2. NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS forget the
   group's coordinator and ask again, once per call: a coordinator moves with its
   ``__consumer_offsets`` partition's leader. Still failing: :class:`ShareGroupsUnavailable`
   (retriable), so the caller keeps the last state rather than seeing groups vanish.
3. A dropped socket is reopened once per request; a second failure is
   ``ShareGroupsUnavailable``. The one retry lives here, none in the connection below.
4. GROUP_AUTHORIZATION_FAILED / TOPIC_AUTHORIZATION_FAILED raise
   :class:`ShareGroupsDenied` (not retriable) naming the ACL to grant: only a person fixes it.
5. A group that is gone between the listing and the describe (GROUP_ID_NOT_FOUND, state
   "Dead") is left out: it was deleted, which is what the next listing will say too.
6. A partition whose offsets carry another error (its topic deleted) is left out of its group.
7. DescribeShareGroupOffsets goes one group a request, the requests pipelined on the
   coordinator's connection: Kafka 4.4.0 answered a request naming three or more groups in
   about 2 s one time in two, and single-group requests in milliseconds (the measurement is
   in docs/share-groups.md); pipelined, they still cost one round trip.
8. Asked for all topics, DescribeShareGroupOffsets silently leaves out the topics the
   principal may not describe (Kafka 4.4.0); asked by name, it answers
   TOPIC_AUTHORIZATION_FAILED. So a topic that a member is assigned but the answer lacks
   is asked for by name, once per call: a missing ACL is then rule 4's error, not a group
   that looks idle.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pipeline.coordinator.connection import BrokerUnreachable, Connection, security_settings
from pipeline.coordinator.protocol import (
    DESCRIBE_SHARE_GROUP_OFFSETS,
    FIND_COORDINATOR,
    LIST_GROUPS,
    METADATA,
    SHARE_GROUP_DESCRIBE,
    error_name,
)
from pipeline.read.share_groups import codec
from pipeline.read.share_groups.state import ShareGroupState, SharePartitionOffsets
from schemas.errors import ConfigError, LagpilotError

log = logging.getLogger(__name__)

Address = tuple[str, int]

#: the error codes that say "ask another coordinator" (rule 2)
COORDINATOR_MOVED = frozenset({14, 15, 16})
GROUP_ID_NOT_FOUND = 69
SHARE_VERSION = "share.version"  # the feature that switches share groups on (KIP-932)
TOPIC_DENIED, GROUP_DENIED = 29, 30


class ShareGroupsError(LagpilotError):
    """The share-group reader's errors; ``retriable`` says whether the next call may work."""

    code = "share_groups"


class ShareGroupsUnavailable(ShareGroupsError):
    """Coordinators moving or loading, or a broker unreachable: the next call may work."""

    retriable = True


class ShareGroupsDenied(ShareGroupsError):
    """The principal may not describe a share group or its topic: grant the ACL named."""

    retriable = False


def _bootstrap(config: Mapping[str, Any]) -> tuple[Address, ...]:
    text = str(config.get("bootstrap.servers") or "")
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        host, _, port = item.rpartition(":")
        if not port.isdigit():
            raise ConfigError(f"bootstrap.servers={text!r}: each address is host:port")
        out.append((host or "127.0.0.1", int(port)))
    if not out:
        raise ConfigError("bootstrap.servers is empty: set KAFKA_BOOTSTRAP to host:port")
    return tuple(out)


class ShareGroupsReader:
    """configure (validates ``broker_config``, no I/O) -> :meth:`read` (connects on first
    use, keeps connections) -> :meth:`close`."""

    def __init__(
        self,
        broker_config: Mapping[str, Any],
        *,
        timeout_s: float = 5.0,
        metadata_max_age_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        connect: Callable[[str, int], Connection] | None = None,
    ) -> None:
        """``connect(host, port)`` makes an unopened connection (tests pass a fake); by
        default a :class:`Connection` with ``broker_config``'s security."""
        self._config = dict(broker_config)
        self._security = security_settings(self._config)  # a ConfigError now, not per read
        self._bootstrap = _bootstrap(self._config)
        self._timeout_s = timeout_s
        self._metadata_max_age_s = metadata_max_age_s
        self._clock = clock
        self._conns: dict[Address, Connection] = {}
        self._brokers: tuple[Address, ...] = ()
        self._brokers_at = float("-inf")
        self._coordinators: dict[str, Address] = {}
        self._served: bool | None = None
        self._connect = connect or self._real_connection

    @property
    def served(self) -> bool | None:
        """Whether the cluster serves share groups: None before the first read."""
        return self._served

    def read(self) -> list[ShareGroupState]:
        """Every share group the principal may describe, sorted by group id."""
        if not self._check_served():
            return []
        groups = self._list_groups()
        out: dict[str, ShareGroupState] = {}
        todo = set(groups)
        for attempt in range(2):  # rule 2: one re-find per call
            self._find_coordinators(todo)
            moved: set[str] = set()
            for address, ids in self._by_coordinator(todo).items():
                got, lost = self._describe(address, ids)
                out.update(got)
                moved |= lost
            if not moved:
                break
            for group in moved:
                self._coordinators.pop(group, None)
            todo = moved
            if attempt == 1:
                raise ShareGroupsUnavailable(
                    f"share groups {sorted(moved)}: their coordinators are moving or loading "
                    "(NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS)"
                )
        return [out[g] for g in sorted(out)]

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    # ------------------------------------------------------------------ the steps

    def _check_served(self) -> bool:
        conn = self._any_connection()
        finalized = conn.versions.finalized
        # a KRaft Kafka finalizes its features; share groups are on where share.version is
        # (4.1 lists the share APIs with the feature off, and its groups never start)
        feature_off = (
            "metadata.version" in finalized and finalized.get(SHARE_VERSION, (0, 0))[1] < 1
        )
        served = (
            not feature_off
            and conn.version(SHARE_GROUP_DESCRIBE, 1, 1) is not None
            and conn.version(DESCRIBE_SHARE_GROUP_OFFSETS, 0, 1) is not None
            and conn.version(LIST_GROUPS, 5, 5) is not None
            and conn.version(FIND_COORDINATOR, 4, 6) is not None
        )
        if not served and self._served is not False:
            log.warning(
                "share groups are not served by %s (%s): no share group to read",
                conn.address,
                "share.version is not finalized: kafka-features.sh upgrade --feature "
                "share.version=1 turns them on"
                if feature_off
                else "no ShareGroupDescribe v1 / DescribeShareGroupOffsets in its ApiVersions: "
                "Redpanda, or Kafka < 4.1",
            )
        self._served = served
        return served

    def _list_groups(self) -> list[str]:
        found: set[str] = set()
        for address in self._cluster():
            version = self._version(address, LIST_GROUPS, 5, 5)
            listing = codec.decode_list_groups(
                self._call(address, LIST_GROUPS, version, codec.encode_list_groups())
            )
            if listing.error_code in COORDINATOR_MOVED:
                raise ShareGroupsUnavailable(
                    f"{address[0]}:{address[1]} cannot list its groups yet "
                    f"({error_name(listing.error_code)})"
                )
            if listing.error_code:
                raise self._error(listing.error_code, "ListGroups", None, None)
            found |= {g.group_id for g in listing.groups if g.group_type.lower() == "share"}
        return sorted(found)

    def _cluster(self) -> tuple[Address, ...]:
        if self._brokers and self._clock() - self._brokers_at < self._metadata_max_age_s:
            return self._brokers
        conn = self._any_connection()
        address = (conn.host, conn.port)
        version = self._version(address, METADATA, 12, 12)
        body = self._call(address, METADATA, version, codec.encode_metadata())
        self._brokers = tuple((b.host, b.port) for b in codec.decode_metadata_brokers(body))
        self._brokers_at = self._clock()
        return self._brokers

    def _find_coordinators(self, groups: Iterable[str]) -> None:
        unknown = sorted(g for g in groups if g not in self._coordinators)
        if not unknown:
            return
        conn = self._any_connection()
        address = (conn.host, conn.port)
        version = self._version(address, FIND_COORDINATOR, 4, 6)
        body = self._call(
            address, FIND_COORDINATOR, version, codec.encode_find_coordinator(unknown)
        )
        for c in codec.decode_find_coordinator(body):
            if c.error_code == 0:
                self._coordinators[c.key] = (c.host, c.port)
            elif c.error_code == GROUP_DENIED:
                raise self._error(c.error_code, "FindCoordinator", c.key, None)
            # a coordinator not available yet stays unknown: rule 2 retries it

    def _by_coordinator(self, groups: Iterable[str]) -> dict[Address, list[str]]:
        out: dict[Address, list[str]] = {}
        missing = []
        for group in sorted(groups):
            if group in self._coordinators:
                out.setdefault(self._coordinators[group], []).append(group)
            else:
                missing.append(group)
        if missing:
            raise ShareGroupsUnavailable(
                f"share groups {missing}: no coordinator available yet (FindCoordinator)"
            )
        return out

    def _describe(
        self, address: Address, ids: list[str]
    ) -> tuple[dict[str, ShareGroupState], set[str]]:
        """One ShareGroupDescribe and one DescribeShareGroupOffsets for ``ids`` on their
        coordinator: (the groups read, the groups whose coordinator moved)."""
        try:
            described = codec.decode_share_group_describe(
                self._call(address, SHARE_GROUP_DESCRIBE, 1, codec.encode_share_group_describe(ids))
            )
            # one group a request, pipelined (rule 7)
            version = self._version(address, DESCRIBE_SHARE_GROUP_OFFSETS, 0, 1)
            bodies = [codec.encode_describe_offsets([g]) for g in ids]
            answers = self._calls(address, DESCRIBE_SHARE_GROUP_OFFSETS, version, bodies)
            offsets = [o for a in answers for o in codec.decode_describe_offsets(a, version)]
        except ShareGroupsUnavailable:
            return {}, set(ids)  # the coordinator went away: find it again (rule 2)
        by_group = {o.group_id: o for o in offsets}
        got: dict[str, ShareGroupState] = {}
        moved: set[str] = set()
        for d in described:
            if d.error_code in COORDINATOR_MOVED:
                moved.add(d.group_id)
                continue
            if d.error_code == GROUP_ID_NOT_FOUND or d.state == "Dead":
                continue  # rule 5
            if d.error_code:
                raise self._error(
                    d.error_code, "ShareGroupDescribe", d.group_id, None, d.error_message
                )
            o = by_group.get(d.group_id)
            if o is not None and o.error_code in COORDINATOR_MOVED:
                moved.add(d.group_id)
                continue
            if o is not None and o.error_code == GROUP_ID_NOT_FOUND:
                continue
            if o is not None and o.error_code:
                raise self._error(
                    o.error_code, "DescribeShareGroupOffsets", d.group_id, None, o.error_message
                )
            o = self._unlisted_topics(address, d, o)
            partitions = self._partitions(d.group_id, o)
            if partitions is None:
                moved.add(d.group_id)
                continue
            got[d.group_id] = ShareGroupState(d.group_id, d.state, len(d.members), partitions)
        return got, moved

    def _unlisted_topics(
        self, address: Address, d: codec.DescribedGroup, o: codec.GroupOffsets | None
    ) -> codec.GroupOffsets | None:
        """Rule 8: topics the members are assigned but the all-topics answer left out are
        asked for by name, so a denial surfaces as TOPIC_AUTHORIZATION_FAILED."""
        have = {p.topic for p in o.partitions} if o is not None else set()
        missing: dict[str, set[int]] = {}
        for member in d.members:
            for topic, partition in member.assigned:
                if topic not in have:
                    missing.setdefault(topic, set()).add(partition)
        if not missing:
            return o
        version = self._version(address, DESCRIBE_SHARE_GROUP_OFFSETS, 0, 1)
        body = codec.encode_describe_offsets_of(d.group_id, missing)
        (extra,) = codec.decode_describe_offsets(
            self._call(address, DESCRIBE_SHARE_GROUP_OFFSETS, version, body), version
        )
        if o is None:
            return extra
        return codec.GroupOffsets(o.group_id, o.error_code, o.error_message,
                                  o.partitions + extra.partitions)  # fmt: skip

    def _partitions(
        self, group: str, o: codec.GroupOffsets | None
    ) -> tuple[SharePartitionOffsets, ...] | None:
        """The group's readable partitions, sorted; None when a partition says the
        coordinator moved (rule 2)."""
        out = []
        for p in () if o is None else o.partitions:
            if p.error_code in COORDINATOR_MOVED:
                return None
            if p.error_code == TOPIC_DENIED:
                raise self._error(p.error_code, "DescribeShareGroupOffsets", group, p.topic)
            if p.error_code:  # rule 6
                log.debug("share group %s %s[%d]: %s", group, p.topic, p.partition,
                          error_name(p.error_code))  # fmt: skip
                continue
            out.append(
                SharePartitionOffsets(
                    group, p.topic, p.partition, p.start_offset, p.leader_epoch, p.lag
                )
            )
        return tuple(sorted(out, key=lambda s: (s.topic, s.partition)))

    # ------------------------------------------------------------------ errors and sockets

    def _error(
        self, code: int, api: str, group: str | None, topic: str | None, said: str | None = None
    ) -> ShareGroupsError:
        """The typed error for a broker's error code; ``said`` is the broker's message."""
        who = f"User:{self._security.username}" if self._security.username else "its principal"
        said = f" (the broker said: {said})" if said else ""
        if code == GROUP_DENIED:
            return ShareGroupsDenied(
                f"{api}: GROUP_AUTHORIZATION_FAILED for share group {group}{said}: grant {who} "
                f"DESCRIBE on Group:{group} (kafka-acls --add --allow-principal {who} "
                f"--operation Describe --group {group})",
                code="GROUP_AUTHORIZATION_FAILED",
            )
        if code == TOPIC_DENIED:
            # ShareGroupDescribe names no topic: it denies when any subscribed one is denied
            target = f"Topic:{topic}" if topic else "each topic the group subscribes to"
            return ShareGroupsDenied(
                f"{api}: TOPIC_AUTHORIZATION_FAILED reading share group {group}{said}: grant "
                f"{who} DESCRIBE on {target} (kafka-acls --add --allow-principal {who} "
                f"--operation Describe --topic {topic or '<topic>'})",
                code="TOPIC_AUTHORIZATION_FAILED",
            )
        name = error_name(code)
        return ShareGroupsError(
            f"{api} for share group {group}: the broker answered {name}{said}", code=name
        )

    def _version(self, address: Address, api_key: int, lowest: int, highest: int) -> int:
        version = self._connection(address).version(api_key, lowest, highest)
        if version is None:
            raise ShareGroupsError(
                f"{address[0]}:{address[1]} has no version {lowest}-{highest} of API {api_key} "
                "although the bootstrap broker serves share groups: a cluster mid-upgrade?",
                retriable=True,
            )
        return version

    def _any_connection(self) -> Connection:
        """An open connection to a bootstrap broker, the first that answers."""
        failures = []
        for address in self._bootstrap:
            try:
                return self._connection(address)
            except BrokerUnreachable as exc:
                failures.append(str(exc))
        raise ShareGroupsUnavailable("no bootstrap broker answers: " + "; ".join(failures))

    def _real_connection(self, host: str, port: int) -> Connection:
        return Connection(host, port, self._config, timeout_s=self._timeout_s)

    def _connection(self, address: Address) -> Connection:
        conn = self._conns.get(address)
        if conn is None:
            conn = self._connect(*address)
            self._conns[address] = conn
        if not conn.is_open:
            conn.open()
        return conn

    def _call(self, address: Address, api_key: int, version: int, body: bytes) -> bytes:
        return self._calls(address, api_key, version, [body])[0]

    def _calls(
        self, address: Address, api_key: int, version: int, bodies: list[bytes]
    ) -> list[bytes]:
        """Requests of one API, pipelined; a dropped socket is reopened once (rule 3)."""
        try:
            return self._connection(address).requests(api_key, version, bodies)
        except BrokerUnreachable:
            pass
        try:
            return self._connection(address).requests(api_key, version, bodies)
        except BrokerUnreachable as exc:
            self._brokers_at = float("-inf")  # the cluster may have changed: ask again
            raise ShareGroupsUnavailable(f"{exc} (after one reconnect)") from None
