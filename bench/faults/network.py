"""Fault row 3: a network cut between the pipeline and the broker, then between the SDK workers
and the broker, 15 s each, while the swarm produces, the workers consume, the pipeline runs
in ``act`` mode and the actuator runs (``bench.support.fault_load``).

The broker is our own (``deploy/local/kafka.sh`` on ``PORT``) with two more listeners,
``PIPELINE`` and ``WORKERS``, advertised at the ports of two proxies
(``bench/support/netproxy.py``): the pipeline bootstraps through one, the workers through
the other, and both stay on their proxy because that is the address the broker gives them
back. The producers, the actuator and
the benchmark's readers use the broker's own listener, which is never cut. All on 127.0.0.1.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench.support.broker import OwnBroker
from bench.support.fault_load import Scene, under_load
from bench.support.netproxy import Proxy

PORT = 27092  # the broker: 27092 (clients), 27093 (controller)
PIPELINE = (27094, 27192)  # its PIPELINE listener, and the proxy in front of it
WORKERS = (27096, 27194)
CUT_S = 15.0
GAP_S = 5.0
EXTRA_LISTENERS = f"PIPELINE:{PIPELINE[0]}:{PIPELINE[1]},WORKERS:{WORKERS[0]}:{WORKERS[1]}"


def cut_pipeline_then_workers(
    broker: OwnBroker, workdir: Path, run_s: float = 60.0
) -> dict[str, Any]:
    pipe_proxy = Proxy(PIPELINE[1], PIPELINE[0]).start()
    work_proxy = Proxy(WORKERS[1], WORKERS[0]).start()
    cuts: dict[str, float] = {}

    def fault(scene: Scene) -> None:
        for name, proxy in (("pipeline", pipe_proxy), ("workers", work_proxy)):
            if cuts:
                time.sleep(GAP_S)
            started = time.monotonic()
            proxy.cut()
            time.sleep(CUT_S)
            proxy.heal()
            cuts[name] = round(time.monotonic() - started, 2)
            scene.cleared(f"the {name}-broker cut healed")

    try:
        got = under_load(
            broker.bootstrap,
            workdir,
            fault,
            run_s=run_s,
            pipeline_bootstrap=f"127.0.0.1:{PIPELINE[1]}",
            workers_bootstrap=f"127.0.0.1:{WORKERS[1]}",
        )
    finally:
        pipe_proxy.stop()
        work_proxy.stop()
    return got | {
        "cut_s": cuts,
        "proxied": {
            "pipeline": {"connections": pipe_proxy.connections,
                         "bytes": pipe_proxy.bytes_forwarded},
            "workers": {"connections": work_proxy.connections,
                        "bytes": work_proxy.bytes_forwarded},
        },
    }  # fmt: skip
