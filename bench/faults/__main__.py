"""Faults survived, in one table: ``bench/results/faults.json`` and ``docs/reliability.md``.

One row per fault of issue 18, each with: recovered, time to recover (after the fault
clears), lost messages, duplicate side effects, duplicate actions (an id applied twice),
stuck throttles (quotas left after their lease) and whether a person was needed. A row this
benchmark does not measure yet says so (``measured: false``) and why; it never carries
figures it did not measure.

Measured here:

- 1, the single broker killed (-9) and restarted 10 s later under the swarm, the pipeline
  (act), the actuator and the SDK workers (``bench/faults/broker.py``; full run only);
- 4, the actuator SIGKILLed between apply and outcome (``bench/faults/process.py``; full
  run only); the pipeline's SIGKILL is not measured;
- 5, the Redpanda Admin API failing (``bench/faults/control.py``);
- 6a, 1,000,000 fuzzed ``__consumer_offsets`` records through the decoder
  (``bench/faults/decoder.py``); 6b, 20,000 of them in a real offsets topic read by the
  running pipeline around true commits (``bench/faults/garbage.py``; full run only);
- 7, bad control input on the real broker (``bench/faults/control.py``);
- 8a, one of two pipeline replicas SIGKILLed (``bench/faults/replicas.py``), 8b, the
  actuator cut from the broker for 20 s (``bench/faults/actuator_cut.py``, its own broker
  on port 27392 and a proxy on 27396), 8c, the state directory read-only, then full
  (``bench/faults/state_dir.py``, a tmpfs it mounts: root only), 8d, one replica fed
  several times what it holds for a minute (``bench/faults/overload.py``); full run only.

Each row is measured and judged in ``bench/faults/rows.py``; this module picks the rows,
runs them and writes the JSON and the doc. The broker: this benchmark starts its own
(``deploy/local/kafka.sh`` on port 23092 with its own run folder, stopped at the end),
never a broker someone else runs, unless ``--bootstrap`` names one.

    .venv/bin/python -m bench.faults [--smoke] [--bootstrap HOST:PORT] [--out PATH] [--doc PATH]
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.faults.doc import cell, read_soak, render_doc
from bench.faults.rows import (
    NOT_MEASURED,
    ORDER,
    TITLES,
    actuator_cut_row,
    admin_row,
    broker_kill_row,
    cluster_row,
    control_row,
    decoder_row,
    garbage_row,
    network_row,
    overload_row,
    process_kill_row,
    replica_kill_row,
    row,
    state_dir_row,
)
from bench.support.broker import OwnBroker, own_broker
from bench.support.fault_load import RECOVER_TARGET_S
from bench.support.results import git_commit, run_stamp, write_result

ROOT = Path(__file__).resolve().parents[2]

OWN_BROKER_PORT = 23092
FUZZ_RECORDS = 1_000_000
OUTAGE_S = 60.0
KILL_EVENTS = 300
GARBAGE_RECORDS = 20_000


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
        makers["replica_overload"] = lambda t: overload_row(bootstrap, t)
        makers["replica_kill"] = lambda t: replica_kill_row(bootstrap, t)
        makers["actuator_cut"] = actuator_cut_row
        makers["state_dir"] = lambda t: state_dir_row(bootstrap, t)
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
                    rows.append(makers[fault](Path(tmp)) | {"commit": git_commit()})
                except Exception as exc:  # one row's failure must not lose the others
                    rows.append(row(fault, TITLES.get(fault, fault), measured=False,
                                     why=f"the run of this row failed: {type(exc).__name__}: "
                                     f"{str(exc)[:300]}"))  # fmt: skip
            elif fault in NOT_MEASURED:
                rows.append(row(fault, TITLES[fault], measured=False, why=NOT_MEASURED[fault][1]))
            elif fault == "broker_kill" and broker is None:
                rows.append(row(fault, TITLES[fault], measured=False,
                                 why="not run: the broker was not the benchmark's own "
                                 "(--bootstrap), and it kills only its own"))  # fmt: skip
            else:
                rows.append(row(fault, TITLES.get(fault, fault), measured=False,
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


def append_run(
    path: Path, result: dict[str, Any], stamp: dict[str, Any], only: set[str] | None
) -> None:
    """Add this run's measured rows (``only``'s, when given) to ``path``'s ``runs``, each run
    with its own stamp; the file's counts say in how many runs each row met its targets."""
    kept = orjson.loads(path.read_bytes())["runs"] if path.exists() else []
    rows = [r for r in result["rows"] if r["measured"] and (only is None or r["fault"] in only)]
    run_rows = []
    for r in rows:
        d = r.get("details") or {}
        run_rows.append(
            {k: r[k] for k in ("fault", "targets_met", "recovered", "recover_s", "lost",
                               "duplicate_side_effects", "duplicate_actions", "stuck_throttles")}
            | {"clears": d.get("clears"), "pipeline_rebuilds": d.get("pipeline_rebuilds"),
               "actuator_warnings": d.get("actuator_warnings"), "why": r["why"]}
        )  # fmt: skip
    runs = [*kept, stamp | {"rows": run_rows}]
    met: dict[str, list[int]] = {}
    for run_ in runs:
        for r in run_["rows"]:
            met.setdefault(r["fault"], [0, 0])
            met[r["fault"]][0] += bool(r["targets_met"])
            met[r["fault"]][1] += 1
    summary = {k: f"{m} of {n}" for k, (m, n) in met.items()}
    write_result(path, {"targets_met_in_runs": summary, "runs": runs}, stamp)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="a run of well under a minute")
    parser.add_argument("--bootstrap", help="use this running broker instead of our own")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "faults.json")
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "reliability.md")
    parser.add_argument("--render", action="store_true", help="only rewrite --doc from --out")
    parser.add_argument(
        "--runs-out",
        type=Path,
        help="also append the rows this run measured, with the run's own stamp, to this "
        "file's list of runs: a row run N times (--only, N invocations) keeps every run",
    )
    parser.add_argument(
        "--only",
        help=f"comma-separated rows to measure again ({', '.join(ORDER)}); the others are "
        "kept from --out",
    )
    args = parser.parse_args(argv)
    if args.render:
        args.doc.write_text(render_doc(orjson.loads(args.out.read_bytes()), read_soak()))
        print(f"wrote {args.doc} from {args.out}")
        return 0
    stamp = run_stamp()
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
    result = write_result(args.out, result, stamp)
    args.doc.parent.mkdir(parents=True, exist_ok=True)
    args.doc.write_text(render_doc(result, read_soak()))
    if args.runs_out:
        append_run(args.runs_out, result, stamp, params.get("only"))
    for r in result["rows"]:
        state = "not measured" if not r["measured"] else f"targets met: {cell(r['targets_met'])}"
        print(f"{r['fault']:<22} {state}  {r['why'][:150]}")
    print(f"wrote {args.out} and {args.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
