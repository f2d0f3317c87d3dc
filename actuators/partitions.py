"""Partition count and leadership over the Kafka protocol.

CreatePartitions goes through confluent-kafka's AdminClient. Leadership moves on Apache Kafka
have no direct API: the replica list is reordered with AlterPartitionReassignments so the
target is the preferred (first) replica, then a preferred leader election makes it the leader.
Reordering the same replica set moves no data. confluent-kafka 2.12 has no
AlterPartitionReassignments, so that call (and the election, to keep them on one client) uses
kafka-python's KafkaAdminClient. Each operation checks the current state first, so applying
the same action twice changes nothing the second time.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import kafka.errors as kafka_errors
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions

from actuators.errors import ActuatorError, from_kafka

PREFERRED_ELECTION = 0


def leadership_noop(
    topic: str, partition: int, leader: int | None, replicas: list[int], target: int
) -> str | None:
    """Why a leadership move to ``target`` needs nothing (it leads already), or None when it
    must be done; raises when it cannot be (``target`` holds no replica). Idempotency of the
    move, shared by the Kafka and Redpanda backends."""
    if leader == target:
        return f"{topic}/{partition}: broker {target} already leads; nothing to do"
    if target not in replicas:
        raise ActuatorError(
            f"broker {target} is not a replica of {topic}/{partition} (replicas "
            f"{replicas}); pick a target among the replicas or move replicas first",
            retriable=False,
        )
    return None


class PartitionAdmin:
    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str,
        timeout_s: float = 10.0,
        kafka: Mapping[str, str] | None = None,
    ) -> None:
        from actuators.settings import kafka_python_security

        self._bootstrap = bootstrap
        self._client_id = client_id
        self._timeout_s = timeout_s
        self._kafka = dict(kafka or {})
        self._security = kafka_python_security(self._kafka)
        self._admin = AdminClient(
            {"bootstrap.servers": bootstrap, "client.id": client_id, **self._kafka}
        )
        self._kp_admin: Any = None

    def _kp(self) -> Any:
        """kafka-python's admin client, built on first use (only leadership moves need it)."""
        if self._kp_admin is None:
            from kafka.admin import KafkaAdminClient

            try:
                self._kp_admin = KafkaAdminClient(
                    bootstrap_servers=self._bootstrap.split(","),
                    client_id=self._client_id,
                    request_timeout_ms=int(self._timeout_s * 1000),
                    **self._security,
                )
            except kafka_errors.KafkaError as exc:
                raise from_kafka("connect admin client", exc) from None
        return self._kp_admin

    def partition_meta(self, topic: str) -> dict[int, tuple[int, list[int]]]:
        """{partition: (leader, replicas)} from cluster metadata."""
        try:
            md = self._admin.list_topics(topic=topic, timeout=self._timeout_s)
        except KafkaException as exc:
            raise from_kafka(f"metadata for {topic}", exc) from None
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            code = t.error.name() if t is not None and t.error is not None else None
            raise ActuatorError(
                f"topic {topic!r} not found ({code}); check the action's topic",
                code=code,
                retriable=False,
            )
        return {p.id: (p.leader, list(p.replicas)) for p in t.partitions.values()}

    def add_partitions(self, topic: str, total: int) -> str:
        """Grow ``topic`` to ``total`` partitions; a no-op when it already has that many."""
        current = len(self.partition_meta(topic))
        if current >= total:
            return f"{topic} already has {current} partitions (>= {total}); nothing to do"
        futures = self._admin.create_partitions(
            [NewPartitions(topic, total)], request_timeout=self._timeout_s
        )
        try:
            futures[topic].result(timeout=self._timeout_s)
        except KafkaException as exc:
            already = self._already_grown(topic, total, exc)
            if already is not None:
                return already
            raise from_kafka(f"CreatePartitions {topic} -> {total}", exc) from None
        return f"{topic}: {current} -> {total} partitions"

    def _already_grown(self, topic: str, total: int, exc: KafkaException) -> str | None:
        """The no-op reason when CreatePartitions was refused because the topic already has
        ``total`` partitions, else None. The metadata read before the call can be older than
        the controller: right after a first growth, a replay of the same action reads the old
        count, asks again, and the controller answers INVALID_PARTITIONS ("currently has 3,
        which is equal to the requested 3"). That answer also covers counts that are invalid
        for other reasons, so the metadata must agree (it is read again until ``timeout_s``)
        before the replay counts as done."""
        error = exc.args[0] if exc.args else None
        if not isinstance(error, KafkaError) or error.code() != KafkaError.INVALID_PARTITIONS:
            return None
        deadline = time.monotonic() + self._timeout_s
        while True:
            current = len(self.partition_meta(topic))
            if current >= total:
                return f"{topic} already has {current} partitions (>= {total}); nothing to do"
            if time.monotonic() > deadline:
                return None
            time.sleep(0.1)

    def transfer_leadership(self, topic: str, partition: int, target: int) -> str:
        meta = self.partition_meta(topic)
        if partition not in meta:
            raise ActuatorError(
                f"{topic}/{partition} does not exist ({len(meta)} partitions)", retriable=False
            )
        leader, replicas = meta[partition]
        done = leadership_noop(topic, partition, leader, replicas, target)
        if done is not None:
            return done
        order = [target] + [r for r in replicas if r != target]
        from kafka.structs import TopicPartition

        admin = self._kp()
        try:
            if replicas[0] != target:
                tp = TopicPartition(topic, partition)
                err = admin.alter_partition_reassignments({tp: order}).get(tp)
                if err is not None:
                    raise ActuatorError(
                        f"AlterPartitionReassignments {topic}/{partition} -> {order}: "
                        f"{err.__name__}",
                        code=err.errno,
                        retriable=bool(err.retriable),
                    )
            self._elect(admin, topic, partition)
        except kafka_errors.KafkaError as exc:
            raise from_kafka(f"move leadership of {topic}/{partition} to {target}", exc) from None
        return f"{topic}/{partition}: leader {leader} -> {target} (replicas {order})"

    def _elect(self, admin: Any, topic: str, partition: int) -> None:
        """Preferred election, asked again while the reordered assignment propagates (the
        broker answers PREFERRED_LEADER_NOT_AVAILABLE until the new first replica is in
        sync), up to ``timeout_s``. Any other error ends the call: a retriable one goes to
        the runner, whose retry budget is the action's only one (actuators/dispatch.py)."""
        deadline = time.monotonic() + self._timeout_s
        while True:
            response = admin.elect_leaders(
                PREFERRED_ELECTION, {topic: [partition]}, raise_errors=False
            )
            codes = [
                p.error_code for r in response.replica_election_results for p in r.partition_result
            ]
            bad = [c for c in codes if c not in (0, kafka_errors.ElectionNotNeededError.errno)]
            if not bad:
                return
            err = kafka_errors.for_code(bad[0])
            if err is not kafka_errors.PreferredLeaderNotAvailableError:
                raise ActuatorError(
                    f"ElectLeaders {topic}/{partition}: {err.__name__}",
                    code=bad[0],
                    retriable=bool(err.retriable),
                )
            if time.monotonic() > deadline:
                raise ActuatorError(
                    f"ElectLeaders {topic}/{partition}: {err.__name__} after "
                    f"{self._timeout_s:.0f} s; the target may be out of sync, retry later",
                    code=bad[0],
                    retriable=True,
                )
            time.sleep(0.1)

    def ping(self, timeout_s: float = 1.0) -> bool:
        try:
            self._admin.list_topics(timeout=timeout_s)
        except KafkaException:
            return False
        return True

    def close(self) -> None:
        if self._kp_admin is not None:
            self._kp_admin.close()
