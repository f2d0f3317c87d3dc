"""``lagpilot status [--group G]``: the current lag table, read back from ``lagpilot.lag``.

Reads the last few seconds of the topic (offsets for a timestamp, then to the end), keeps
the latest snapshot per partition and summary per group, and prints them. It needs only
the topic, so it works against any running pipeline, from any machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from schemas import EventError, decode, topics

Latest = dict[str, dict[str, Any]]


def read_latest(
    bootstrap: str, since_s: float, group: str | None = None, timeout_s: float = 10.0
) -> tuple[Latest, Latest, Latest]:
    """Latest ``group_lag`` per group|topic, ``partition_lag`` per group|topic|partition and
    ``group_health`` per group."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"lagpilot-status-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        md = consumer.list_topics(topics.LAG, timeout=timeout_s)
        meta = md.topics.get(topics.LAG)
        if meta is None or meta.error is not None or not meta.partitions:
            raise SystemExit(
                f"lagpilot status: topic {topics.LAG} not found: is the pipeline running?"
            )
        start_ms = int((time.time() - since_s) * 1000)
        wanted = [TopicPartition(topics.LAG, p, start_ms) for p in meta.partitions]
        assigned = consumer.offsets_for_times(wanted, timeout=timeout_s)
        consumer.assign(assigned)
        summaries: dict[str, dict[str, Any]] = {}
        partitions: dict[str, dict[str, Any]] = {}
        health: dict[str, dict[str, Any]] = {}
        done: set[int] = {tp.partition for tp in assigned if tp.offset < 0}
        deadline = time.monotonic() + timeout_s
        while len(done) < len(assigned) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                done.add(msg.partition())
                continue
            try:
                ev = decode(msg.value() or b"")
            except EventError:
                continue
            if group and ev.get("group") != group:
                continue
            key = (msg.key() or b"").decode()
            if ev.get("event") == "group_lag":
                summaries[key] = ev
            elif ev.get("event") == "partition_lag":
                partitions[key] = ev
            elif ev.get("event") == "group_health":
                if ev.get("status") == "DELETED":
                    health.pop(str(ev["group"]), None)
                else:
                    health[str(ev["group"])] = ev
        return summaries, partitions, health
    finally:
        consumer.close()


def _owner(p: dict[str, Any]) -> str:
    o = p.get("owner")
    return f"{o['client_id']}@{o['client_host']} ({o['member_id']})" if o else "-"


def render(summaries: Latest, partitions: Latest, health: Latest | None = None) -> str:
    lines = [
        f"{'GROUP':<28} {'TOPIC':<28} {'STATUS':<7} {'LAG':>10} {'TIME LAG s':>10} "
        f"{'RATE/s':>9} {'PARTS':>5}"
    ]
    for s in sorted(summaries.values(), key=lambda s: (-s["max_time_lag_s"], s["group"])):
        lines.append(
            f"{s['group'][:28]:<28} {s['topic'][:28]:<28} {s['status']:<7} "
            f"{s['total_lag_offsets']:>10} {s['max_time_lag_s']:>10.2f} "
            f"{s['lag_rate_per_s']:>9.1f} {s['partitions']:>5}"
        )
    if partitions:
        lines += [
            "",
            f"{'GROUP':<28} {'TOPIC':<24} {'P':>4} {'STATUS':<7} {'COMMITTED':>11} "
            f"{'HWM':>11} {'LAG':>9} {'TIME LAG s':>10} {'RATE/s':>9} {'ETA s':>8} OWNER",
        ]
        for p in sorted(
            partitions.values(), key=lambda p: (p["group"], p["topic"], p["partition"])
        ):
            eta = "-" if p["eta_drain_s"] is None else f"{p['eta_drain_s']:.1f}"
            lines.append(
                f"{p['group'][:28]:<28} {p['topic'][:24]:<24} {p['partition']:>4} "
                f"{p['status']:<7} {p['committed_offset']:>11} {p['high_watermark']:>11} "
                f"{p['lag_offsets']:>9} {p['time_lag_s']:>10.2f} {p['lag_rate_per_s']:>9.1f} "
                f"{eta:>8} {_owner(p)}"
            )
    if health:
        lines += [
            "",
            f"{'GROUP':<28} {'HEALTH':<11} {'PROTOCOL':<8} {'STATE':<11} {'GEN':>6} "
            f"{'MEMBERS':>7} {'REBAL/min':>9} {'STALLED':<7} STORM MEMBER",
        ]
        for h in sorted(health.values(), key=lambda h: h["group"]):
            storm = h.get("storm") or {}
            named = f"{storm['client_id']}@{storm['client_host']}" if storm else "-"
            lines.append(
                f"{h['group'][:28]:<28} {h['status']:<11} {h['protocol']:<8} {h['state']:<11} "
                f"{h['generation']:>6} {len(h['members']):>7} {h['rebalances_per_min']:>9.1f} "
                f"{'yes' if h['commits_stalled'] else 'no':<7} {named}"
            )
    if not summaries and not partitions and not health:
        lines.append("(no lag events in the window: is the pipeline running?)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="lagpilot status", description=__doc__)
    ap.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:21092"))
    ap.add_argument("--group", help="only this consumer group")
    ap.add_argument("--since-s", type=float, default=5.0, help="read this many seconds back")
    ap.add_argument("--partitions", action="store_true", help="also print every partition")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    summaries, partitions, health = read_latest(args.bootstrap, args.since_s, args.group)
    print(render(summaries, partitions if (args.partitions or args.group) else {}, health))
    return 0


if __name__ == "__main__":
    sys.exit(main())
