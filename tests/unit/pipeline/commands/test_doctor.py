"""The doctor's verdicts from plain facts (no broker): what fails, what only warns, the fix
and the exit code."""

from __future__ import annotations

from dataclasses import replace

from pipeline.commands.doctor import (
    FAIL,
    LAGPILOT_TOPICS,
    OK,
    SKIP,
    WARN,
    Facts,
    Row,
    evaluate,
    exit_code,
    render,
)
from pipeline.decide.policy_config import PolicyConfig
from pipeline.read.backlog import input_state
from runtime.cli import EX_CONFIG, EX_FAILED, EX_NOPERM, EX_UNAVAILABLE, CommandError
from schemas import Mode

ALL_CLUSTER = frozenset({"ALTER", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "CREATE"})
ALL_TOPIC = frozenset({"READ", "WRITE", "DESCRIBE", "ALTER"})
ACTING = PolicyConfig(mode=Mode.ACT, throttle_client_ids=("agent-*",), partition_topics=("docs*",))


def healthy(**kw: object) -> Facts:
    f = Facts(
        bootstrap="b:9092",
        brokers=3,
        cluster_id="c1",
        offsets_partitions=50,
        offsets_ops=ALL_TOPIC,
        cluster_ops=ALL_CLUSTER,
        topic_partitions={t: 16 for t in LAGPILOT_TOPICS},
        topic_ops={t: ALL_TOPIC for t in LAGPILOT_TOPICS} | {"docs.pdf": ALL_TOPIC},
        policy=ACTING,
        skew_s=0.004,
        skew_rtt_s=0.002,
        inputs={"r0": input_state("r0", 1, 0.0, 0, False, 256 << 20)},
    )
    return replace(f, **kw)  # type: ignore[arg-type]


def by_check(rows: list[Row]) -> dict[str, Row]:
    return {r.check: r for r in rows}


def test_a_healthy_deployment_passes_every_check() -> None:
    rows = evaluate(healthy())
    assert {r.status for r in rows} == {OK}
    assert exit_code(rows) == 0
    assert "50 partitions, READ allowed" in by_check(rows)["__consumer_offsets"].detail


def test_an_unreachable_broker_fails_69_and_skips_what_depends_on_it() -> None:
    err = CommandError("cannot reach the broker at b:9092 (refused); check KAFKA_BOOTSTRAP", 69)
    rows = by_check(evaluate(Facts(bootstrap="b:9092", broker_error=err, policy=ACTING)))
    assert rows["broker"].status == FAIL and rows["broker"].exit_code == EX_UNAVAILABLE
    assert rows["broker"].detail == "cannot reach the broker at b:9092 (refused)"
    assert rows["lagpilot topics"].status == SKIP and rows["clock skew"].status == SKIP
    assert rows["policy file"].status == OK  # local checks still run
    assert exit_code(list(rows.values())) == EX_UNAVAILABLE


def test_quota_permission_fails_in_act_mode_and_only_warns_when_not_needed() -> None:
    denied = ALL_CLUSTER - {"ALTER_CONFIGS"}
    acting = by_check(evaluate(healthy(cluster_ops=denied)))["client quotas"]
    assert (acting.status, acting.exit_code) == (FAIL, EX_NOPERM)
    assert "ALTER_CONFIGS denied" in acting.detail and "--operation AlterConfigs" in acting.fix
    recommending = healthy(cluster_ops=denied, policy=replace(ACTING, mode=Mode.RECOMMEND))
    row = by_check(evaluate(recommending))["client quotas"]
    assert row.status == WARN and "mode recommend" in row.detail


def test_alter_on_an_allowed_topic_is_needed_only_where_partitions_may_be_added() -> None:
    ops = {**healthy().topic_ops, "docs.pdf": frozenset({"READ", "DESCRIBE"})}
    row = by_check(evaluate(healthy(topic_ops=ops)))["partitions and leaders"]
    assert row.status == FAIL and "ALTER denied on docs.pdf" in row.detail
    no_topics = replace(ACTING, partition_topics=(), enabled=frozenset({"throttle_producer"}))
    row = by_check(evaluate(healthy(topic_ops=ops, policy=no_topics)))["partitions and leaders"]
    assert row.status == OK and row.detail.startswith("not needed")


def test_elect_leaders_needs_alter_on_the_cluster() -> None:
    row = by_check(evaluate(healthy(cluster_ops=ALL_CLUSTER - {"ALTER"})))
    assert row["partitions and leaders"].status == FAIL
    assert "transfer_leadership enabled" in row["partitions and leaders"].detail


def test_missing_topics_pass_when_creatable_and_fail_with_the_reason_when_not() -> None:
    present = {t: 16 for t in LAGPILOT_TOPICS[:2]}
    ok = by_check(evaluate(healthy(topic_partitions=present, create_errors={
        t: None for t in LAGPILOT_TOPICS[2:]})))["lagpilot topics"]  # fmt: skip
    assert ok.status == OK and "creatable with replication 1" in ok.detail
    why = {LAGPILOT_TOPICS[2]: "INVALID_REPLICATION_FACTOR: 3 > 1 broker"}
    bad = by_check(
        evaluate(
            healthy(topic_partitions=present, replication_factor=3, brokers=1, create_errors=why)
        )
    )
    row = bad["lagpilot topics"]
    assert row.status == FAIL and row.exit_code == EX_FAILED
    assert "LAGPILOT_REPLICATION_FACTOR (now 3)" in row.fix
    denied = by_check(evaluate(healthy(topic_partitions=present, create_errors={
        LAGPILOT_TOPICS[2]: "TOPIC_AUTHORIZATION_FAILED: denied"})))  # fmt: skip
    assert denied["lagpilot topics"].exit_code == EX_NOPERM


def test_clock_skew_warns_then_fails() -> None:
    assert by_check(evaluate(healthy(skew_s=0.5)))["clock skew"].status == WARN
    row = by_check(evaluate(healthy(skew_s=-3.0)))["clock skew"]
    assert row.status == FAIL and "NTP" in row.fix
    row = by_check(evaluate(healthy(skew_s=None, skew_error="cannot create lagpilot.doctor")))
    assert row["clock skew"].status == WARN


def test_local_failures_key_policy_admin_api() -> None:
    rows = evaluate(healthy(key_error="LAGPILOT_SIGNING_KEY_FILE=/k cannot be read",
                            policy=None, policy_error="policy.mode: must be ...",
                            admin_urls=("http://a:9644", "http://b:9644"),
                            admin_results={"http://a:9644": (401, "unauthorized"),
                                           "http://b:9644": (0, "unreachable")}))  # fmt: skip
    codes = [(r.check, r.status, r.exit_code) for r in rows if r.status == FAIL]
    assert ("signing key", FAIL, EX_CONFIG) in codes
    assert ("policy file", FAIL, EX_CONFIG) in codes
    assert ("admin api", FAIL, EX_NOPERM) in codes and ("admin api", FAIL, EX_UNAVAILABLE) in codes
    assert exit_code(rows) == EX_NOPERM  # the first failure in table order: the Admin API
    text = render(rows)
    assert "fix: set LAGPILOT_REDPANDA_ADMIN_USERNAME" in text


def test_the_broker_row_names_the_version_or_why_it_is_unknown() -> None:
    row = by_check(evaluate(healthy(broker_version="Apache Kafka 4.4 (metadata.version 4.4-IV2)")))
    assert row["broker"].status == OK
    assert row["broker"].detail.startswith("b:9092: Apache Kafka 4.4 (metadata.version 4.4-IV2)")
    row = by_check(evaluate(healthy(version_error="ApiVersions failed: timed out")))
    assert row["broker"].status == OK  # reachable is what the deployment needs
    assert "version unknown (ApiVersions failed: timed out)" in row["broker"].detail


def test_a_replica_behind_its_input_warns_with_how_far_and_the_fix() -> None:
    behind = input_state("r1", 1, 42.0, 900_000, True, 256 << 20)
    row = by_check(evaluate(healthy(inputs={"r0": healthy().inputs["r0"], "r1": behind})))[
        "pipeline input"
    ]
    assert row.status == WARN
    assert "1 of 2 replica(s) behind: r1 by 42.0 s, 900,000 records unread" in row.detail
    assert "paused" in row.detail and "replicas" in row.fix
    quiet = by_check(evaluate(healthy(inputs={})))["pipeline input"]
    assert quiet.status == SKIP  # nothing said lately: not a verdict either way
