"""``lagpilot status [--group G]``: the current lag table, read back from ``lagpilot.lag``.

Reads the last few seconds of the topic (offsets for a timestamp, then to the end), keeps
the latest snapshot per partition and summary per group, and prints them. It needs only
the topic, so it works against any running pipeline, from any machine. ``--watch`` redraws
it every few seconds; ``--json`` prints the events themselves for scripts. lagpilot's own
groups and groups that never commit are left out unless ``--all`` (or ``--group`` names one).
"""

from __future__ import annotations

import sys
import time
from typing import Any

import orjson

from pipeline.commands.topic_reader import (
    NOT_RUNNING,
    partitions_at_end,
    positions_since,
    reader,
    until_end,
)
from runtime.cli import (
    Parser,
    add_connection,
    connect,
    run,
)
from schemas import topics

Latest = dict[str, dict[str, Any]]


def read_latest(
    bootstrap: str,
    since_s: float,
    group: str | None = None,
    timeout_s: float = 10.0,
    kafka: dict[str, str] | None = None,
    inputs: Latest | None = None,
) -> tuple[Latest, Latest, Latest]:
    """Latest ``group_lag`` per group|topic, ``partition_lag`` per group|topic|partition and
    ``group_health`` per group; with ``inputs``, the latest ``input_state`` per replica
    goes there (what each pipeline replica says of its own reader)."""
    consumer = reader(bootstrap, kafka or {}, "status", eof=True)
    try:
        lag = partitions_at_end(
            consumer, [topics.LAG], bootstrap=bootstrap, timeout_s=timeout_s, missing=NOT_RUNNING
        )
        summaries: dict[str, dict[str, Any]] = {}
        partitions: dict[str, dict[str, Any]] = {}
        health: dict[str, dict[str, Any]] = {}
        for msg, ev in until_end(consumer, positions_since(consumer, lag, since_s, timeout_s),
                                 timeout_s, poll_s=0.5):  # fmt: skip
            if ev.get("event") == "input_state":
                if inputs is not None:
                    inputs[str(ev["replica"])] = ev
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
    """Who consumes the partition: the SDK worker that reports it (flagged SILENT when it
    stopped reporting: hung or dead), else the member group health knows."""
    w = p.get("worker")
    if w:
        silent = f" SILENT {w['report_age_s']:.1f}s" if w.get("silent") else ""
        return f"{w['member']}@{w['host']}{silent}"
    o = p.get("owner")
    return f"{o['client_id']}@{o['client_host']} ({o['member_id']})" if o else "-"


def _num(x: float, width: int, decimals: int) -> str:
    """``x`` right-aligned, never ``-0.0`` (a rate a rounding error below zero)."""
    return f"{round(x, decimals) + 0.0:>{width}.{decimals}f}"


#: groups lagpilot itself runs (its pipeline, actuator and readers: ``OWN_GROUP_PREFIX``;
#: the local broker's readiness probe: ``__lagpilot``): hidden unless ``--all``, as groups
#: that never commit are (a plain reader: no lag to show)
OWN_PREFIXES = (topics.OWN_GROUP_PREFIX, "__lagpilot")


def own_group(group: str) -> bool:
    return group.startswith(OWN_PREFIXES)


def shown(summaries: Latest, partitions: Latest, health: Latest | None,
          *, everything: bool = False) -> tuple[Latest, Latest, Latest, int]:  # fmt: skip
    """What the table shows, and how many groups it hides: lagpilot's own groups and groups
    that never commit (in group health, with no lag events), unless ``everything``."""
    health = health or {}
    if everything:
        return summaries, partitions, health, 0
    lagging = {e["group"] for e in (*summaries.values(), *partitions.values())}
    hidden = {g for g in lagging | set(health) if own_group(g)}
    hidden |= {g for g in health if g not in lagging}
    return (
        {k: e for k, e in summaries.items() if e["group"] not in hidden},
        {k: e for k, e in partitions.items() if e["group"] not in hidden},
        {k: e for k, e in health.items() if e["group"] not in hidden},
        len(hidden),
    )


def consuming(group: str, summaries: Latest) -> str:
    """How much of the group's lag is consumed: ``none`` when every topic it reads is STOP
    (members there or not, nobody takes a record), ``some`` when one is, ``all`` otherwise,
    ``-`` when it has no lag events."""
    statuses = [s["status"] for s in summaries.values() if s["group"] == group]
    if not statuses:
        return "-"
    stopped = sum(st == "STOP" for st in statuses)
    return "none" if stopped == len(statuses) else "some" if stopped else "all"


LEGEND = (
    "STATUS: how its partitions are consumed (OK; WARN late for its cadence; ERR far behind; "
    "STALL stuck; STOP consumed by nobody; REWIND offsets moved back). HEALTH: its membership "
    "(OK stable; REBALANCING; STORM; EMPTY no members). A group can be healthy and consume "
    "nothing: CONSUMING says so. ETA only while the lag drains. TYPE: consumer group, or share "
    "group (KIP-932: COMMITTED is its position, the high watermark less the broker's lag)."
)


def behind_lines(inputs: Latest | None) -> list[str]:
    """A line per pipeline replica that says it is behind (its figures are that old)."""
    out = []
    for replica, ev in sorted((inputs or {}).items()):
        if ev.get("behind"):
            paused = "; reading paused at LAGPILOT_MAX_BUFFERED_BYTES" if ev.get("paused") else ""
            out.append(
                f"pipeline replica {replica} is BEHIND: {ev['behind_s']:.1f} s, "
                f"{ev['backlog_records']:,} __consumer_offsets records unread{paused} "
                "(its lag figures are that old; docs/runbook.md: When lagpilot itself lags)"
            )
    return out


def render(summaries: Latest, partitions: Latest, health: Latest | None = None,
           hidden: int = 0, inputs: Latest | None = None) -> str:  # fmt: skip
    behind = behind_lines(inputs)
    lines = [*behind, *([""] if behind else [])]
    lines += [
        f"{'GROUP':<28} {'TYPE':<8} {'TOPIC':<28} {'STATUS':<7} {'LAG':>10} {'TIME LAG s':>10} "
        f"{'RATE/s':>9} {'PARTS':>5}"
    ]
    for s in sorted(summaries.values(), key=lambda s: (-s["max_time_lag_s"], s["group"])):
        lines.append(
            f"{s['group'][:28]:<28} {s.get('group_type', 'consumer'):<8} "
            f"{s['topic'][:28]:<28} {s['status']:<7} "
            f"{s['total_lag_offsets']:>10} {_num(s['max_time_lag_s'], 10, 2)} "
            f"{_num(s['lag_rate_per_s'], 9, 1)} {s['partitions']:>5}"
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
                f"{p['lag_offsets']:>9} {_num(p['time_lag_s'], 10, 2)} "
                f"{_num(p['lag_rate_per_s'], 9, 1)} {eta:>8} {_owner(p)}"
            )
    if health:
        lines += [
            "",
            f"{'GROUP':<28} {'HEALTH':<11} {'CONSUMING':<9} {'PROTOCOL':<8} {'STATE':<11} "
            f"{'GEN':>6} {'MEMBERS':>7} {'REBAL/min':>9} {'STALLED':<7} STORM MEMBER",
        ]
        for h in sorted(health.values(), key=lambda h: h["group"]):
            storm = h.get("storm") or {}
            named = f"{storm['client_id']}@{storm['client_host']}" if storm else "-"
            lines.append(
                f"{h['group'][:28]:<28} {h['status']:<11} {consuming(h['group'], summaries):<9} "
                f"{h['protocol']:<8} {h['state']:<11} {h['generation']:>6} "
                f"{len(h['members']):>7} {_num(h['rebalances_per_min'], 9, 1)} "
                f"{'yes' if h['commits_stalled'] else 'no':<7} {named}"
            )
    if not summaries and not partitions and not health:
        lines.append("(no lag events in the window: is the pipeline running?)")
    else:
        lines += ["", LEGEND]
    if hidden:
        lines.append(f"({hidden} groups hidden: lagpilot's own and groups that never commit; "
                     "--all shows them)")  # fmt: skip
    return "\n".join(lines)


def as_json(summaries: Latest, partitions: Latest, health: Latest | None = None,
            inputs: Latest | None = None) -> str:  # fmt: skip
    """One JSON document for scripts: the events as they are on the topic, each group
    health event with the table's ``consuming`` beside it, and the replicas' ``inputs``."""
    doc = {
        "groups": sorted(summaries.values(), key=lambda s: (s["group"], s["topic"])),
        "partitions": sorted(
            partitions.values(), key=lambda p: (p["group"], p["topic"], p["partition"])
        ),
        "group_health": [
            {**h, "consuming": consuming(h["group"], summaries)}
            for h in sorted((health or {}).values(), key=lambda h: h["group"])
        ],
        "inputs": [ev for _, ev in sorted((inputs or {}).items())],
    }
    return orjson.dumps(doc).decode()


EXAMPLE = """example:
  KAFKA_BOOTSTRAP=redpanda-0:9092 lagpilot status --group doc-parsers --watch
  lagpilot status --json | jq '.groups[] | select(.status != "OK")'
"""


def _parser() -> Parser:
    p = Parser(prog="lagpilot status", description=__doc__, epilog=EXAMPLE)
    add_connection(p)
    p.option("--group", env="LAGPILOT_STATUS_GROUP", help="only this consumer group")
    p.option(
        "--since-s",
        env="LAGPILOT_STATUS_SINCE_S",
        default=5.0,
        type=float,
        help="read this many seconds back",
    )
    p.switch("--partitions", env="LAGPILOT_STATUS_PARTITIONS", help="also print every partition")
    p.switch(
        "--json",
        env="LAGPILOT_STATUS_JSON",
        help="print {groups: [...], partitions: [...], group_health: [...]} as JSON",
    )
    p.switch(
        "--all",
        env="LAGPILOT_STATUS_ALL",
        help="also lagpilot's own groups and groups that never commit",
    )
    p.option(
        "--watch",
        env="LAGPILOT_STATUS_WATCH_S",
        type=float,
        nargs="?",
        const=2.0,
        help="redraw every N seconds (2 if no N) until Ctrl-C",
    )
    return p


def _status(args: Any) -> int:
    connect(args.bootstrap, args.kafka, args.connect_timeout_s, topic=topics.LAG)
    show_partitions = args.partitions or bool(args.group) or args.json
    while True:
        inputs: Latest = {}
        summaries, partitions, health = read_latest(
            args.bootstrap, args.since_s, args.group, args.connect_timeout_s, args.kafka, inputs
        )
        everything = args.all or bool(args.group)  # a group asked for by name is shown
        summaries, partitions, health, hidden = shown(
            summaries, partitions, health, everything=everything
        )
        parts = partitions if show_partitions else {}
        text = (as_json(summaries, parts, health, inputs) if args.json
                else render(summaries, parts, health, hidden, inputs))  # fmt: skip
        if not args.watch:
            print(text)
            return 0
        if not args.json:  # a live view: clear the screen, then the table and its time
            stamp = time.strftime("%H:%M:%S")
            text = f"\x1b[H\x1b[2J{stamp}  lagpilot status (every {args.watch:g} s)\n{text}"
        print(text, flush=True)
        time.sleep(args.watch)


def main(argv: list[str] | None = None) -> int:
    return run("lagpilot status", _parser(), _status, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
