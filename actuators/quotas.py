"""Producer quotas over the Kafka protocol: AlterClientQuotas / DescribeClientQuotas.

confluent-kafka has no client-quota admin API, so the requests are built from kafka-python's
protocol classes (``kafka.protocol.admin.client_quotas``), generated from Apache Kafka's own
message specs, and sent with kafka-python's network client. Nothing here writes bytes by
hand. Works on Apache Kafka and on Redpanda >= 24.2; the ``client-id-prefix`` entity is a
Redpanda extension that Apache Kafka rejects (its error is surfaced as it comes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kafka.errors as kafka_errors
from kafka.net.compat import KafkaNetClient
from kafka.protocol.admin.client_quotas import (
    AlterClientQuotasRequest,
    DescribeClientQuotasRequest,
)

from actuators.errors import ActuatorError, from_kafka

PRODUCER_BYTE_RATE = "producer_byte_rate"
ENTITIES = ("client-id", "client-id-prefix")
_Entry = AlterClientQuotasRequest.EntryData
_Component = DescribeClientQuotasRequest.ComponentData
_MATCH_EXACT = 0


def _hint(entity: str, message: str) -> str:
    if entity == "client-id-prefix" and "entity type" in message:
        return (
            "; this broker does not support client-id-prefix quotas (Apache Kafka does not; "
            "Redpanda >= 24.2 does): throttle by client-id on this cluster"
        )
    return ""


def broker_error(op: str, entity: str, name: str, code: int, message: str | None) -> ActuatorError:
    """An ActuatorError for a broker error code, retriable exactly when Kafka says so."""
    cls = kafka_errors.for_code(code)
    text = message or cls.description
    return ActuatorError(
        f"{op} {entity}={name}: {cls.__name__} ({code}): {text}{_hint(entity, text)}",
        code=code,
        retriable=bool(cls.retriable),
    )


class QuotaClient:
    """One connection pool to the cluster, used from one thread (the runner's loop)."""

    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str,
        timeout_ms: int = 5000,
        security: Mapping[str, Any] | None = None,
    ) -> None:
        self._timeout_ms = timeout_ms
        self._client = KafkaNetClient(
            bootstrap_servers=[b.strip() for b in bootstrap.split(",") if b.strip()],
            client_id=client_id,
            request_timeout_ms=timeout_ms,
            **dict(security or {}),
        )

    def _send(self, request: object, op: str) -> object:
        try:
            self._client.check_version(timeout_ms=self._timeout_ms)
            node = self._client.least_loaded_node(bootstrap_fallback=True)
            return self._client.send_and_receive(node, request, timeout_ms=self._timeout_ms)
        except kafka_errors.KafkaError as exc:
            raise from_kafka(op, exc, hint="is the broker reachable?") from None

    def _alter(self, entity: str, name: str, op: Any, what: str) -> None:
        if entity not in ENTITIES:
            raise ActuatorError(
                f"unknown quota entity {entity!r}; use one of {ENTITIES}", retriable=False
            )
        target = _Entry.EntityData(entity_type=entity, entity_name=name)
        request = AlterClientQuotasRequest(
            entries=[_Entry(entity=[target], ops=[op])],
            validate_only=False,
        )
        response = self._send(request, what)
        for entry in response.entries:  # type: ignore[attr-defined]
            if entry.error_code:
                raise broker_error(what, entity, name, entry.error_code, entry.error_message)

    def set_producer_rate(self, entity: str, name: str, bytes_per_s: int) -> None:
        op = _Entry.OpData(key=PRODUCER_BYTE_RATE, value=float(bytes_per_s), remove=False)
        self._alter(entity, name, op, "AlterClientQuotas(set)")

    def remove_producer_rate(self, entity: str, name: str) -> None:
        """Remove the quota; removing one that is not set is not an error (idempotent)."""
        op = _Entry.OpData(key=PRODUCER_BYTE_RATE, value=0.0, remove=True)
        self._alter(entity, name, op, "AlterClientQuotas(remove)")

    def producer_rate(self, entity: str, name: str) -> int | None:
        """The producer_byte_rate set on exactly this entity, or None."""
        request = DescribeClientQuotasRequest(
            components=[_Component(entity_type=entity, match_type=_MATCH_EXACT, match=name)],
            strict=True,
        )
        response = self._send(request, "DescribeClientQuotas")
        code = response.error_code  # type: ignore[attr-defined]
        if code:
            raise broker_error(
                "DescribeClientQuotas",
                entity,
                name,
                code,
                response.error_message,  # type: ignore[attr-defined]
            )
        for entry in response.entries or []:  # type: ignore[attr-defined]
            for value in entry.values:
                if value.key == PRODUCER_BYTE_RATE:
                    return int(value.value)
        return None

    def close(self) -> None:
        self._client.close()
