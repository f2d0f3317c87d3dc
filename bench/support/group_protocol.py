"""The group protocol a benchmark's SDK workers join with (``--group-protocol``), and what
the broker sets for that protocol, so a result says under which one it ran.

Under ``classic`` the workers set their own session and heartbeat; under ``consumer``
(KIP-848) the broker does, and a result records the broker's values (None where the broker
does not report them, e.g. a broker without KIP-848).
"""

from __future__ import annotations

import argparse
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from actuators.workers.group_protocol import DEFAULT_GROUP_PROTOCOL, GROUP_PROTOCOLS

#: the broker settings that time a KIP-848 group's hand-overs and a dead member's hold
BROKER_GROUP_SETTINGS = ("group.consumer.session.timeout.ms",
                         "group.consumer.heartbeat.interval.ms")  # fmt: skip


def add_flag(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--group-protocol", choices=GROUP_PROTOCOLS, default=DEFAULT_GROUP_PROTOCOL,
        help="the group protocol the SDK workers join with: classic, or consumer (KIP-848: "
             "the broker assigns, and sets the session and the heartbeat)",
    )  # fmt: skip


def broker_group_settings(bootstrap: str, protocol: str) -> dict[str, int | None]:
    """The broker's KIP-848 group settings under ``consumer`` (empty under ``classic``)."""
    if protocol != "consumer":
        return {}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        broker_id = min(admin.list_topics(timeout=10).brokers)
        resource = ConfigResource(ResourceType.BROKER, str(broker_id))
        entries = admin.describe_configs([resource])[resource].result(timeout=10)
    except (KafkaException, ValueError):
        return dict.fromkeys(BROKER_GROUP_SETTINGS)
    return {k: _int(entries[k].value) if k in entries else None for k in BROKER_GROUP_SETTINGS}


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
