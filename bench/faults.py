"""Faults survived, in one table: ``bench/results/faults.json`` and ``docs/reliability.md``.

One row per fault of issue 18, each with: recovered, time to recover (after the fault
clears), lost messages, duplicate side effects, duplicate actions (an id applied twice),
stuck throttles (quotas left after their lease) and whether a person was needed. A row this
benchmark does not measure yet says so (``measured: false``) and why; it never carries
figures it did not measure.

Measured here:

- 1, the single broker killed (-9) and restarted 10 s later under the swarm, the pipeline
  (act), the actuator and the SDK workers (``bench/fault_broker.py``; full run only);
- 4, the actuator SIGKILLed between apply and outcome (``bench/fault_process.py``; full
  run only); the pipeline's SIGKILL is not measured;
- 5, the Redpanda Admin API failing (``bench/fault_control.py``);
- 6a, 1,000,000 fuzzed ``__consumer_offsets`` records through the decoder
  (``bench/fault_decoder.py``); 6b, 20,000 of them in a real offsets topic read by the
  running pipeline around true commits (``bench/fault_garbage.py``; full run only);
- 7, bad control input on the real broker (``bench/fault_control.py``).

The broker: this benchmark starts its own (``deploy/local/kafka.sh`` on port 23092 with its
own run folder, stopped at the end), never a broker someone else runs, unless
``--bootstrap`` names one.

    .venv/bin/python -m bench.faults [--smoke] [--bootstrap HOST:PORT] [--out PATH] [--doc PATH]
"""

from __future__ import annotations

import argparse
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from bench import (
    fault_cluster,
    fault_control,
    fault_decoder,
    fault_garbage,
    fault_network,
    fault_process,
)
from bench.fault_broker import OwnBroker, broker_kill
from bench.fault_doc import RECOVER_TARGET_S, _cell, render_doc

ROOT = Path(__file__).resolve().parents[1]

OWN_BROKER_PORT = 23092
CLUSTER_PORT = 26092  # the 3-broker cluster of row 2: 26092..26097
FUZZ_RECORDS = 1_000_000
OUTAGE_S = 60.0
KILL_EVENTS = 300
GARBAGE_RECORDS = 20_000

BROKER_KILL_TITLE = "1. single broker killed (-9), restarted 10 s later"
GARBAGE_TITLE = "6b. a real offsets topic full of garbage records, read by the running pipeline"
PROCESS_KILL_TITLE = (
    "4. pipeline SIGKILLed mid-incident; actuator SIGKILLed between apply and outcome"
)
CLUSTER_TITLE = "2. 3 brokers: __consumer_offsets leader, then controller, killed and restarted"
NETWORK_TITLE = "3. network cut pipeline-broker, then workers-broker, 15 s each"
NOT_MEASURED: dict[str, tuple[str, str]] = {}


@contextmanager
def own_broker(port: int, brokers: int = 1, **env: str) -> Iterator[OwnBroker]:
    """A broker (or ``brokers`` nodes) of our own on ``port`` with its own run folder;
    stopped (only it) on exit."""
    broker = OwnBroker(port, brokers=brokers, extra_env=env)
    try:
        broker.up()
        yield broker
    finally:
        broker.down()
        shutil.rmtree(broker.run_dir, ignore_errors=True)


def _row(fault: str, title: str, **fields: Any) -> dict[str, Any]:
    row = {
        "fault": fault,
        "title": title,
        "measured": True,
        "recovered": None,
        "recover_s": None,
        "lost": None,
        "duplicate_side_effects": None,
        "duplicate_actions": None,
        "stuck_throttles": None,
        "needed_a_person": None,
        "targets_met": None,
        "why": "",
    } | fields
    return row


def decoder_row(n: int) -> dict[str, Any]:
    got = fault_decoder.run(n)
    ok = got["crashes"] == 0 and got["unclassified"] == 0
    return _row(
        "decoder_fuzz",
        f"6a. {n:,} fuzzed/mutated __consumer_offsets records through the decoder",
        recovered=ok,
        lost=0,
        duplicate_side_effects=0,
        duplicate_actions=0,
        stuck_throttles=0,
        needed_a_person=not ok,
        targets_met=ok,
        why=(
            f"{got['crashes']} crashes, {got['unclassified']} unclassified of {n:,}; "
            f"{got['records_per_s']:,} records/s"
        ),
        details=got,
    )


def control_row(bootstrap: str, tmp: Path) -> dict[str, Any]:
    got = fault_control.bad_control_input(bootstrap, tmp)
    ok = (
        got["with_outcome"] == got["events"]
        and got["applied"] == 0
        and got["backend_calls"] == got["backend_calls_expected"]
        and got["duplicate_actions"] == 0
    )
    missing = [k for k, v in got["per_kind"].items() if not v["outcomes"]]
    why = (
        f"{got['events']} bad events: {got['rejected_pct']}% got a non-applied outcome, "
        f"{got['applied']} applied; backend calls {got['backend_calls']} (the real action once)"
    )
    if missing:
        why += f"; no outcome for: {', '.join(missing)}"
    return _row(
        "bad_control_input",
        "7. bad control input (unsigned, forged, altered, expired, wrong schema, oversized, "
        "replayed, off allow-list, not JSON) on the real broker",
        recovered=ok,
        lost=0,
        duplicate_side_effects=max(0, got["backend_calls"] - got["backend_calls_expected"]),
        duplicate_actions=got["duplicate_actions"],
        stuck_throttles=0,
        needed_a_person=not ok,
        targets_met=ok,
        why=why,
        details=got,
    )


def admin_row(bootstrap: str, outage_s: float, timeout_faults: bool) -> dict[str, Any]:
    got = fault_control.admin_api_faults(
        bootstrap, outage_s=outage_s, window_s=min(8.0, outage_s), timeout_faults=timeout_faults
    )
    faults = got["faults"]
    recover = [f["recover_s"] for f in faults.values()]
    recovered = all(r is not None for r in recover)
    failed_with_reason = all(
        f["action_during"] == ["failed"] and f["reason"]
        for k, f in faults.items()
        if k != "slow_answers"
    )
    slowest = max((r for r in recover if r is not None), default=None)
    ok = (
        recovered
        and failed_with_reason
        and slowest is not None
        and slowest <= RECOVER_TARGET_S
        and got["duplicate_side_effects"] == 0
        and got["duplicate_actions"] == 0
        and got["outcomes_per_action_max"] == 1
        and not got["violations"]
    )
    parts = [
        f"{k}: {f['action_during']} after {f['http_requests_for_one_action']} HTTP requests "
        f"in {f['action_took_s']} s"
        for k, f in faults.items()
    ]
    return _row(
        "admin_api_faults",
        f"5. Redpanda Admin API: 503 for {outage_s:g} s, timeouts, slow answers, a 307 loop",
        recovered=recovered,
        recover_s=slowest,
        lost=0,
        duplicate_side_effects=got["duplicate_side_effects"],
        duplicate_actions=got["duplicate_actions"],
        stuck_throttles=0,
        needed_a_person=not recovered,
        targets_met=ok,
        why="; ".join(parts),
        details=got,
    )


def load_row(fault: str, title: str, got: dict[str, Any], what: str) -> dict[str, Any]:
    """A row of a fault run under load (``fault_broker.under_load``): rows 1, 2 and 3."""
    waits = got["recover_s"]
    recovered = all(v is not None for v in waits.values()) and all(got["alive_at_end"].values())
    slowest = max((v for v in waits.values() if v is not None), default=None)
    ok = (
        recovered
        and slowest is not None
        and slowest <= RECOVER_TARGET_S
        and got["lost"] == got["duplicate_side_effects"] == got["duplicate_actions"] == 0
        and got["stuck_throttles"] == 0
    )
    dead = [k for k, v in got["alive_at_end"].items() if not v]
    after = "; ".join(
        f"after {c['label']}: detection {_cell(c['detection_s'])} s, workers "
        f"{_cell(c['workers_s'])} s, actuator {_cell(c['actuator_s'])} s"
        for c in got["clears"]
    )
    why = f"{what}; {after}; {got['produced']} produced, {got['processed']} processed"
    if got.get("unacknowledged"):  # never accepted: not lost, and the producer was told
        why += (
            f"; {got['unacknowledged']} more never acknowledged to the swarm's producer "
            f"({', '.join(got.get('produce_errors') or {}) or 'purged unsent'}), so not counted"
        )
    if dead:
        why += f"; dead at the end (needed a restart): {', '.join(dead)}"
    if got["duplicate_side_effects"]:
        why += (
            f"; the workers' exactly-once ledger holds {got['duplicate_side_effects']} "
            "message(s) twice"
        )
    return _row(
        fault,
        title,
        recovered=recovered,
        recover_s=slowest,
        lost=got["lost"],
        duplicate_side_effects=got["duplicate_side_effects"],
        duplicate_actions=got["duplicate_actions"],
        stuck_throttles=got["stuck_throttles"],
        needed_a_person=bool(dead) or not recovered,
        targets_met=ok,
        why=why,
        details=got,
    )


def broker_kill_row(broker: OwnBroker, tmp: Path) -> dict[str, Any]:
    got = broker_kill(broker, tmp)
    what = f"broker down {got['down_s']} s (restart took {got['broker_restart_s']} s)"
    return load_row("broker_kill", BROKER_KILL_TITLE, got, what)


def cluster_row(tmp: Path) -> dict[str, Any]:
    # a node restarted under load takes long to catch up: give it 4 minutes, not 90 s
    ready = {"LAGPILOT_BROKER_READY_TIMEOUT_S": "240"}
    with own_broker(CLUSTER_PORT, brokers=fault_cluster.BROKERS, **ready) as cluster:
        got = fault_cluster.leader_then_controller(cluster, tmp)
    k = got["killed"]
    got["broker_failed_restarts"] = cluster.failed_restarts
    got["nodes_died_on_their_own"] = cluster.died_on_own
    what = (
        f"3 nodes; killed -9 and restarted {fault_cluster.DOWN_S:g} s later: node "
        f"{k.get('offsets_leader')} (the swarm group's coordinator, leading its "
        f"__consumer_offsets partition), then node {k.get('controller')} (the KRaft controller)"
    )
    if cluster.failed_restarts:
        what += (
            f"; {cluster.failed_restarts} node start(s) exited (not caught up with the "
            "controller in time, a loaded machine) and were started again, as a supervisor would"
        )
    if cluster.died_on_own:
        what += (
            f"; {len(cluster.died_on_own)} node(s) found dead at their kill (exited on their "
            "own after a restart; their last lines in the JSON): down all the same, restarted"
        )
    return load_row("cluster_leader_kill", CLUSTER_TITLE, got, what)


def network_row(tmp: Path) -> dict[str, Any]:
    env = {"LAGPILOT_BROKER_EXTRA_LISTENERS": fault_network.EXTRA_LISTENERS}
    with own_broker(fault_network.PORT, **env) as broker:
        got = fault_network.cut_pipeline_then_workers(broker, tmp)
    what = (
        f"cuts of {fault_network.CUT_S:g} s by a proxy holding every byte (the broker "
        "advertises the proxy to the pipeline and to the workers; producers and actuator direct)"
    )
    return load_row("network_cut", NETWORK_TITLE, got, what)


def process_kill_row(bootstrap: str, tmp: Path, n: int) -> dict[str, Any]:
    got = fault_process.actuator_kill(bootstrap, tmp, n)
    pk = fault_process.pipeline_kill(bootstrap, tmp)
    twice = got["reapplied"] + got["released_twice"]
    pk_waits = [v for v in pk["recover_s"].values()]
    pk_recover = None if None in pk_waits else max(pk_waits)
    recovered = (
        got["recover_s"] is not None
        and got["outcomes_applied"] == n
        and pk["killed_mid_incident"]
        and pk_recover is not None
        and all(pk["alive_at_end"].values())
    )
    slowest = max((v for v in (got["recover_s"], pk_recover) if v is not None), default=None)
    ok = (
        recovered
        and slowest is not None
        and slowest <= RECOVER_TARGET_S
        and got["lost"] == got["duplicate_actions"] == got["stuck_throttles"] == twice == 0
        and pk["lost"] == pk["duplicate_actions"] == pk["stuck_throttles"] == 0
        and pk["duplicate_side_effects"] == 0
    )
    w = pk["recover_s"]
    why = (
        f"actuator: {n} leased throttles, killed after {got['applied_before_kill']} reached "
        f"the backend; the replacement committed each once ({got['outcomes_applied']} applied "
        f"outcomes, {got['reconciled']} of them reconciled: an intent without outcome, the "
        f"quota already set, not set again), backend calls made twice {twice}, every lease "
        f"released (recovered in {_cell(got['recover_s'])} s). Pipeline: killed mid-incident "
        f"after its first {pk.get('actions_before_kill', 0)} action(s) (a hot partition); "
        f"from its replacement's start (same state, same group): detection "
        f"{_cell(w['detection_s'])} s, workers {_cell(w['workers_s'])} s, actuator "
        f"{_cell(w['actuator_s'])} s; {pk['actions_published']} actions published, "
        f"{pk['action_ids']} ids, {pk['published_again']} published again (same id), outcomes "
        f"{pk['outcomes']}; {pk['produced']} produced, {pk['processed']} processed"
    )
    if not pk["killed_mid_incident"]:
        why += "; no action came before the kill: not mid-incident"
    return _row(
        "process_kill",
        PROCESS_KILL_TITLE,
        recovered=recovered,
        recover_s=slowest,
        lost=got["lost"] + pk["lost"],
        duplicate_side_effects=twice + pk["duplicate_side_effects"],
        duplicate_actions=got["duplicate_actions"] + pk["duplicate_actions"],
        stuck_throttles=got["stuck_throttles"] + pk["stuck_throttles"],
        needed_a_person=not recovered,
        targets_met=ok,
        why=why,
        details=got | {"pipeline": pk},
    )


def garbage_row(bootstrap: str, tmp: Path, garbage: int) -> dict[str, Any]:
    got = fault_garbage.garbage_topic(bootstrap, tmp, garbage=garbage, commits=400)
    counted = got["counted_skipped"] == got["expected_skipped"]
    ok = got["pipeline_alive"] and got["true_commits_modelled"] and counted
    why = (
        f"{got['garbage_records']:,} garbage records around {got['true_commits']} true "
        f"commits: {got['counted_skipped']:,} counted as skipped (the decoder skips "
        f"{got['expected_skipped']:,} of them; the rest decode as records of other groups), "
        f"true commits modelled: {_cell(got['true_commits_modelled'])} "
        f"(within {got['modelled_within_s']} s of the last write), pipeline alive: "
        f"{_cell(got['pipeline_alive'])}"
    )
    if got["bad_messages"]:
        why += f"; whole messages skipped by the model: {got['bad_messages']}"
    if got["skip_warnings"]:
        why += f"; first: {got['skip_warnings'][0].split(': ', 1)[-1]}"
    if got["pipeline_exit"]:
        why += f"; the pipeline exited at stop: {got['pipeline_exit']}"
    return _row(
        "garbage_topic",
        GARBAGE_TITLE,
        recovered=ok,
        # partitions whose last true commit never reached the model
        lost=sum(1 for k, v in got["last_commits"].items() if got["modelled_commits"].get(k) != v),
        duplicate_side_effects=0,
        duplicate_actions=0,
        stuck_throttles=0,
        needed_a_person=not got["pipeline_alive"] or not got["true_commits_modelled"],
        targets_met=ok,
        why=why,
        details=got,
    )


ORDER = ["broker_kill", "cluster_leader_kill", "network_cut", "process_kill",
         "admin_api_faults", "decoder_fuzz", "garbage_topic", "bad_control_input"]  # fmt: skip
TITLES = {
    "broker_kill": BROKER_KILL_TITLE,
    "cluster_leader_kill": CLUSTER_TITLE,
    "network_cut": NETWORK_TITLE,
    "process_kill": PROCESS_KILL_TITLE,
    "garbage_topic": GARBAGE_TITLE,
} | {fault: title for fault, (title, _) in NOT_MEASURED.items()}


def _commit() -> str | None:
    """The commit measured (with ``+dirty`` when the tree has changes), or None."""
    import subprocess

    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--",
                                "actuators", "pipeline", "schemas", "bench", "deploy"],
                               capture_output=True, text=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def run(
    bootstrap: str,
    *,
    fuzz_records: int,
    outage_s: float,
    timeout_faults: bool,
    kill_events: int | None,
    broker: OwnBroker | None,
    only: set[str] | None = None,
    previous: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The rows; ``broker`` (ours, to kill) None skips row 1, ``kill_events`` None (a smoke
    run) the long rows. ``only``: measure these rows, take the others from ``previous``."""
    full = kill_events is not None
    makers: dict[str, Callable[[Path], dict[str, Any]]] = {
        "admin_api_faults": lambda t: admin_row(bootstrap, outage_s, timeout_faults),
        "decoder_fuzz": lambda t: decoder_row(fuzz_records),
        "bad_control_input": lambda t: control_row(bootstrap, t),
    }
    if full:
        assert kill_events is not None
        makers["garbage_topic"] = lambda t: garbage_row(bootstrap, t, GARBAGE_RECORDS)
        makers["process_kill"] = lambda t: process_kill_row(bootstrap, t, kill_events)
        makers["cluster_leader_kill"] = cluster_row
        makers["network_cut"] = network_row
        for fault in NOT_MEASURED:
            makers.pop(fault, None)
    if broker is not None:
        makers["broker_kill"] = lambda t: broker_kill_row(broker, t)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="lagpilot-faults-") as tmp:
        for fault in ORDER:
            if only is not None and fault not in only and previous and fault in previous:
                rows.append(previous[fault])
            elif fault in makers and (only is None or fault in only):
                print(f"measuring {fault} ...", flush=True)
                try:
                    rows.append(makers[fault](Path(tmp)) | {"commit": _commit()})
                except Exception as exc:  # one row's failure must not lose the others
                    rows.append(_row(fault, TITLES.get(fault, fault), measured=False,
                                     why=f"the run of this row failed: {type(exc).__name__}: "
                                     f"{str(exc)[:300]}"))  # fmt: skip
            elif fault in NOT_MEASURED:
                rows.append(_row(fault, TITLES[fault], measured=False, why=NOT_MEASURED[fault][1]))
            elif fault == "broker_kill" and broker is None:
                rows.append(_row(fault, TITLES[fault], measured=False,
                                 why="not run: the broker was not the benchmark's own "
                                 "(--bootstrap), and it kills only its own"))  # fmt: skip
            else:
                rows.append(_row(fault, TITLES.get(fault, fault), measured=False,
                                 why="not run in this (smoke) run"))  # fmt: skip
    return {
        "rows": rows,
        "targets": {
            "lost": 0,
            "duplicate_side_effects": 0,
            "duplicate_actions": 0,
            "stuck_throttles": 0,
            "recover_s_max": RECOVER_TARGET_S,
        },
        "measured": sum(1 for r in rows if r["measured"]),
        "of": len(rows),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="a run of well under a minute")
    parser.add_argument("--bootstrap", help="use this running broker instead of our own")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "faults.json")
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "reliability.md")
    parser.add_argument("--render", action="store_true", help="only rewrite --doc from --out")
    parser.add_argument(
        "--only",
        help=f"comma-separated rows to measure again ({', '.join(ORDER)}); the others are "
        "kept from --out",
    )
    args = parser.parse_args(argv)
    if args.render:
        args.doc.write_text(render_doc(orjson.loads(args.out.read_bytes())))
        print(f"wrote {args.doc} from {args.out}")
        return 0
    params: dict[str, Any] = (
        {"fuzz_records": 10_000, "outage_s": 3.0, "timeout_faults": False, "kill_events": None}
        if args.smoke
        else {"fuzz_records": FUZZ_RECORDS, "outage_s": OUTAGE_S, "timeout_faults": True,
              "kill_events": KILL_EVENTS}
    )  # fmt: skip
    if args.only:
        params["only"] = set(args.only.split(","))
        unknown = params["only"] - set(ORDER)
        if unknown:
            parser.error(f"--only: unknown rows {sorted(unknown)}; use some of {ORDER}")
        if args.out.exists():
            kept = orjson.loads(args.out.read_bytes())["rows"]
            params["previous"] = {r["fault"]: r for r in kept}
    if args.bootstrap:
        result = run(args.bootstrap, broker=None, **params)
    else:
        with own_broker(OWN_BROKER_PORT) as broker:
            result = run(broker.bootstrap, broker=broker, **params)
    result["smoke"] = args.smoke
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    args.doc.parent.mkdir(parents=True, exist_ok=True)
    args.doc.write_text(render_doc(result))
    for r in result["rows"]:
        state = "not measured" if not r["measured"] else f"targets met: {_cell(r['targets_met'])}"
        print(f"{r['fault']:<22} {state}  {r['why'][:150]}")
    print(f"wrote {args.out} and {args.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
