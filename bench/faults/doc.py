"""docs/reliability.md from bench/results/faults.json and the soak's results (``SOAK_JSON``)
(``python -m bench.faults`` writes the page, and ``python -m bench.perf.soak`` rewrites it
when it writes the committed soak.json; ``--render`` rewrites the page alone): no figure on
the page comes from anywhere else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from bench.support.fault_load import RECOVER_TARGET_S
from bench.support.results import RELIABILITY_MD, RESULTS_DIR

SOAK_JSON = RESULTS_DIR / "soak.json"
FAULTS_JSON = RESULTS_DIR / "faults.json"


def read_soak(path: Path = SOAK_JSON) -> dict[str, Any] | None:
    """The committed soak's results, or None before the first ``make bench-soak``."""
    return orjson.loads(path.read_bytes()) if path.exists() else None


def write_page(doc: Path = RELIABILITY_MD) -> None:
    """Rewrite the page from the committed faults.json and soak.json."""
    doc.write_text(render_doc(orjson.loads(FAULTS_JSON.read_bytes()), read_soak()))


def cell(value: Any) -> str:
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
    if row.get("false_alarms"):  # a row that judges them (8a)
        missed.append(f"false alarms {row['false_alarms']}")
    if row["recover_s"] is not None and row["recover_s"] > RECOVER_TARGET_S:
        missed.append(f"recovery {row['recover_s']} s")
    if not row["recovered"]:
        missed.append("not recovered")
    return f". **Targets missed**: {', '.join(missed) or 'see the notes'}"


def _commits(result: dict[str, Any]) -> list[str]:
    """A line naming the commits, when the rows were not all measured by the same one (a row
    measured again with ``--only`` after a fix)."""
    by: dict[str, list[str]] = {}
    for r in result["rows"]:
        if r["measured"] and r.get("commit"):
            by.setdefault(r["commit"], []).append(r["title"].split(".", 1)[0])
    if len(by) < 2:
        return []
    parts = [f"rows {', '.join(rows)} at {commit}" for commit, rows in by.items()]
    return [f"Measured by more than one commit of this branch: {'; '.join(parts)}."]


def render_soak(soak: dict[str, Any] | None) -> list[str]:
    """The page's soak section, from ``SOAK_JSON`` (``make bench-soak`` writes it)."""
    lines = ["", "## Soak", ""]
    if soak is None:
        return [
            *lines,
            "Not run yet: `make bench-soak` writes its results (`soak.json` in `bench/results`).",
            "",
        ]
    shape = soak["shape"]
    met = soak["targets_met"]
    lines += [
        f"From `soak.json` in `bench/results` ({soak.get('commit')}, {soak.get('measured_at')}): "
        f"{cell(soak['minutes'])} minutes, {shape['topics'] * shape['partitions']:,} partitions "
        f"x {shape['groups']} groups, {soak['commits_per_s']:,} commits/s, worker progress from "
        f"{shape['progress_groups']} groups, the shipped defaults and policy; an incident every "
        "few minutes in turn: a stall, a hotspot, a flood (`bench/perf/soak.py`).",
        "",
        "| RSS growth % (first / last window MiB) | false alarms | missed incidents | "
        "detection p99 s (all / first / last window) | targets met |",
        "|---|---|---|---|---|",
        f"| {cell(soak['rss_growth_pct'])} ({cell(soak['rss_first_mib'])} / "
        f"{cell(soak['rss_last_mib'])}) | {soak['false_alarms']} | "
        f"{soak['missed_incidents']} of {soak['incidents_injected']} | "
        f"{cell(soak['detection_p99_s'])} / {cell(soak['detection_p99_first_s'])} / "
        f"{cell(soak['detection_p99_last_s'])} | "
        + ", ".join(f"{k} {cell(v)}" for k, v in met.items())
        + " |",
        "",
        "| incident | target | detected after s | first action | recovered (s after its end) |",
        "|---|---|---|---|---|",
    ]
    for v in soak["incidents"]:
        target = "/".join(
            str(v["target"][k]) for k in ("group", "topic", "partition") if k in v["target"]
        )
        lines.append(
            f"| {v['kind']} | {target} | {cell(v['detected_after_s'])} | {cell(v['action'])} "
            f"| {cell(v['recovered'])} ({cell(v['recovered_after_end_s'])}) |"
        )
    if soak.get("smoke") or soak["minutes"] < 60:
        lines += ["", f"A {cell(soak['minutes'])}-minute run, not the hour the targets ask for."]
    return [*lines, *SOAK_HOW, ""]


SOAK_HOW = [
    "",
    "How it runs: consumers are simulated in arrays but commit through the broker's",
    "`OffsetCommit` (every partition of every group each second) and report progress in",
    "the SDK's format; no actuator runs, so the policy's actions are recorded, not applied.",
    "A cell (group, topic, partition, or a group's summary) judged not OK outside every",
    "incident (from its injection until 60 s after it ended) is a false alarm; an incident",
    "not seen within its length plus 30 s is missed. RSS is the pipeline's",
    "process tree, every 10 s; its growth compares the medians of the first window after",
    "the warm-up (5 min) and the last (10 min each, shorter for short runs). Targets: growth",
    "< 10 %, 0 false alarms, 0 missed, the last window's detection p99 <= the first's x 1.5",
    "+ 0.5 s. Regenerate: `make bench-soak` (an hour; `SOAK_MINUTES=10` for a look).",
]


def render_doc(result: dict[str, Any], soak: dict[str, Any] | None = None) -> str:
    """docs/reliability.md, written from the JSON: no figure in it comes from anywhere else
    (the rows from ``faults.json``, the soak section from ``soak.json``)."""
    lines = [
        "# Reliability: faults survived",
        "",
        "Written by `make bench-faults` (`bench/faults/`) from `bench/results/faults.json`",
        "(the soak's section by `make bench-soak` from its own results, `soak.json` beside it);",
        "do not edit by hand. Targets: lost 0, duplicate side effects 0, duplicate actions 0,",
        f"stuck throttles 0, recovery within {RECOVER_TARGET_S:g} s of the fault clearing.",
        f"Rows measured: {result['measured']} of {result['of']}; a row marked *not measured*",
        "has no figures, and says why.",
        *_commits(result),
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
                cell(r[k])
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
        "- **1, broker kill**: `bench/faults/broker.py`. A swarm of 16 producers (100 msg/s over",
        "  8 partitions) and its SDK workers (exactly-once side effects in a ledger), `lagpilot",
        "  run` under the shipped `deploy/policy.default.toml` and `lagpilot actuate` (Kafka",
        "  backend) run on the benchmark's own broker; it is killed with SIGKILL, restarted",
        "  10 s later on its own data (`kafka.sh restart`). Recovery, from the broker serving",
        "  again: the",
        "  first lag event, the first worker side effect, and a leased throttle's `applied`",
        "  outcome (its quota and that of a throttle whose lease ended during the outage must",
        "  be gone at the end). No process is restarted by the benchmark. `lost`: messages",
        "  the broker acknowledged to the swarm's producer that no worker processed; one",
        "  never acknowledged (its produce failed or was purged after 120 s of waiting, the",
        "  producer told) was never accepted and is counted apart, in the notes.",
        "- **2, cluster: offsets leader, then controller**: `bench/faults/cluster.py`, the same",
        "  load as row 1 on a 3-broker cluster of the benchmark's own (`kafka.sh up --brokers",
        "  3`, port 26092), every topic replicated on the 3 nodes (the pipeline's with",
        "  `LAGPILOT_REPLICATION_FACTOR=3`, the swarm's and the control topic likewise, the",
        "  rest by the broker's default). The swarm group's coordinator (the leader of the",
        "  `__consumer_offsets` partition holding its commits, from DescribeConsumerGroups) is",
        "  killed with SIGKILL and restarted 10 s later; then the KRaft controller (the quorum",
        "  leader in the nodes' `quorum-state`), the same way. Recovery is measured as in row 1",
        "  after each restart; the slower counts.",
        "- **3, network cuts**: `bench/faults/network.py`, the same load on a broker of the",
        "  benchmark's own (port 27092) with two more listeners (`LAGPILOT_BROKER_EXTRA_LISTENERS`",
        "  of `kafka.sh`) advertised at the ports of two TCP proxies on 127.0.0.1",
        "  (`bench/support/netproxy.py`): the pipeline goes through one, the SDK workers",
        "  through the other. A cut holds every byte both ways (nothing passes, nothing is",
        "  reset, new connections wait) for 15 s: first the pipeline's, then, 5 s after it",
        "  heals, the workers'. Producers, actuator and the benchmark's readers use the",
        "  broker directly.",
        "- **4, process kills**: `bench/faults/process.py`. The pipeline: row 1's load with",
        "  one hot partition (heavy documents from 8 s in; the shipped policy spreads it over",
        "  lanes); `lagpilot run` is SIGKILLed (with its sampler) as soon as its first action",
        "  is on the control topic, and a replacement starts on the same state folder and",
        "  consumer group. Ids it publishes again are counted; no id may be applied or",
        "  delegated twice; recovery as in row 1, from the replacement's start. The actuator:",
        "  `lagpilot actuate` (dry-run backend, every call fsynced: the record is its cluster)",
        "  reads 300 leased throttles and is SIGKILLed once a third reached the backend; a",
        "  replacement with the same id finishes. Each id must have one committed `applied`",
        "  outcome and one backend call; every lease released.",
        "- **6b, garbage topic**: `bench/faults/garbage.py`. `lagpilot run` reads its commits",
        "  from a topic of the benchmark's own (`LAGPILOT_OFFSETS_TOPIC`) holding 400 true",
        "  commits of one group, each followed by mutated records from 6a's corpus. Every",
        "  record the decoder skips must be counted (`lagpilot_decode_skipped_total`), the",
        "  last `partition_lag` of every partition must carry the last true commit, and the",
        "  pipeline must stay up.",
        "- **7, bad control input**: a running actuator (dry-run backend that fsyncs every",
        "  call) reads, on a fresh control topic, one real throttle and then each bad event;",
        "  each must get an outcome other than `applied`, and the backend must have seen",
        "  exactly one call (the real throttle; its replay is a `duplicate`).",
        "- **8a, replica kill**: `bench/faults/replicas.py`, row 1's load (a steady swarm, no",
        "  incident) watched by two `lagpilot run` replicas in one consumer group, each with",
        "  its own state folder and static member id, both with a 6 s session",
        "  (`LAGPILOT_SESSION_TIMEOUT_MS=6000`, the least a broker accepts by default: the",
        "  broker notices a SIGKILLed member only when its session ends; the commits reader's",
        "  session follows the setting). The replica whose /metrics carries the swarm's group",
        "  (it models the swarm's topic) is SIGKILLed with its sampler and not restarted. The",
        "  survivor must publish the swarm's lag again within 10 s of the kill, and say",
        "  nothing but OK of it (no other status, no action): a false alarm is either.",
        "- **8b, actuator cut**: `bench/faults/actuator_cut.py`. `lagpilot actuate` (Kafka",
        "  backend) reaches its own broker (port 27392) only through a proxy (port 27396, the",
        "  `ACTUATOR` listener advertised there), which holds every byte for 20 s; control",
        "  events, outcomes and quotas are read on the broker's own listener. Two leased",
        "  throttles are applied before the cut (one lease ends during it, one after); during",
        "  it one throttle is sent twice and one whose `expires_at` passes before the heal.",
        "  No id may be applied twice, none after its expiry, every quota must be gone at the",
        "  end, and each lease released within 10 s of max(lease end, heal): a release cannot",
        "  reach the broker through the cut. Recovery: from the heal to the `applied` outcome",
        "  of the throttle sent during the cut.",
        "- **8c, state directory**: `bench/faults/state_dir.py`. The pipeline's state",
        "  directory is a tmpfs (64 MiB) the benchmark mounts (root only: elsewhere the row is",
        "  not measured and says so). Mounted read-only, `lagpilot run` must exit at once",
        "  (73) with the directory, the cause and the fix in one line. Then, read-write under",
        "  row 1's load, a file fills what is left of it 10 s in: the pipeline's next",
        "  checkpoint fails, and it must exit with the same kind of line (a store that cannot",
        "  be written cannot checkpoint; its offsets are not committed, so nothing is skipped).",
        "  The file is removed and the pipeline restarted on the same state, as its supervisor",
        "  would: its log must hold no word of damage (`Corruption`, a traceback), and recovery",
        "  is measured from the restart as in row 1.",
        "- **8d, an overloaded replica**: `bench/faults/overload.py`. The scale benchmark's",
        "  generator writes real `OffsetCommit` records into an offsets topic of the run's own",
        "  that one `lagpilot run` replica (policy off, shipped defaults, its process tree held",
        "  to a fraction of a core by a cgroup) reads: 30 s at a rate it holds, then 60 s at",
        "  several times what its reader takes, then the held rate again. Every second: the",
        "  tree's RSS (its growth over the steady median must stay under",
        "  `LAGPILOT_MAX_BUFFERED_BYTES`, 256 MiB by default), `lagpilot_input_behind_seconds`",
        "  and `_backlog_records` (the replica must say it is behind); every 5 s the reader's",
        "  member id from the broker (one id throughout, and no lost-member line in its log:",
        "  the group was kept). Recovery: from the overload's end until the reader is caught",
        "  up and samples are modelled again. No policy runs, so no action can be duplicated.",
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
        "- 4: an actuator killed between its backend calls and their outcomes made the calls",
        "  again on replay (4 in the last run before the fix; each set the same quota). It now",
        "  writes an `intent` under the action's id before the calls (one flush per batch), and",
        "  its successor reads the cluster for an intent left without outcome and records the",
        "  outcome without calling when the effect is there (`actuators/reconcile.py`).",
        "",
        "- 1: the workers' exactly-once ledger (`ctx.once_sql`) sometimes held one message",
        "  twice after the broker restart. `once_sql` was not at fault: its key was the",
        "  message's position, and the swarm's producer (not idempotent) wrote a message whose",
        "  ack the kill lost a second time, at another offset. The swarm's producer is now",
        "  idempotent and sends each message's id as its `idempotency-key` header, which the",
        "  workers' dedupe uses before the position (`bench/support/swarm.py`).",
        "- 3: `lagpilot run` on a broker that had just started, under load, ended with",
        "  `TopicNotFoundError` (a topic Quix had just created, not yet described); it is now",
        "  retried like the other not-ready states (`pipeline/__main__.py`).",
        "",
        "- 2: after a coordinator's restart the commits reader's consumer could be fenced as a",
        "  static member by its own failed-over coordinator (librdkafka#3437, a fatal error):",
        "  it read nothing more, the sampler dropped the replica's topics with its partitions,",
        "  and detection was silent until the app happened to be rebuilt (52 s and 75 s in two",
        "  runs). The reader now renews its consumer on a fatal error and says what its",
        "  consumer reported (`pipeline/read/commits.py`). The benchmark runs the pipeline with",
        "  a static member id, as `deploy/` does: an app rebuilt after UNKNOWN_MEMBER_ID or a",
        "  fence takes its partitions back at its join instead of after the old member's session.",
        '- 8c: a state directory that could not be written ended `lagpilot run` on "unexpected',
        '  error: Exception: IO error: No space left on device ..." (or OSError: Read-only',
        "  file system): it now checks the directory at start and reads a failed write mid-run",
        "  as one line naming the directory, the cause and the fix, exit 73",
        "  (`pipeline/state_dir.py`).",
        "",
        "Found by this benchmark and not fixed:",
        "",
        "- 2: the actuator's `send_offsets_to_transaction` still blocks after the offsets",
        "  leader's restart (librdkafka#5456): it is ended after 10 s by a new producer, whose",
        "  `init_transactions` waits for the old transaction's abort (8 to 16 s in the runs), and",
        "  its control consumer is then fenced once and renewed: the actuator came back 21 to 31",
        "  s after the restart in those runs (`bench/results/faults_row2_runs.json`).",
        "- 8a: the survivor's first statuses of the swarm, right after it restored the dead",
        "  replica's model, can be WARN (a time lag just past 1.5 usual intervals while the",
        "  commits of the hand-over are read): counted as false alarms in its row.",
        "- A lease release is not covered by an intent: an actuator killed between removing a",
        "  quota and committing its `released` outcome removes it again on replay (a no-op).",
        "",
        "Regenerate: `make bench-faults` (about 16 minutes; it starts and stops its own brokers",
        "on ports 23092, 26092 (3 nodes), 27092 (with proxies on 27192 and 27194) and 27392",
        "(proxy on 27396), and kills only those; row 8c mounts a tmpfs, as root). One row",
        "again: `python -m bench.faults --only network_cut` keeps the others.",
        *render_soak(soak),
    ]
    return "\n".join(lines)
