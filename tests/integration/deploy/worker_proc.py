"""An agent worker for the dashboard test, as its own process: the worker SDK on the
incident's topic and group, its metrics served on a port. Messages on the hot partition are
heavy (``--slow-s`` each), the rest take no time, so one partition falls behind while its
siblings keep up; lagpilot spreads it over lanes, and the worker obeys.

    python worker_proc.py BOOTSTRAP TOPIC GROUP CONTROL_TOPIC KEY METRICS_PORT HOT SLOW_S
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import Any

from actuators.workers import MemoryDedupeStore, Worker, serve_metrics


def main(argv: list[str]) -> None:
    bootstrap, topic, group, control, key, port, hot, slow_s = argv
    hot_partition, slow = int(hot), float(slow_s)

    def handle(msg: Any, ctx: Any) -> None:
        if ctx.partition == hot_partition:
            time.sleep(slow)  # a 500-page PDF

    worker = Worker(
        bootstrap=bootstrap, group=group, topics=[topic], handler=handle, instance_id="",
        lanes=1, max_workers=8, dedupe=MemoryDedupeStore(), control_topic=control,
        signing_key=key.encode(), commit_interval_s=0.2,
        consumer_config={"auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 1000},
    )  # fmt: skip
    server, _ = serve_metrics(worker, int(port), host="127.0.0.1")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    worker.start()
    while not stop.wait(0.2):
        if not worker.running:
            raise SystemExit(f"worker stopped: {worker.error!r}")
    worker.stop()
    server.shutdown()


if __name__ == "__main__":
    main(sys.argv[1:])
