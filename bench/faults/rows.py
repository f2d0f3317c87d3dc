"""Each fault of ``python -m bench.faults`` measured and judged into one row of the table.

A row says whether the system recovered, how long it took after the fault cleared, lost
messages, duplicate side effects and actions, stuck throttles, whether a person was needed,
whether every target was met, and why, from what the fault's own module measured
(``bench.faults``' ``broker``, ``cluster``, ``network``, ``process``, ``control``,
``decoder``, ``garbage`` and ``overload``). The rows 2 and 3 start brokers of
their own. ``ORDER`` is the table's order; which rows run, and the file they go to, is
``python -m bench.faults``'s (``bench/faults/__main__.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.faults import actuator_cut as fault_actuator_cut
from bench.faults import cluster as fault_cluster
from bench.faults import control as fault_control
from bench.faults import decoder as fault_decoder
from bench.faults import garbage as fault_garbage
from bench.faults import network as fault_network
from bench.faults import overload as fault_overload
from bench.faults import process as fault_process
from bench.faults import replicas as fault_replicas
from bench.faults import state_dir as fault_state_dir
from bench.faults.broker import broker_kill
from bench.faults.doc import cell
from bench.support.broker import OwnBroker, own_broker
from bench.support.fault_load import RECOVER_TARGET_S

CLUSTER_PORT = 26092  # the 3-broker cluster of row 2: 26092..26097

BROKER_KILL_TITLE = "1. single broker killed (-9), restarted 10 s later"
GARBAGE_TITLE = "6b. a real offsets topic full of garbage records, read by the running pipeline"
PROCESS_KILL_TITLE = (
    "4. pipeline SIGKILLed mid-incident; actuator SIGKILLed between apply and outcome"
)
CLUSTER_TITLE = "2. 3 brokers: __consumer_offsets leader, then controller, killed and restarted"
NETWORK_TITLE = "3. network cut pipeline-broker, then workers-broker, 15 s each"
OVERLOAD_TITLE = "8d. one replica fed several times what it holds, for 60 s"
REPLICA_KILL_TITLE = "8a. one of two pipeline replicas SIGKILLed under load"
ACTUATOR_CUT_TITLE = "8b. the actuator cut from the broker (network) for 20 s while actions are due"
STATE_DIR_TITLE = "8c. the pipeline's state directory read-only at start, then full mid-run"
NOT_MEASURED: dict[str, tuple[str, str]] = {}


def row(fault: str, title: str, **fields: Any) -> dict[str, Any]:
    """A row of the table: every column, None until measured; ``fields`` fill it in."""
    out = {
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
    return out


def decoder_row(n: int) -> dict[str, Any]:
    got = fault_decoder.run(n)
    ok = got["crashes"] == 0 and got["unclassified"] == 0
    return row(
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
    return row(
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
    return row(
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
    """A row of a fault run under load (``bench.support.fault_load``): rows 1, 2 and 3."""
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
        f"after {c['label']}: detection {cell(c['detection_s'])} s, workers "
        f"{cell(c['workers_s'])} s, actuator {cell(c['actuator_s'])} s"
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
    return row(
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
        f"released (recovered in {cell(got['recover_s'])} s). Pipeline: killed mid-incident "
        f"after its first {pk.get('actions_before_kill', 0)} action(s) (a hot partition); "
        f"from its replacement's start (same state, same group): detection "
        f"{cell(w['detection_s'])} s, workers {cell(w['workers_s'])} s, actuator "
        f"{cell(w['actuator_s'])} s; {pk['actions_published']} actions published, "
        f"{pk['action_ids']} ids, {pk['published_again']} published again (same id), outcomes "
        f"{pk['outcomes']}; {pk['produced']} produced, {pk['processed']} processed"
    )
    if not pk["killed_mid_incident"]:
        why += "; no action came before the kill: not mid-incident"
    return row(
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


def replica_kill_row(bootstrap: str, tmp: Path) -> dict[str, Any]:
    got = fault_replicas.replica_kill(bootstrap, tmp)
    waits = got["recover_s"]
    detection = waits["detection_s"]
    false_alarms = got["not_ok_lag_events"] + got["pipeline_actions"]
    what = (
        f"2 replicas in one group (session {got['session_timeout_ms'] / 1000:g} s); replica "
        f"{got.get('killed_replica')} (modelling the swarm: replicas "
        f"{got.get('replicas_modelling_the_swarm')}) SIGKILLed, not restarted; the survivor "
        f"modelled the swarm {cell(got.get('survivor_models_the_swarm_after_s'))} s after the "
        f"kill; false alarms {false_alarms} (statuses other than OK: "
        f"{got['not_ok_statuses'] or 0}, pipeline actions {got['pipeline_actions']}; in the "
        f"10 s of load before the kill: {got['not_ok_before_fault']} not OK)"
    )
    out = load_row("replica_kill", REPLICA_KILL_TITLE, got, what)
    met = (
        out["targets_met"]
        and detection is not None
        and detection <= fault_replicas.DETECTION_TARGET_S
        and false_alarms == 0
    )
    if detection is None or detection > fault_replicas.DETECTION_TARGET_S:
        out["why"] += f"; detection target {fault_replicas.DETECTION_TARGET_S:g} s missed"
    return out | {"targets_met": met, "false_alarms": false_alarms}


def actuator_cut_row(tmp: Path) -> dict[str, Any]:
    got = fault_actuator_cut.cut_actuator(tmp)
    late = [v for v in got["release_late_s"].values()]
    on_time = all(v is not None and v <= got["release_late_target_s"] for v in late)
    recovered = got["recover_s"] is not None and got["actuator_alive"]
    ok = (
        recovered
        and got["recover_s"] <= RECOVER_TARGET_S
        and on_time
        and got["duplicate_actions"] == got["applied_after_expiry"] == 0
        and got["expired_applied"] == 0
        and got["stuck_throttles"] == 0
    )
    r = got["results"]
    why = (
        f"cut {got['cut_s']} s by a proxy holding every byte of the actuator's (consumer, "
        f"transactional producer, quota client); the throttle sent during the cut (twice) "
        f"applied {cell(got['recover_s'])} s after the heal: {r['due']}; the one that "
        f"expired during the cut: {r['expires']}; releases late past max(lease end, heal) "
        f"(s): {got['release_late_s']} (target {got['release_late_target_s']:g}); applied "
        f"after expiry {got['applied_after_expiry']}"
    )
    return row(
        "actuator_cut",
        ACTUATOR_CUT_TITLE,
        recovered=recovered,
        recover_s=got["recover_s"],
        lost=0 if r["due"].count("applied") == 1 else 1,
        duplicate_side_effects=0,
        duplicate_actions=got["duplicate_actions"],
        stuck_throttles=got["stuck_throttles"],
        needed_a_person=not got["actuator_alive"],
        targets_met=ok,
        why=why,
        details=got,
    )


def state_dir_row(bootstrap: str, tmp: Path) -> dict[str, Any]:
    try:
        ro = fault_state_dir.read_only_at_start(bootstrap, tmp)
    except fault_state_dir.CannotMount as exc:
        return row("state_dir", STATE_DIR_TITLE, measured=False,
                   why=f"not measured here: the row mounts a tmpfs of its own ({exc}); run "
                   "it as root on a host that allows mounts")  # fmt: skip
    full = fault_state_dir.full_mid_run(bootstrap, tmp)
    said_well = all(
        d["exit_code"] == 73 and d["names_the_directory"] and d["names_the_fix"] for d in (ro, full)
    )
    what = (
        f"a tmpfs of {full['state_fs_bytes'] // 2**20} MiB as the state directory. Read-only "
        f'at start: exit {ro["exit_code"]} after {ro["exited_after_s"]} s, "{ro["said"]}". '
        f"Filled mid-run ({full.get('filler_bytes', 0):,} bytes): exit {full.get('exit_code')} "
        f'after {full.get("exited_after_s")} s, "{full.get("said", "")}"; restarted on the '
        f"same state once emptied, words of damage in its log: "
        f"{full['corrupt_words_after_restart'] or 'none'}"
    )
    out = load_row("state_dir", STATE_DIR_TITLE, full, what)
    clean = not full["corrupt_words_after_restart"] and not ro["traceback"]
    return out | {
        "targets_met": bool(out["targets_met"] and said_well and clean),
        "details": out["details"] | {"read_only_at_start": ro},
    }


def garbage_row(bootstrap: str, tmp: Path, garbage: int) -> dict[str, Any]:
    got = fault_garbage.garbage_topic(bootstrap, tmp, garbage=garbage, commits=400)
    counted = got["counted_skipped"] == got["expected_skipped"]
    ok = got["pipeline_alive"] and got["true_commits_modelled"] and counted
    why = (
        f"{got['garbage_records']:,} garbage records around {got['true_commits']} true "
        f"commits: {got['counted_skipped']:,} counted as skipped (the decoder skips "
        f"{got['expected_skipped']:,} of them; the rest decode as records of other groups), "
        f"true commits modelled: {cell(got['true_commits_modelled'])} "
        f"(within {got['modelled_within_s']} s of the last write), pipeline alive: "
        f"{cell(got['pipeline_alive'])}"
    )
    if got["bad_messages"]:
        why += f"; whole messages skipped by the model: {got['bad_messages']}"
    if got["skip_warnings"]:
        why += f"; first: {got['skip_warnings'][0].split(': ', 1)[-1]}"
    if got["pipeline_exit"]:
        why += f"; the pipeline exited at stop: {got['pipeline_exit']}"
    return row(
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


def overload_row(bootstrap: str, tmp: Path) -> dict[str, Any]:
    got = fault_overload.overloaded_replica(bootstrap, tmp)
    mib = 2**20
    recovered = got["recover_s"] is not None and got["alive_at_end"]
    several = (got["overload_factor"] or 0) >= fault_overload.MIN_FACTOR
    ok = (
        recovered
        and got["recover_s"] <= RECOVER_TARGET_S
        and got["within_bound"]
        and got["group_kept"]
        and got["behind_reported"]
        and several
    )
    why = (
        f"{got['offered_per_s']:,} commits/s offered for {got['overload_s']:g} s, the reader "
        f"took {cell(got['read_per_s_during_overload'])}/s (x{cell(got['overload_factor'])}; "
        f"tree capped at {cell(got['cpu_cap_cores'])} core); RSS {got['steady_rss_bytes'] // mib} "
        f"MiB steady, peak {got['peak_rss_bytes'] // mib} MiB (+{got['rss_growth_bytes'] // mib} "
        f"MiB, bound {got['max_buffered_bytes'] // mib} MiB: within {cell(got['within_bound'])}); "
        f"behind up to {got['max_behind_s']:.1f} s and {got['max_backlog_records']:,} records, "
        f"reported: {cell(got['behind_reported'])}; reader paused {got['pauses']} time(s); "
        f"group kept: {cell(got['group_kept'])} ({len(got['member_ids'])} member id(s) in "
        f"{got['member_id_checks']} checks); caught up {cell(got['recover_s'])} s after (reading "
        f"the backlog at its own pace takes {cell(got['catch_up_floor_s'])} s)"
    )
    if got["lost_group_log_lines"]:
        why += f"; lost the group: {got['lost_group_log_lines'][0]}"
    if not several:
        why += "; the overload was not several times what the replica read"
    return row(
        "replica_overload",
        OVERLOAD_TITLE,
        recovered=recovered,
        recover_s=got["recover_s"],
        lost=None,  # commits are coalesced by design: what counts is being caught up
        duplicate_side_effects=0,  # the policy is off: no action, no side effect
        duplicate_actions=0,
        stuck_throttles=0,
        needed_a_person=not got["alive_at_end"],
        targets_met=ok,
        why=why,
        details=got,
    )


ORDER = ["broker_kill", "cluster_leader_kill", "network_cut", "process_kill",
         "admin_api_faults", "decoder_fuzz", "garbage_topic", "bad_control_input",
         "replica_kill", "actuator_cut", "state_dir", "replica_overload"]  # fmt: skip
TITLES = {
    "broker_kill": BROKER_KILL_TITLE,
    "replica_kill": REPLICA_KILL_TITLE,
    "actuator_cut": ACTUATOR_CUT_TITLE,
    "state_dir": STATE_DIR_TITLE,
    "cluster_leader_kill": CLUSTER_TITLE,
    "network_cut": NETWORK_TITLE,
    "process_kill": PROCESS_KILL_TITLE,
    "garbage_topic": GARBAGE_TITLE,
    "replica_overload": OVERLOAD_TITLE,
} | {fault: title for fault, (title, _) in NOT_MEASURED.items()}
