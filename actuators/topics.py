"""The actuator's two topics, created when missing: lagpilot.control and the compacted
lagpilot.outcomes (whose latest record per action id is the ledger)."""

from __future__ import annotations

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from actuators.errors import from_kafka
from actuators.settings import Settings
from runtime.kafka import fault

__all__ = ["CONTROL_PARTITIONS", "OUTCOME_PARTITIONS", "ensure_topics"]

CONTROL_PARTITIONS = 3
OUTCOME_PARTITIONS = 3


def ensure_topics(admin: AdminClient, settings: Settings, timeout_s: float = 15.0) -> None:
    """Create the control topic and the compacted outcomes topic when they are missing."""
    existing = admin.list_topics(timeout=timeout_s).topics
    wanted = [
        NewTopic(settings.control_topic, CONTROL_PARTITIONS, -1),
        NewTopic(
            settings.outcomes_topic, OUTCOME_PARTITIONS, -1, config={"cleanup.policy": "compact"}
        ),
    ]
    missing = [t for t in wanted if t.topic not in existing]
    if not missing:
        return
    for name, future in admin.create_topics(missing, request_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            if fault(exc).code != "TOPIC_ALREADY_EXISTS":
                raise from_kafka(f"cannot create topic {name}", exc) from None
