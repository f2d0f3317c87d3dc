"""One member of the ``storm`` incident's group (bench/incidents/storm.py), as a process.

A worker SDK ``Worker`` with dynamic membership (a Deployment's pod) that dies at once,
without a commit or a LeaveGroup (``os._exit(137)``: the out-of-memory kill), when it starts
a heavy document; other records take ``--work-ms`` and are recorded once in the ledger.

    python -m bench.incidents.storm_member --bootstrap B --topic T --group G --control C \\
        --outcomes O --ledger effects.sqlite --client-id ID --work-ms 5 \\
        --session-timeout-ms 6000 [--group-protocol classic|consumer]

Under ``--group-protocol consumer`` (KIP-848) the broker owns the session timeout and the
heartbeat (``group.consumer.session.timeout.ms``): ``--session-timeout-ms`` is not sent.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from typing import Any

import orjson

from actuators.workers import Worker
from actuators.workers.group_protocol import GROUP_PROTOCOLS
from bench.support.effects import record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    for name in ("bootstrap", "topic", "group", "control", "outcomes", "ledger", "client-id"):
        ap.add_argument(f"--{name}", required=True)
    ap.add_argument("--work-ms", type=float, required=True)
    ap.add_argument("--session-timeout-ms", type=int, required=True)
    ap.add_argument("--group-protocol", choices=GROUP_PROTOCOLS, default="classic")
    args = ap.parse_args(argv)
    group: dict[str, Any] = {"client.id": args.client_id}
    if args.group_protocol == "classic":  # KIP-848: the broker's session and heartbeat
        group |= {"session.timeout.ms": args.session_timeout_ms, "heartbeat.interval.ms": 1000}

    def handle(msg: Any, ctx: Any) -> None:
        head = orjson.loads(msg.value().split(b"\n", 1)[0])
        if head["heavy"]:
            os._exit(137)  # out of memory: no commit, no LeaveGroup
        time.sleep(args.work_ms / 1000)
        record(ctx, head, msg.partition())

    worker = Worker(
        bootstrap=args.bootstrap, group=args.group, topics=[args.topic], handler=handle,
        max_workers=4, dedupe=args.ledger, control_topic=args.control,
        outcomes_topic=args.outcomes or None, instance_id="", commit_interval_s=0.2,
        consumer_config=group, group_protocol=args.group_protocol,
    )  # fmt: skip
    signal.signal(signal.SIGTERM, lambda *_: worker.stop(0))
    worker.run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
