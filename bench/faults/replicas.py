"""Fault row 8a: one of two pipeline replicas SIGKILLed under load.

Two ``lagpilot run`` replicas share one consumer group (each with its own state folder),
under row 1's load (``bench.support.fault_load``: a steady swarm, no incident). The replica
that models the swarm's topic (its samples are keyed by topic, so one replica holds them:
the one whose /metrics carries the swarm's group lag) is killed with SIGKILL, its sampler too,
and nothing restarts it. The survivor must take its partitions over and publish the
swarm's lag again within ``DETECTION_TARGET_S`` of the kill, with no false alarm: no status
other than OK and no action of the pipeline's for a swarm that never lagged.

The broker notices a SIGKILLed member only when its session ends, so both replicas run with
``SESSION_TIMEOUT_MS`` (``LAGPILOT_SESSION_TIMEOUT_MS``; its commits reader follows it).
"""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.support.fault_load import Scene, under_load
from bench.support.harness import PipelineProcess

#: the survivor publishes the swarm's lag again within this many seconds of the kill
DETECTION_TARGET_S = 10.0
#: the replicas' session: what the broker waits before it hands a dead member's partitions on
SESSION_TIMEOUT_MS = 6_000  # the least a broker accepts by default (group.min.session.timeout.ms)


def _models(pipe: PipelineProcess, group: str) -> bool:
    """Whether ``pipe``'s model holds ``group``'s lag (group health, kept by the replica
    reading the group's offsets partition, may name it on another replica)."""
    try:
        url = f"http://127.0.0.1:{pipe.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return False
    label = f'group="{group}"'
    return any(
        ln.startswith("lagpilot_group_lag_offsets{") and label in ln for ln in text.splitlines()
    )


def replica_kill(bootstrap: str, workdir: Path, run_s: float = 45.0) -> dict[str, Any]:
    info: dict[str, Any] = {}

    def fault(scene: Scene) -> None:
        owners = [i for i, p in enumerate(scene.replicas) if _models(p, scene.group)]
        victim = owners[0] if owners else 0
        info["replicas_modelling_the_swarm"] = owners
        info["killed_replica"] = victim
        scene.kill_replica(scene.replicas[victim])
        scene.cleared(f"replica {victim} of 2 SIGKILLed")
        info["survivor_models_the_swarm_after_s"] = None
        started = time.monotonic()
        while time.monotonic() - started < 30:
            if _models(scene.replicas[0], scene.group):
                info["survivor_models_the_swarm_after_s"] = round(time.monotonic() - started, 2)
                break
            time.sleep(0.25)

    env = {"LAGPILOT_SESSION_TIMEOUT_MS": str(SESSION_TIMEOUT_MS)}
    got = under_load(bootstrap, workdir, fault, run_s=run_s, replicas=2, pipeline_env=env)
    return got | info | {"session_timeout_ms": SESSION_TIMEOUT_MS}
