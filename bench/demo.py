"""``make demo``: the incident lagpilot exists for, live, on a laptop, in about two minutes.

Starts the local Kafka broker if none answers (and stops it at the end), then runs an agent
swarm (bench/support/swarm.py) into ``agents.perception``, lagpilot's pipeline under the
shipped policy (deploy/policy.default.toml, as it is) and its actuator. After the warm-up
an avalanche of heavy documents hits partitions 4 and 11; the screen shows every
partition's lag, time lag and status, the worker lanes, and each action lagpilot takes
with its outcome, then a summary. Ctrl-C, closing the terminal (SIGHUP) or a SIGTERM stop
everything cleanly: the swarm, the pipeline, the actuator and the broker if the demo
started it.

    .venv/bin/python -m bench.demo [--avalanche-s 30] [--no-screen] [--svg docs/demo-screen.svg]

``--svg`` (or ``DEMO_SVG``) writes the last screen and the summary as a picture: the one in
the README is ``make demo DEMO_SVG=docs/demo-screen.svg``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import signal
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, TopicPartition

from bench.incidents.war_story import one_run
from bench.support import broker
from bench.support.swarm import SwarmConfig
from bench.support.text_svg import text_svg
from pipeline.commands.tail import InstanceTally

ROOT = Path(__file__).resolve().parents[1]
SVG_COLS = 100  # the picture is what a 100-column terminal shows


class Tail:
    """Events appended to a topic from now on (no consumer group), in a thread."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.events: list[dict[str, Any]] = []
        group = f"demo-{uuid.uuid4().hex[:6]}"
        self._c = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
        )
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            md = self._c.list_topics(self.topic, timeout=2).topics.get(self.topic)
            if md is not None and md.error is None and md.partitions:
                self._c.assign([TopicPartition(self.topic, p, 0) for p in md.partitions])
                break
            time.sleep(0.5)
        while not self._stop.is_set():
            msg = self._c.poll(0.2)
            if msg is not None and not msg.error():
                self.events.append(orjson.loads(msg.value()))

    def close(self) -> None:
        self._stop.set()
        self._t.join(3)
        self._c.close()


class Screen:
    """The live view: partitions, lanes, actions and outcomes."""

    def __init__(self, bootstrap: str, enabled: bool) -> None:
        self.bootstrap = bootstrap
        self.enabled = enabled
        self.tails: dict[str, Tail] = {}
        self.started = time.monotonic()
        self.last: list[str] = []  # the last frame drawn (or that would have been)

    def _tail(self, topic: str) -> Tail:
        if topic not in self.tails:
            self.tails[topic] = Tail(self.bootstrap, topic)
        return self.tails[topic]

    def __call__(self, reader: Any, swarm: Any, cfg: SwarmConfig, phase: str) -> None:
        actions = self._tail(cfg.control_topic).events
        outcomes = self._tail(cfg.control_topic.replace("control", "outcomes")).events
        latest: dict[int, dict[str, Any]] = {}
        for e in reader.select(lambda e: e["event"] == "partition_lag"):
            latest[e["partition"]] = e
        t = time.monotonic() - self.started
        start = swarm.produced.avalanche_start_ms
        if start and not swarm.produced.avalanche_end_ms:
            age_s = (time.time() * 1000 - start) / 1000
            when = f"AVALANCHE on {list(cfg.hot_partitions)} for {age_s:4.1f}s"
        elif swarm.produced.avalanche_end_ms:
            when = "avalanche over"
        else:
            when = "warm-up"
        lines = [
            f"lagpilot demo  |  {cfg.topic}  ({cfg.partitions} partitions, group {cfg.group})",
            f"{phase:<10} t={t:5.1f}s  {when}",
            "",
            f"{'P':>3}  {'STATUS':<7} {'LAG':>6} {'TIME LAG s':>10} {'LAG RATE/s':>10} "
            f"{'LANES':>5}",
        ]
        for p in range(cfg.partitions):
            e = latest.get(p)
            lanes = swarm.worker.lanes(cfg.topic, p)
            hot = "  <- hot" if p in cfg.hot_partitions else ""
            if e is None:  # the group has not committed there yet: lagpilot has no position
                lines.append(f"{p:>3}  {'(none)':<7}{'':>6} {'':>10} {'':>10} {lanes:>5}{hot}")
                continue
            lines.append(
                f"{p:>3}  {e['status']:<7} {e['lag_offsets']:>6} {e['time_lag_s']:>10.2f} "
                f"{e['lag_rate_per_s']:>10.1f} {lanes:>5}{hot}"
            )
        res_by_id = {o.get("action_id"): o.get("result") for o in outcomes
                     if o.get("event") == "outcome"}  # fmt: skip
        verdicts = {v.get("action_id"): v for v in outcomes if v.get("event") == "verification"}
        tally = InstanceTally()
        for o in outcomes:
            if o.get("event") == "worker_outcome":
                tally.add(o)
        lines += ["", "actions (cause -> remedy -> outcome -> verification):"]
        for a in [a for a in actions if a.get("event") == "action"][-8:]:
            at = (a["issued_at"] - start) / 1000 if start else 0.0
            lines.append(f"  {at:+6.1f}s {cause_line(a)}")
            lines.append(f"          {remedy_line(a)}")
            result = res_by_id.get(a["id"], "pending")
            if result == "delegated":
                result += f", applied by {_workers(tally.applied_by(a['id']))}"
            v = verdicts.get(a["id"])
            lines.append(f"          -> {result}; {verdict_line(v) if v else 'verifying...'}")
        done = len({r[0] for r in swarm.ledger.rows()})
        lines += ["", f"processed {done:,} of {len(swarm.produced.ids):,} produced"]
        self.last = lines
        if self.enabled:
            sys.stdout.write("\x1b[H\x1b[2J" + "\n".join(lines) + "\n")
            sys.stdout.flush()

    def close(self) -> None:
        for t in self.tails.values():
            t.close()


def _workers(n: int) -> str:
    return f"{n} worker" if n == 1 else f"{n} workers"


def cause_line(a: dict[str, Any]) -> str:
    """``cause hotspot: partition 4 at 3.1 s behind; the rest at most 0.2 s``."""
    r = a.get("reason", {})
    cause, ev = r.get("cause"), r.get("evidence") or {}
    if cause is None:
        return f"rule {r.get('rule', '?')} (no diagnosis)"
    if cause == "hotspot":
        parts = ", ".join(f"{p} at {lag:.1f} s" for p, lag in
                          zip(ev.get("partitions", []), ev.get("partition_time_lag_s", []),
                              strict=False))  # fmt: skip
        rest = ev.get("next_worst_time_lag_s", 0.0)
        return f"cause hotspot: partition {parts} behind; the rest at most {rest:.1f} s"
    numbers = ", ".join(f"{k} {v}" for k, v in ev.items() if isinstance(v, int | float))
    return f"cause {cause}: {numbers}"


def remedy_line(a: dict[str, Any]) -> str:
    p, why = a.get("params", {}), a.get("reason", {}).get("why")
    if a["type"] == "spread_partition":
        where = f"to pool {p['pool']}" if p.get("pool") else f"over {p.get('lanes')} lanes"
        return f"remedy spread_partition {p.get('partition')} {where}"
    if a["type"] == "restore_partition":
        return f"undo restore_partition {p.get('partition')} ({why or 'incident cleared'})"
    return f"remedy {a['type']} {a['target']}" + (f" ({why})" if why else "")


def verdict_line(v: dict[str, Any], at_s: float | None = None) -> str:
    """``verified at +7.3s: time lag 3.10 s at apply -> 0.40 s`` (the policy's
    verification event; ``at_s``: when, since the avalanche began)."""
    ref, now = v.get("time_lag_at_apply_s"), v.get("time_lag_now_s")
    ref_s = "no outcome" if ref is None else f"{ref:.2f} s at apply"
    when = "" if at_s is None else f" at {at_s:+.1f}s"
    return f"{v['result']}{when}: time lag {ref_s} -> {now:.2f} s"


def action_lines(res: dict[str, Any]) -> list[str]:
    """Each action: its cause and evidence, the remedy, who applied it, and its verdict."""
    outcome = {o.get("action_id"): o["result"] for o in res["outcomes"]}
    verdict = {v.get("action_id"): v for v in res["verifications"]}
    instances: dict[str, set[str]] = {}
    for w in res["worker_outcomes"]:
        instances.setdefault(w.get("action_id") or "", set()).add(w["instance"])
    results = [v["result"] for v in res["verifications"]]
    lines = [f"  actions: {len(res['actions'])}; verified {results.count('verified')}, "
             f"no effect {results.count('no_effect')}"]  # fmt: skip
    for a in res["actions"]:
        full = {"type": a["type"], "target": a["target"], "params": a.get("params") or {},
                "reason": {"cause": a.get("cause"), "evidence": a.get("evidence")}}  # fmt: skip
        result = outcome.get(a.get("id"), "no outcome")
        if result == "delegated":
            result += f", applied by {_workers(len(instances.get(a.get('id') or '', ())))}"
        v = verdict.get(a.get("id"))
        judged = verdict_line(v, v["at_ms"] / 1000) if v else "not verified"
        lines += [f"  {a['at_ms'] / 1000:+6.1f}s {cause_line(full)}",
                  f"          {remedy_line(full)} ({a['mode']})",
                  f"          -> {result}; {judged}"]  # fmt: skip
    return lines


def summary_lines(res: dict[str, Any], took_s: float) -> list[str]:
    """The summary printed under the last screen (and pictured with it by ``--svg``)."""
    return [
        "summary",
        f"  messages: {res['produced']:,} produced, {res['processed']:,} processed, "
        f"lost {res['lost']}, duplicate side effects {res['duplicates']}",
        f"  end-to-end latency: p50 {res['p50_ms']} ms, p99 {res['p99_ms']} ms, "
        f"max {res['max_ms']} ms",
        f"  detection: {res['detection_ms']} ms after the avalanche began",
        *action_lines(res),
        f"  took {took_s:.0f} s; `make bench-war-story` compares with lagpilot off",
    ]


def _stop_on(*signums: int) -> None:
    """SIGTERM and SIGHUP (the terminal closed) end the demo as Ctrl-C does: the ``finally``
    blocks stop what it started. A second signal during that cleanup is ignored."""

    def handler(signum: int, _frame: Any) -> None:
        for s in signums:
            signal.signal(s, signal.SIG_IGN)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for s in signums:
        signal.signal(s, handler)


def _say(text: str) -> None:
    """Print, unless the terminal is gone (after a hang-up, writes fail with EIO)."""
    with contextlib.suppress(OSError):
        print(text, flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP"))
    ap.add_argument("--avalanche-s", type=float, default=30.0)
    ap.add_argument("--no-screen", action="store_true", help="no live screen (logs only)")
    ap.add_argument("--svg", default=os.environ.get("DEMO_SVG"),
                    help="write the last screen and the summary as an SVG here")  # fmt: skip
    args = ap.parse_args(argv)
    _stop_on(signal.SIGTERM, signal.SIGHUP)
    started = False
    screen: Screen | None = None
    t0 = time.monotonic()
    try:
        bootstrap = args.bootstrap or os.environ.get("KAFKA_BOOTSTRAP") or broker.recorded()
        if bootstrap is None:
            _say("starting the local Kafka broker (deploy/local/kafka.sh up) ...")
            started = True  # from here on the broker is ours to stop, even half-started
            bootstrap = broker.start_local()
        screen = Screen(bootstrap, enabled=not args.no_screen and sys.stdout.isatty())
        cfg = SwarmConfig(bootstrap=bootstrap, avalanche_s=args.avalanche_s)
        with tempfile.TemporaryDirectory() as tmp:
            res = one_run(cfg, balancer=True, workdir=Path(tmp), view=screen,
                          log=lambda *_: None)  # fmt: skip
        summary = summary_lines(res, time.monotonic() - t0)
        print("\n" + "\n".join(summary))
        if args.svg:
            picture = text_svg([*screen.last, "", *summary], cols=SVG_COLS,
                               title="make demo: lagpilot's last screen")  # fmt: skip
            Path(args.svg).write_text(picture)
            print(f"  the last screen and this summary pictured in {args.svg}")
    except KeyboardInterrupt as stop:
        why = f" ({stop.args[0]})" if stop.args else ""
        _say(f"\ninterrupted{why}: stopped the swarm, pipeline and actuator")
    except RuntimeError as exc:  # the local broker did not start
        _say(f"error: {exc}")
        return 1
    finally:
        if screen is not None:
            screen.close()
        if started:
            gc.collect()  # librdkafka clients left in cycles go now, not as the broker stops
            broker.stop_local()
            _say("stopped the local broker this demo started")
    return 0


if __name__ == "__main__":
    sys.exit(main())
