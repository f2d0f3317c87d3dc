"""``lagpilot doctor``: check in a few seconds everything a deployment needs.

Two halves, as everywhere in lagpilot: ``gather`` (``pipeline/commands/doctor_facts.py``) does the
I/O once and returns plain ``Facts``; :func:`evaluate` is pure and turns facts and the
policy into rows ``ok`` / ``warn`` / ``fail`` / ``skip``, each failure with its fix and its
exit code. The command prints the table (or ``--json``) and exits with the first failure's
code (69 unreachable, 77 permission, 78 configuration, 1 otherwise), 0 when nothing failed.

Permissions are read from the broker's own answer (KIP-430 authorized operations), so the
doctor changes nothing to find them out. The clock check is the one write: one record to
``lagpilot.doctor`` (created on first use: 1 partition, LogAppendTime, 1 h retention),
whose broker-stamped time is compared with this host's clock.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import orjson

from pipeline.commands.doctor_facts import DOCTOR_TOPIC, gather
from pipeline.commands.doctor_facts import LAGPILOT_TOPICS as LAGPILOT_TOPICS
from pipeline.commands.doctor_facts import Facts as Facts
from runtime.cli import (
    EX_CONFIG,
    EX_FAILED,
    EX_NOPERM,
    EX_OK,
    EX_UNAVAILABLE,
    Parser,
    add_connection,
    run,
)
from schemas import ActionType, Mode

OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skip"
SKEW_WARN_S = 0.25  # the lag model aligns samples with commits; skew beyond this blurs it
SKEW_FAIL_S = 2.0
ACL_HINT = "kafka-acls.sh --bootstrap-server $KAFKA_BOOTSTRAP --add --allow-principal User:<p>"


@dataclass(frozen=True)
class Row:
    check: str
    status: str
    detail: str
    fix: str = ""
    exit_code: int = EX_OK


# --------------------------------------------------------------------------- evaluate (pure)


def _needs(policy: Any, kind: ActionType) -> tuple[bool, str]:
    """Whether the policy will ask the actuator for ``kind``, and why (not)."""
    if policy is None:
        return False, "policy not loaded"
    if policy.mode is not Mode.ACT:
        return False, f"mode {policy.mode.value}: nothing is applied"
    if str(kind) not in policy.enabled:
        return False, f"{kind} not in actions.enabled"
    if kind is ActionType.THROTTLE_PRODUCER and not policy.throttle_client_ids:
        return False, "allow.throttle_client_ids is empty"
    if kind is ActionType.ADD_PARTITIONS and not policy.partition_topics:
        return False, "allow.partition_topics is empty"
    return True, f"{kind} enabled in act mode"


def _permission(
    name: str, ops: frozenset[str] | None, wanted: Sequence[str], needed: bool, why: str, fix: str
) -> Row:
    if ops is None:
        return Row(name, WARN, "the broker did not report authorized operations", fix)
    missing = [w for w in wanted if w not in ops]
    if not missing:
        return Row(name, OK, f"{', '.join(wanted)} allowed ({why})")
    detail = f"{', '.join(missing)} denied ({why})"
    if needed:
        return Row(name, FAIL, detail, fix, EX_NOPERM)
    return Row(name, WARN, detail, fix)


def evaluate(f: Facts) -> list[Row]:
    """The doctor's table from the facts: one row per check, in the order a deployment
    needs them (broker first: most rows depend on it)."""
    rows = _local_rows(f)
    if f.broker_error is not None:
        broker = [
            Row(
                "broker",
                FAIL,
                str(f.broker_error).split("; check")[0],
                "start the broker or fix --bootstrap / KAFKA_BOOTSTRAP",
                f.broker_error.exit_code,
            )
        ]
        skipped = (
            "__consumer_offsets",
            "client quotas",
            "partitions and leaders",
            "lagpilot topics",
            "clock skew",
            "pipeline input",
        )
        return broker + [Row(n, SKIP, "broker not reached") for n in skipped] + rows
    version = f.broker_version or f"version unknown ({f.version_error})"
    out = [Row("broker", OK, f"{f.bootstrap}: {version}, {f.brokers} broker(s), "
                             f"cluster {f.cluster_id}")]  # fmt: skip
    out.append(_offsets_row(f))
    need_quota, why_quota = _needs(f.policy, ActionType.THROTTLE_PRODUCER)
    out.append(
        _permission(
            "client quotas",
            f.cluster_ops,
            ("DESCRIBE_CONFIGS", "ALTER_CONFIGS"),
            need_quota,
            why_quota,
            f"{ACL_HINT} --operation DescribeConfigs --operation AlterConfigs --cluster",
        )
    )
    out.append(_partitions_row(f))
    out.append(_topics_row(f))
    out.append(_skew_row(f))
    out.append(_inputs_row(f))
    return out + rows


def _inputs_row(f: Facts) -> Row:
    """Whether every pipeline replica reads __consumer_offsets as fast as it is written."""
    name = "pipeline input"
    if f.inputs is None:
        return Row(name, SKIP, f"lagpilot.lag not read: {f.inputs_error}")
    if not f.inputs:
        return Row(name, SKIP, "no pipeline replica published its input state lately "
                               "(none running, or a version before input_state)")  # fmt: skip
    behind = {r: ev for r, ev in f.inputs.items() if ev.get("behind")}
    if not behind:
        return Row(name, OK, f"{len(f.inputs)} replica(s) caught up with __consumer_offsets")
    worst = max(behind.values(), key=lambda ev: ev["behind_s"])
    paused = " (reading paused at LAGPILOT_MAX_BUFFERED_BYTES)" if worst.get("paused") else ""
    return Row(
        name,
        WARN,
        f"{len(behind)} of {len(f.inputs)} replica(s) behind: {worst['replica']} by "
        f"{worst['behind_s']:.1f} s, {worst['backlog_records']:,} records unread{paused}",
        "add pipeline replicas or CPU (docs/runbook.md: When lagpilot itself lags)",
    )


def _offsets_row(f: Facts) -> Row:
    name = "__consumer_offsets"
    if f.offsets_partitions is None and f.offsets_ops == frozenset():
        return Row(
            name,
            FAIL,
            "DESCRIBE and READ denied (the pipeline reads it)",
            f"{ACL_HINT} --operation Read --operation Describe --topic __consumer_offsets",
            EX_NOPERM,
        )
    if f.offsets_partitions is None:
        return Row(
            name,
            FAIL,
            f"not found at {f.bootstrap}",
            "lagpilot reads it: point --bootstrap at a Kafka-protocol cluster",
            EX_FAILED,
        )
    row = _permission(
        name,
        f.offsets_ops,
        ("READ", "DESCRIBE"),
        True,
        "the pipeline reads it",
        f"{ACL_HINT} --operation Read --operation Describe --topic __consumer_offsets",
    )
    if row.status == OK:
        return Row(name, OK, f"{f.offsets_partitions} partitions, READ allowed")
    return row


def _partitions_row(f: Facts) -> Row:
    name = "partitions and leaders"
    need_add, why_add = _needs(f.policy, ActionType.ADD_PARTITIONS)
    need_move, why_move = _needs(f.policy, ActionType.TRANSFER_LEADERSHIP)
    fix = f"{ACL_HINT} --operation Alter --cluster (leaders) / --topic <t> (partitions)"
    if not need_add and not need_move:
        why = why_add if why_add == why_move else f"{why_add}; {why_move}"
        row = _permission(name, f.cluster_ops, ("ALTER",), False, why, fix)
        return row if row.status != OK else Row(name, OK, f"not needed: {why_add}")
    if need_move:
        row = _permission(name, f.cluster_ops, ("ALTER",), True, why_move, fix)
        if row.status != OK:
            return row
    denied = sorted(
        t
        for t, ops in f.topic_ops.items()
        if ops is not None and "ALTER" not in ops and t not in LAGPILOT_TOPICS
    )
    if need_add and denied:
        return Row(
            name, FAIL, f"ALTER denied on {', '.join(denied[:5])} ({why_add})", fix, EX_NOPERM
        )
    return Row(name, OK, "ALTER allowed where the policy acts (elect leaders, add partitions)")


def _topics_row(f: Facts) -> Row:
    name = "lagpilot topics"
    present = [t for t in LAGPILOT_TOPICS if t in f.topic_partitions]
    hidden = [t for t in LAGPILOT_TOPICS if f.topic_ops.get(t) == frozenset()]
    if hidden:
        return Row(
            name,
            FAIL,
            f"DESCRIBE denied on {', '.join(hidden)} (present or not, lagpilot cannot tell)",
            f"{ACL_HINT} --operation Read --operation Write --operation Describe "
            "--topic lagpilot. --resource-pattern-type prefixed",
            EX_NOPERM,
        )
    blocked = {t: e for t, e in f.create_errors.items() if e}
    if blocked:
        t, err = next(iter(blocked.items()))
        code = EX_NOPERM if "AUTHORIZATION" in err else EX_FAILED
        return Row(
            name,
            FAIL,
            f"{t} missing and not creatable: {err}",
            f"create it by hand, or grant CREATE ({ACL_HINT} --operation Create "
            f"--cluster), or lower LAGPILOT_REPLICATION_FACTOR "
            f"(now {f.replication_factor}) to at most the brokers ({f.brokers})",
            code,
        )
    creatable = [t for t in LAGPILOT_TOPICS if t not in f.topic_partitions]
    detail = f"{len(present)} present"
    if creatable:
        detail += f"; {', '.join(creatable)} creatable with replication {f.replication_factor}"
    return Row(name, OK, detail)


def _skew_row(f: Facts) -> Row:
    name = "clock skew"
    if f.skew_s is None:
        return Row(
            name,
            WARN,
            f"not measured: {f.skew_error}",
            f"allow lagpilot to create "
            f"and write {DOCTOR_TOPIC}, or check NTP on this host and the brokers",
        )
    detail = f"{f.skew_s:+.3f} s against the broker (round trip {f.skew_rtt_s or 0:.3f} s)"
    fix = "sync this host and the brokers with NTP (chrony/timesyncd)"
    if abs(f.skew_s) >= SKEW_FAIL_S:
        return Row(name, FAIL, detail, fix, EX_FAILED)
    if abs(f.skew_s) >= SKEW_WARN_S:
        return Row(name, WARN, detail, fix)
    return Row(name, OK, detail)


def _local_rows(f: Facts) -> list[Row]:
    rows: list[Row] = []
    if f.admin_urls:
        for url in f.admin_urls:
            status, text = f.admin_results.get(url, (0, "not checked"))
            if status == 200:
                rows.append(Row("admin api", OK, f"{url}: {text}"))
            elif status in (401, 403):
                rows.append(
                    Row(
                        "admin api",
                        FAIL,
                        f"{url}: HTTP {status} ({text})",
                        "set LAGPILOT_REDPANDA_ADMIN_USERNAME and _PASSWORD to a superuser's",
                        EX_NOPERM,
                    )
                )
            else:
                rows.append(
                    Row(
                        "admin api",
                        FAIL,
                        f"{url}: {text}",
                        "check LAGPILOT_REDPANDA_ADMIN_URLS (port 9644) and that the "
                        "Admin API listens there",
                        EX_UNAVAILABLE,
                    )
                )
    else:
        rows.append(Row("admin api", OK, "not configured (LAGPILOT_REDPANDA_ADMIN_URLS unset)"))
    if f.key_error:
        rows.append(Row("signing key", FAIL, f.key_error, "see the message", EX_CONFIG))
    else:
        rows.append(
            Row("signing key", OK, "the decide key (or shared key) and the trusted keys load")
        )
    if f.settings_error:
        rows.append(Row("settings", FAIL, f.settings_error, "see the message", EX_CONFIG))
    if f.policy_error:
        rows.append(Row("policy file", FAIL, f.policy_error, "see the message", EX_CONFIG))
    elif f.policy is not None:
        rows.append(Row("policy file", OK, f"valid, mode {f.policy.mode.value}"))
    return rows


def exit_code(rows: Sequence[Row]) -> int:
    """The first failure's code; 0 when nothing failed (warnings do not fail)."""
    return next((r.exit_code or EX_FAILED for r in rows if r.status == FAIL), EX_OK)


def render(rows: Sequence[Row]) -> str:
    width = max(len(r.check) for r in rows)
    lines = [f"{'CHECK':<{width}}  STATUS  DETAIL"]
    for r in rows:
        lines.append(f"{r.check:<{width}}  {r.status:<6}  {r.detail}")
        if r.fix and r.status in (WARN, FAIL):
            lines.append(f"{'':<{width}}  {'':<6}  fix: {r.fix}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- command

EXAMPLE = """example:
  KAFKA_BOOTSTRAP=redpanda-0:9092 LAGPILOT_POLICY_FILE=deploy/policy.example.toml \\
    LAGPILOT_SIGNING_KEY_FILE=/etc/lagpilot/key lagpilot doctor

exit code: 0 nothing failed (warnings allowed); otherwise the first failure's:
  69 unreachable, 77 permission, 78 configuration, 1 any other failure
"""


def _parser() -> Parser:
    p = Parser(prog="lagpilot doctor", description=__doc__.split("\n\n")[0], epilog=EXAMPLE)
    add_connection(p, connect_timeout_s=5.0)  # "in a few seconds"
    p.switch("--json", env="LAGPILOT_DOCTOR_JSON", help="print the rows as JSON")
    return p


def _doctor(args: Any) -> int:
    env = {**args.env, "KAFKA_BOOTSTRAP": args.bootstrap}
    rows = evaluate(gather(args.bootstrap, args.kafka, env, args.connect_timeout_s))
    if args.json:
        print(orjson.dumps([asdict(r) for r in rows]).decode())
    else:
        print(render(rows))
    return exit_code(rows)


def main(argv: list[str] | None = None) -> int:
    return run("lagpilot doctor", _parser(), _doctor, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
