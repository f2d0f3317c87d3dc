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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]

from bench import fault_control, fault_decoder, fault_garbage, fault_process  # noqa: E402
from bench.fault_broker import OwnBroker, broker_kill  # noqa: E402

OWN_BROKER_PORT = 23092
RECOVER_TARGET_S = 30.0
FUZZ_RECORDS = 1_000_000
OUTAGE_S = 60.0
KILL_EVENTS = 300
GARBAGE_RECORDS = 20_000

BROKER_KILL_TITLE = "1. single broker killed (-9), restarted 10 s later"
GARBAGE_TITLE = "6b. a real offsets topic full of garbage records, read by the running pipeline"
PROCESS_KILL_TITLE = (
    "4. actuator SIGKILLed between apply and outcome (the pipeline's SIGKILL mid-incident: "
    "not measured)"
)
NOT_MEASURED = {
    "cluster_leader_kill": (
        "2. 3 brokers: __consumer_offsets leader, then controller, killed and restarted",
        "not run by this benchmark yet (needs BROKERS=3 runs of the same scenario)",
    ),
    "network_cut": (
        "3. network cut pipeline-broker, then workers-broker, 15 s each",
        "not run by this benchmark yet: needs a cutting TCP proxy and a broker whose "
        "advertised listener is the proxy (kafka.sh has no override for it yet)",
    ),
}


@contextmanager
def own_broker(port: int) -> Iterator[OwnBroker]:
    """A broker of our own on ``port`` with its own run folder; stopped (only it) on exit."""
    broker = OwnBroker(port)
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


def broker_kill_row(broker: OwnBroker, tmp: Path) -> dict[str, Any]:
    got = broker_kill(broker, tmp)
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
    why = (
        f"broker down {got['down_s']} s (restart took {got['broker_restart_s']} s); after it "
        f"served again: detection {_cell(waits['detection_s'])} s, workers "
        f"{_cell(waits['workers_s'])} s, actuator {_cell(waits['actuator_s'])} s; "
        f"{got['produced']} produced, {got['processed']} processed"
    )
    if dead:
        why += f"; dead at the end (needed a restart): {', '.join(dead)}"
    if got["duplicate_side_effects"]:
        why += (
            f"; the workers' exactly-once ledger holds {got['duplicate_side_effects']} "
            "message(s) twice"
        )
    return _row(
        "broker_kill",
        BROKER_KILL_TITLE,
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


def process_kill_row(bootstrap: str, tmp: Path, n: int) -> dict[str, Any]:
    got = fault_process.actuator_kill(bootstrap, tmp, n)
    recovered = got["recover_s"] is not None and got["outcomes_applied"] == n
    ok = (
        recovered
        and got["recover_s"] <= RECOVER_TARGET_S
        and got["lost"] == got["duplicate_actions"] == got["stuck_throttles"] == 0
        and got["reapplied"] == 0
    )
    why = (
        f"{n} leased throttles, killed after {got['applied_before_kill']} reached the backend; "
        f"the replacement committed each once ({got['outcomes_applied']} applied outcomes), "
        f"re-applied {got['reapplied']} calls of the uncommitted batch (max {got['max_batch']}"
        "): each sets the same quota again, a no-op on the cluster, counted as duplicate side "
        "effects all the same; every lease released. The pipeline's SIGKILL is not measured "
        "here (tests/integration/pipeline covers a kill -9 without figures)"
    )
    return _row(
        "process_kill",
        PROCESS_KILL_TITLE,
        recovered=recovered,
        recover_s=got["recover_s"],
        lost=got["lost"],
        duplicate_side_effects=got["reapplied"],
        duplicate_actions=got["duplicate_actions"],
        stuck_throttles=got["stuck_throttles"],
        needed_a_person=not recovered,
        targets_met=ok,
        why=why,
        details=got,
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


def not_measured_rows() -> list[dict[str, Any]]:
    return [
        _row(fault, title, measured=False, why=why) for fault, (title, why) in NOT_MEASURED.items()
    ]


def run(
    bootstrap: str,
    *,
    fuzz_records: int,
    outage_s: float,
    timeout_faults: bool,
    kill_events: int | None,
    broker: OwnBroker | None,
) -> dict[str, Any]:
    """The rows; ``broker`` (ours, to kill) None skips row 1, ``kill_events`` None row 4."""
    with tempfile.TemporaryDirectory(prefix="lagpilot-faults-") as tmp:
        measured = [
            admin_row(bootstrap, outage_s, timeout_faults),
            decoder_row(fuzz_records),
            control_row(bootstrap, Path(tmp)),
        ]
        if kill_events:
            measured.append(garbage_row(bootstrap, Path(tmp), GARBAGE_RECORDS))
            measured.append(process_kill_row(bootstrap, Path(tmp), kill_events))
        else:
            for fault, title in (
                ("garbage_topic", GARBAGE_TITLE),
                ("process_kill", PROCESS_KILL_TITLE),
            ):
                measured.append(_row(fault, title, measured=False,
                                     why="not run in this (smoke) run"))  # fmt: skip
        if broker is not None:
            measured.append(broker_kill_row(broker, Path(tmp)))
        else:
            measured.append(_row("broker_kill", BROKER_KILL_TITLE, measured=False,
                                 why="not run: the broker was not the benchmark's own "
                                 "(--bootstrap), and it kills only its own"))  # fmt: skip
    rows = measured + not_measured_rows()
    order = ["broker_kill", "cluster_leader_kill", "network_cut", "process_kill",
             "admin_api_faults", "decoder_fuzz", "garbage_topic", "bad_control_input"]  # fmt: skip
    rows.sort(key=lambda r: order.index(r["fault"]))
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


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if value is True:
        return "yes"
    if value is False:
        return "no"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _missed(row: dict[str, Any]) -> str:
    """Which targets a measured row missed, named from its own figures."""
    if not row["measured"] or row["targets_met"]:
        return ""
    missed = [f"{k} {row[k]}" for k in ("lost", "duplicate_side_effects", "duplicate_actions",
              "stuck_throttles") if row[k]]  # fmt: skip
    if row["recover_s"] is not None and row["recover_s"] > RECOVER_TARGET_S:
        missed.append(f"recovery {row['recover_s']} s")
    if not row["recovered"]:
        missed.append("not recovered")
    return f". **Targets missed**: {', '.join(missed) or 'see the notes'}"


def render_doc(result: dict[str, Any]) -> str:
    """docs/reliability.md, written from the JSON: no figure in it comes from anywhere else."""
    lines = [
        "# Reliability: faults survived",
        "",
        "Written by `make bench-faults` (`bench/faults.py`) from `bench/results/faults.json`;",
        "do not edit by hand. Targets: lost 0, duplicate side effects 0, duplicate actions 0,",
        f"stuck throttles 0, recovery within {RECOVER_TARGET_S:g} s of the fault clearing.",
        f"Rows measured: {result['measured']} of {result['of']}; a row marked *not measured*",
        "has no figures, and says why.",
        "",
        "| fault | measured | recovered | time to recover (s) | lost | duplicate side effects "
        "| duplicate actions | stuck throttles | needed a person | targets met | notes |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        cells = [
            r["title"],
            "yes" if r["measured"] else "*not measured*",
            *(
                _cell(r[k])
                for k in (
                    "recovered",
                    "recover_s",
                    "lost",
                    "duplicate_side_effects",
                    "duplicate_actions",
                    "stuck_throttles",
                    "needed_a_person",
                    "targets_met",
                )
            ),
            (r["why"] + _missed(r)).replace("|", "/"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "How each measured row is run:",
        "",
        "- **5, Admin API faults**: `lagpilot actuate`'s Runner with the Redpanda backend built",
        "  by `make_backend` (as the CLI builds it) against the Admin API contract stub",
        "  (`bench/support/redpanda_admin_stub.py`), on the benchmark's own broker. For each",
        "  fault one `transfer_leadership` is sent while the stub misbehaves on every request;",
        "  every HTTP request is counted (bounded retries, no hot loop), the outcome must be",
        "  `failed` with the error, and one outcome per action id (a budget is spent once).",
        "  When the fault clears one more transfer is sent: its `applied` outcome is recovery.",
        "  Slow answers (below the client's timeout) must still apply.",
        "- **6a, decoder fuzz**: real-shaped records (commits v1/v3, group metadata, KIP-848",
        "  and share-group keys, tombstones) mutated 0 to 3 times each (bytes flipped,",
        "  truncated, junk appended, record types and versions rewritten, length fields",
        "  absurd, invalid UTF-8, null or empty key/value, random bytes) through",
        "  `pipeline.read.offsets.decode_record`: a raise is a crash, a result of no known",
        "  class is unclassified.",
        "- **1, broker kill**: `bench/fault_broker.py`. A swarm of 16 producers (100 msg/s over",
        "  8 partitions) and its SDK workers (exactly-once side effects in a ledger), `lagpilot",
        "  run` in act mode (`deploy/policy.demo.toml`) and `lagpilot actuate` (Kafka backend)",
        "  run on the benchmark's own broker; it is killed with SIGKILL, restarted 10 s later",
        "  on its own data (`kafka.sh restart`). Recovery, from the broker serving again: the",
        "  first lag event, the first worker side effect, and a leased throttle's `applied`",
        "  outcome (its quota and that of a throttle whose lease ended during the outage must",
        "  be gone at the end). No process is restarted by the benchmark.",
        "- **4, actuator kill**: `bench/fault_process.py`. `lagpilot actuate` (dry-run backend,",
        "  every call fsynced) reads 300 leased throttles and is SIGKILLed once a third reached",
        "  the backend; a replacement with the same id finishes. Each id must have one",
        "  committed `applied` outcome; calls made again on replay are counted as duplicate",
        "  side effects (each sets the same quota: a no-op on a cluster); every lease released.",
        "- **6b, garbage topic**: `bench/fault_garbage.py`. `lagpilot run` reads its commits",
        "  from a topic of the benchmark's own (`LAGPILOT_OFFSETS_TOPIC`) holding 400 true",
        "  commits of one group, each followed by mutated records from 6a's corpus. Every",
        "  record the decoder skips must be counted (`lagpilot_decode_skipped_total`), the",
        "  last `partition_lag` of every partition must carry the last true commit, and the",
        "  pipeline must stay up.",
        "- **7, bad control input**: a running actuator (dry-run backend that fsyncs every",
        "  call) reads, on a fresh control topic, one real throttle and then each bad event;",
        "  each must get an outcome other than `applied`, and the backend must have seen",
        "  exactly one call (the real throttle; its replay is a `duplicate`).",
        "",
        "Found by this benchmark and fixed (each with a test):",
        "",
        "- `lagpilot run` ended after a broker restart (`CheckpointConsumerCommitError`,",
        "  UNKNOWN_MEMBER_ID: the restarted broker forgot the group): it now builds a new app",
        "  and runs again, with the same policy operator (`pipeline/__main__.py`).",
        "- The Redpanda backend retried inside the runner's retries: one action made 20 Admin",
        "  API requests (120 against a 307 loop). Retries now live in the runner only.",
        "- A signed, allow-listed control event padded to 256 KiB was applied, and its outcome",
        "  echoed it: events over 64 KiB are now rejected unread (`oversized`).",
        "- 6b: a garbage record can decode as a well-formed commit to an absurd partition (an",
        "  int32 up to 2,147,483,647): the model asked for 270 GiB, skipped the whole message",
        "  with the true commits beside it, and a large but allocatable width grew the state",
        "  past the broker's message size. A commit is now accepted only below twice the",
        "  topic's sampled width (4,096 before its first sample), the others counted in",
        '  `lagpilot_model_inputs_total{event="commit_rejected"}` (`pipeline/model/lag.py`).',
        "",
        "Found by this benchmark and not fixed:",
        "",
        "- 1: in development runs of this row the workers' exactly-once ledger",
        "  (`ctx.once_sql`) twice held one message twice across the broker restart; the run",
        "  above shows its own count. Intermittent, not diagnosed here (`actuators/workers/`).",
        "",
        "Regenerate: `make bench-faults` (about 5 minutes; it starts and stops its own broker",
        "on port 23092, and kills only that one).",
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="a run of well under a minute")
    parser.add_argument("--bootstrap", help="use this running broker instead of our own")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "faults.json")
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "reliability.md")
    parser.add_argument("--render", action="store_true", help="only rewrite --doc from --out")
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
