"""Backends: the one small interface through which the actuator changes a cluster.

Every operation sets a state (a quota to a rate, a partition count to a total, a leader to a
broker) rather than applying a delta, so applying the same action twice changes nothing the
second time: that is what makes a replay after a crash or a rebalance harmless even in the
window before its outcome is committed. Each returns a short sentence for the outcome's
``reason`` and raises ``ActuatorError`` (with ``retriable``) when it cannot.

- ``KafkaBackend``: Apache Kafka, and Redpanda >= 24.2, through the Kafka protocol only.
- ``RedpandaBackend``: leadership through Redpanda's Admin API (``RedpandaAdmin``); quotas
  and partitions through the Kafka protocol (the Admin API has no quota endpoint).
- ``DryRunBackend``: records what it would do, optionally appending each call to a file
  (the durable record the crash tests count); the test double and the safe default demo.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import orjson

from actuators.errors import ActuatorError
from actuators.partitions import leadership_noop
from actuators.settings import Settings
from schemas.errors import LagpilotError

BACKENDS_HELP = (
    "kafka (Kafka protocol: Apache Kafka, Redpanda >= 24.2), redpanda (plus the Admin API "
    "for leadership), dry-run (apply nothing)"
)


class Backend(Protocol):
    name: str

    def throttle(self, entity: str, name: str, bytes_per_s: int) -> str: ...

    def release(self, entity: str, name: str) -> str: ...

    def add_partitions(self, topic: str, total: int) -> str: ...

    def transfer_leadership(self, topic: str, partition: int, target: int) -> str: ...

    # Reads of the state the operations set: what an actuator taking over an action whose
    # intent has no outcome checks before calling again (actuators/reconcile.py).
    def producer_rate(self, entity: str, name: str) -> int | None: ...

    def partition_count(self, topic: str) -> int: ...

    def leader(self, topic: str, partition: int) -> int | None: ...

    def ping(self) -> bool: ...

    def close(self) -> None: ...


class DryRunBackend:
    """Applies nothing; remembers every call (and appends it to ``record_path`` if given).

    With a record file, the file is its cluster: a new DryRunBackend on the same file starts
    from the state the calls in it set (quotas, partition counts, leaders), as a restarted
    actuator finds a real cluster as its predecessor left it.
    """

    name = "dry-run"

    def __init__(self, record_path: str | None = None) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.quotas: dict[tuple[str, str], int] = {}
        self.partitions: dict[str, int] = {}
        self.leaders: dict[tuple[str, int], int] = {}
        if record_path and Path(record_path).exists():
            for call in self.read_record(record_path):
                self._set(call)
        self._file = open(record_path, "ab") if record_path else None  # noqa: SIM115

    def _set(self, call: list[Any] | tuple[Any, ...]) -> None:
        op, *args = call
        if op == "throttle":
            self.quotas[(args[0], args[1])] = int(args[2])
        elif op == "release":
            self.quotas.pop((args[0], args[1]), None)
        elif op == "add_partitions":
            self.partitions[args[0]] = max(int(args[1]), self.partitions.get(args[0], 0))
        elif op == "transfer_leadership":
            self.leaders[(args[0], int(args[1]))] = int(args[2])

    def _record(self, *call: Any) -> None:
        self.calls.append(call)
        self._set(call)
        if self._file is not None:
            # One write + fsync per call: the record survives SIGKILL of the process.
            self._file.write(orjson.dumps(list(call)) + b"\n")
            self._file.flush()
            os.fsync(self._file.fileno())

    def throttle(self, entity: str, name: str, bytes_per_s: int) -> str:
        self._record("throttle", entity, name, bytes_per_s)
        return f"dry-run: would set producer_byte_rate={bytes_per_s} on {entity}={name}"

    def release(self, entity: str, name: str) -> str:
        self._record("release", entity, name)
        return f"dry-run: would remove producer_byte_rate on {entity}={name}"

    def add_partitions(self, topic: str, total: int) -> str:
        self._record("add_partitions", topic, total)
        return f"dry-run: would grow {topic} to {total} partitions"

    def transfer_leadership(self, topic: str, partition: int, target: int) -> str:
        self._record("transfer_leadership", topic, partition, target)
        return f"dry-run: would move leadership of {topic}/{partition} to broker {target}"

    def producer_rate(self, entity: str, name: str) -> int | None:
        return self.quotas.get((entity, name))

    def partition_count(self, topic: str) -> int:
        return self.partitions.get(topic, 0)

    def leader(self, topic: str, partition: int) -> int | None:
        return self.leaders.get((topic, partition))

    def ping(self) -> bool:
        return True

    def close(self) -> None:
        if self._file is not None:
            self._file.close()

    @staticmethod
    def read_record(path: str | Path) -> list[list[Any]]:
        """The calls a DryRunBackend appended to ``path`` (a torn last line is skipped)."""
        calls = []
        for line in Path(path).read_bytes().splitlines():
            try:
                calls.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                continue
        return calls


class KafkaBackend:
    name = "kafka"

    def __init__(
        self, bootstrap: str, *, client_id: str, kafka: Mapping[str, str] | None = None
    ) -> None:
        from actuators.partitions import PartitionAdmin
        from actuators.quotas import QuotaClient
        from actuators.settings import kafka_python_security

        kafka = dict(kafka or {})
        self.quotas = QuotaClient(
            bootstrap, client_id=client_id, security=kafka_python_security(kafka)
        )
        self.partitions = PartitionAdmin(bootstrap, client_id=client_id, kafka=kafka)

    def throttle(self, entity: str, name: str, bytes_per_s: int) -> str:
        self.quotas.set_producer_rate(entity, name, bytes_per_s)
        return f"producer_byte_rate={bytes_per_s} on {entity}={name}"

    def release(self, entity: str, name: str) -> str:
        self.quotas.remove_producer_rate(entity, name)
        return f"producer_byte_rate removed from {entity}={name}"

    def add_partitions(self, topic: str, total: int) -> str:
        return self.partitions.add_partitions(topic, total)

    def transfer_leadership(self, topic: str, partition: int, target: int) -> str:
        return self.partitions.transfer_leadership(topic, partition, target)

    def producer_rate(self, entity: str, name: str) -> int | None:
        return self.quotas.producer_rate(entity, name)

    def partition_count(self, topic: str) -> int:
        return len(self.partitions.partition_meta(topic))

    def leader(self, topic: str, partition: int) -> int | None:
        meta = self.partitions.partition_meta(topic).get(partition)
        return None if meta is None else meta[0]

    def ping(self) -> bool:
        return self.partitions.ping()

    def close(self) -> None:
        self.quotas.close()
        self.partitions.close()


class RedpandaBackend:
    """The Admin API for leadership; ``kafka`` (a KafkaBackend) for quotas and partitions,
    because the Admin API has no quota endpoint and partitions are Kafka CreatePartitions.

    ``admin`` is a ``RedpandaAdmin`` (or anything with its ``partition`` and
    ``transfer_leadership``); its ``RedpandaAdminError`` is an ``ActuatorError`` carrying
    status, URL, code and hint, and is passed on as it is (another ``LagpilotError`` is
    rebuilt from its fields). Redpanda's own leader balancer may undo a manual move later;
    the outcome records what was done, and the pipeline sees whether it stuck.
    """

    name = "redpanda"

    def __init__(self, admin: Any, kafka: Backend) -> None:
        self.admin = admin
        self.kafka = kafka

    def throttle(self, entity: str, name: str, bytes_per_s: int) -> str:
        return self.kafka.throttle(entity, name, bytes_per_s)

    def release(self, entity: str, name: str) -> str:
        return self.kafka.release(entity, name)

    def add_partitions(self, topic: str, total: int) -> str:
        return self.kafka.add_partitions(topic, total)

    def transfer_leadership(self, topic: str, partition: int, target: int) -> str:
        try:
            state = self.admin.partition(topic, partition)
            leader = state.get("leader_id")
            replicas = [r.get("node_id") for r in state.get("replicas", [])]
            done = leadership_noop(topic, partition, leader, replicas, target)
            if done is not None:
                return done
            self.admin.transfer_leadership(topic, partition, target)
        except ActuatorError:
            raise
        except LagpilotError as exc:  # the Admin API client's error: its fields, kept
            raise ActuatorError(
                f"Redpanda Admin API: {exc}", code=exc.code, retriable=exc.retriable, hint=exc.hint
            ) from None
        return f"{topic}/{partition}: leader {leader} -> {target} (Admin API)"

    def producer_rate(self, entity: str, name: str) -> int | None:
        return self.kafka.producer_rate(entity, name)

    def partition_count(self, topic: str) -> int:
        return self.kafka.partition_count(topic)

    def leader(self, topic: str, partition: int) -> int | None:
        return self.kafka.leader(topic, partition)

    def ping(self) -> bool:
        return self.kafka.ping()

    def close(self) -> None:
        self.kafka.close()
        self.admin.close()


def make_backend(settings: Settings) -> Backend:
    """The backend the settings name; the Redpanda client is imported only when chosen."""
    client_id = f"lagpilot-actuator-{settings.actuator_id}"
    if settings.backend == "dry-run":
        return DryRunBackend(settings.dry_run_log)
    if settings.backend == "kafka":
        return KafkaBackend(settings.bootstrap, client_id=client_id, kafka=settings.kafka)
    from actuators.redpanda_admin import RedpandaAdmin

    auth: dict[str, Any] = {}
    if settings.redpanda_admin_username:
        auth = {
            "username": settings.redpanda_admin_username,
            "password": settings.redpanda_admin_password,
        }
    # max_retries=0: the transport follows redirects and fails over, but retries live in
    # one layer, the runner's (actuators/dispatch.py): nested layers multiply each other's
    # attempts, and a redirect loop multiplies them again.
    admin = RedpandaAdmin(
        list(settings.redpanda_admin_urls),
        tls_verify=settings.redpanda_admin_tls_verify,
        max_retries=0,
        **auth,
    )
    kafka = KafkaBackend(settings.bootstrap, client_id=client_id, kafka=settings.kafka)
    return RedpandaBackend(admin, kafka)
