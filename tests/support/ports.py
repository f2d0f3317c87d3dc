"""Ports for the brokers a test starts itself, inside the block its checkout's broker owns.

``deploy/local/kafka.sh`` puts the local broker at ``LAGPILOT_BROKER_PORT`` (default 21092)
and the port after it (its controller). The brokers tests start of their own (the 3-broker
cluster, the SASL broker, a broker a test stops, ``kafka.sh``'s own tests) take the next
ports of the same block of :data:`BLOCK`, so checkouts given separate blocks
(``LAGPILOT_BROKER_PORT=27092`` in one, the default in another) never bind each other's
ports while their suites run at once. Every port stays below Linux's ephemeral range
(32768-60999), where a client connection could take it first.
"""

from __future__ import annotations

import os

BLOCK = 28  # ports from LAGPILOT_BROKER_PORT that belong to one checkout's test run
DEFAULT_BASE = 21092  # kafka.sh's default LAGPILOT_BROKER_PORT

#: each own broker's first port as an offset from the base; a node uses two ports (client,
#: controller), so a 3-node cluster takes six
OFFSETS: dict[str, int] = {
    "cluster": 2,  # the 3-broker cluster of tests/conftest.py: 6 ports
    "throwaway": 8,  # tests/integration/deploy/test_health.py: the broker it stops
    "kafka_sh": 10,  # tests/integration/deploy/test_kafka_sh.py: refusals, a slow start
    "kafka_sh_fresh": 12,  # tests/integration/deploy/test_kafka_sh.py: up from a fresh clone
    "demo": 14,  # tests/integration/deploy/test_demo_stops.py: the demo's own broker
    "sasl": 16,  # tests/integration/pipeline/commands/test_cli_acl.py: the SASL broker
    "sasl_metrics": 18,  # the same module: its `lagpilot run`'s /metrics
    "share_sasl": 20,  # tests/integration/pipeline/read/test_share_groups_sasl.py
    "share_kafka41": 22,  # tests/integration/pipeline/read/test_share_groups_kafka41.py
}


def base() -> int:
    """``LAGPILOT_BROKER_PORT``, as kafka.sh reads it; what to change when it is not a port."""
    raw = os.environ.get("LAGPILOT_BROKER_PORT", str(DEFAULT_BASE))
    try:
        port = int(raw)
    except ValueError:
        raise ValueError(f"LAGPILOT_BROKER_PORT={raw!r}: set it to a port, e.g. 27092") from None
    if not 1024 <= port <= 32768 - BLOCK:
        raise ValueError(
            f"LAGPILOT_BROKER_PORT={port}: the tests take {BLOCK} ports from it, which must lie "
            f"in 1024-32767 (below the ephemeral range): set it to e.g. 27092"
        )
    return port


def own_port(name: str) -> int:
    """The first port of own broker ``name`` (a key of :data:`OFFSETS`)."""
    return base() + OFFSETS[name]
