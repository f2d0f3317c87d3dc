"""One worker process of the ``slow_group`` incident's group (bench/incidents/slow_group.py),
as ``lagpilot workers`` starts it: ``lagpilot workers --group G ... -- python -m
bench.incidents.slow_member ...``.

A worker SDK ``Worker`` with one handler thread (a pod with one CPU) in the group the
supervisor names (``LAGPILOT_WORKER_GROUP``), under the static membership id it gives
(``LAGPILOT_WORKER_INSTANCE_ID``, read by the SDK); each record takes ``--work-ms`` and is
recorded once in the ledger. SIGTERM (a scale-down, or the supervisor stopping) finishes
the running record, commits and stops.

    python -m bench.incidents.slow_member --bootstrap B --topic T --control C --outcomes O \\
        --ledger effects.sqlite --work-ms 20
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import time
from typing import Any

import orjson

from actuators.workers import Worker
from actuators.workers.supervisor import GROUP_ENV
from bench.support.effects import record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    for name in ("bootstrap", "topic", "control", "outcomes", "ledger"):
        ap.add_argument(f"--{name}", required=True)
    ap.add_argument("--work-ms", type=float, required=True)
    args = ap.parse_args(argv)
    # the SDK's joins, assignments and revokes, in the supervisor's log (workers-<run>.log)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(process)d %(name)s %(message)s")

    def handle(msg: Any, ctx: Any) -> None:
        head = orjson.loads(msg.value().split(b"\n", 1)[0])
        time.sleep(args.work_ms / 1000)
        record(ctx, head, msg.partition())

    worker = Worker(
        bootstrap=args.bootstrap, group=os.environ[GROUP_ENV], topics=[args.topic],
        handler=handle, max_workers=1, dedupe=args.ledger, control_topic=args.control,
        outcomes_topic=args.outcomes or None, commit_interval_s=0.2,
    )  # fmt: skip
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    worker.run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
