"""How the actuator's Kafka clients are configured (pure: settings in, librdkafka configs out).

Five clients, one role each: the admin client (topics, readiness), the transactional
producer (outcomes and control offsets in one transaction), the intents producer (outside
the transaction: an intent must be on the topic before the backend call, whether or not the
batch commits), the control consumer and the ledger's tail of the outcomes topic.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from actuators.settings import Settings
from runtime.cli import CLIENT_LOG

__all__ = ["ClientConfigs", "client_configs"]


class ClientConfigs(NamedTuple):
    base: dict[str, Any]
    transactional: dict[str, Any]
    intents: dict[str, Any]
    control: dict[str, Any]
    ledger_tail: dict[str, Any]


def client_configs(settings: Settings) -> ClientConfigs:
    # librdkafka's own lines go to lagpilot's logging (logger lagpilot.kafka, DEBUG)
    base = {"bootstrap.servers": settings.bootstrap, **settings.kafka, "logger": CLIENT_LOG}
    return ClientConfigs(
        base=base,
        transactional=base
        | {
            "transactional.id": f"lagpilot-actuator-{settings.actuator_id}",
            "transaction.timeout.ms": 10000,
            "linger.ms": 1,
        },
        intents=base | {"enable.idempotence": True, "acks": "all", "linger.ms": 0},
        control=base
        | {
            "group.id": settings.group_id,
            "client.id": f"lagpilot-actuator-{settings.actuator_id}",
            # Static membership (KIP-345): a restarted actuator takes its partitions back
            # at once instead of waiting for its dead self's session to time out; one
            # that stays dead hands them to the others after session.timeout.ms.
            "group.instance.id": settings.actuator_id,
            "session.timeout.ms": 10000,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 50,
        },
        ledger_tail=base
        | {
            "group.id": f"lagpilot-actuator-ledger-{settings.actuator_id}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 50,
        },
    )
