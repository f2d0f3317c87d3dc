"""Fault row 1: the single broker killed (-9) mid-run and restarted 10 s later, while the
swarm produces at a moderate rate, its SDK workers consume, the pipeline runs the shipped
policy (``deploy/policy.default.toml``, act mode) and the actuator (Kafka backend) runs. No
lagpilot process and no worker is restarted.

The broker is this benchmark's own (``bench.support.broker.OwnBroker``: ``deploy/local/kafka.sh``
with its own port and run folder); only the PID that ``kafka.sh`` recorded for it is killed.

The load, and what is measured after the broker serves again: ``bench.support.fault_load``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench.support.broker import OwnBroker
from bench.support.fault_load import DOWN_S, Scene, under_load


def broker_kill(broker: OwnBroker, workdir: Path, *, run_s: float = 45.0) -> dict[str, Any]:
    """Row 1: every node of ours killed (-9), restarted on its own data DOWN_S later."""

    timing: dict[str, float] = {}

    def fault(scene: Scene) -> None:
        killed = time.monotonic()
        broker.kill9()
        time.sleep(DOWN_S)
        restart = time.monotonic()
        broker.restart()
        timing["broker_restart_s"] = round(time.monotonic() - restart, 2)
        timing["down_s"] = round(time.monotonic() - killed, 2)
        scene.cleared("broker restarted")

    return under_load(broker.bootstrap, workdir, fault, run_s=run_s) | timing
