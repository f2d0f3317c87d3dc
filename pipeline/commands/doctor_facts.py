"""``lagpilot doctor``'s I/O half: what the broker, the Admin API and the local files say.

:func:`gather` asks once (one metadata request, one ApiVersions, one DescribeCluster and one
DescribeTopics with authorized operations, validate-only CreateTopics for missing topics, one
HTTP request per Admin API URL, one produce for the clock) and returns plain :class:`Facts`;
``pipeline/commands/doctor.py`` judges them (pure).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runtime.cli import (
    CommandError,
    client_config,
    connect,
    is_denied,
)
from runtime.env import parse_bool_or_path, parse_list
from schemas import ConfigError, load_signer, load_verifier, topics
from schemas.keys import DECIDE

LAGPILOT_TOPICS = (topics.WATERMARKS, topics.LAG, topics.CONTROL, topics.OUTCOMES)
DOCTOR_TOPIC = "lagpilot.doctor"


@dataclass
class Facts:
    """What the broker, the Admin API and the local files said (plain data)."""

    bootstrap: str
    broker_error: CommandError | None = None
    brokers: int = 0
    cluster_id: str | None = None
    broker_version: str | None = None  # e.g. "Apache Kafka 4.4 (metadata.version 4.4-IV2)"
    version_error: str | None = None
    offsets_partitions: int | None = None
    offsets_ops: frozenset[str] | None = None  # None: the broker did not say
    cluster_ops: frozenset[str] | None = None
    topic_partitions: dict[str, int] = field(default_factory=dict)
    topic_ops: dict[str, frozenset[str] | None] = field(default_factory=dict)
    create_errors: dict[str, str | None] = field(default_factory=dict)  # missing: why not
    replication_factor: int = 1
    admin_urls: tuple[str, ...] = ()
    admin_results: dict[str, tuple[int, str]] = field(default_factory=dict)  # url: code, text
    key_error: str | None = None
    policy: Any = None  # PolicyConfig
    policy_error: str | None = None
    settings_error: str | None = None
    skew_s: float | None = None
    skew_rtt_s: float | None = None
    skew_error: str | None = None
    # the latest ``input_state`` of each pipeline replica (None: lagpilot.lag not read)
    inputs: dict[str, dict[str, Any]] | None = None
    inputs_error: str | None = None


def gather(
    bootstrap: str, kafka: Mapping[str, str], env: Mapping[str, str], timeout_s: float
) -> Facts:
    f = Facts(bootstrap=bootstrap)
    _gather_local(f, env)
    _gather_admin_api(f, env, timeout_s)
    try:
        md = connect(bootstrap, kafka, timeout_s)
    except CommandError as exc:
        f.broker_error = exc
        return f
    f.brokers = len(md.brokers)
    f.cluster_id = md.cluster_id
    _gather_version(f, kafka, timeout_s)
    _gather_broker(f, md, kafka, timeout_s)
    _gather_skew(f, kafka, timeout_s)
    _gather_inputs(f, kafka, timeout_s)
    return f


#: how far back the doctor reads lagpilot.lag for the replicas' input states (s): more
#: than one of their intervals (pipeline.read.backlog.INPUT_STATE_EVERY_MS)
INPUTS_SINCE_S = 12.0


def _gather_inputs(f: Facts, kafka: Mapping[str, str], timeout_s: float) -> None:
    """What each pipeline replica last said of its own reader (``input_state`` events)."""
    from pipeline.commands.status import read_latest

    inputs: dict[str, dict[str, Any]] = {}
    try:
        read_latest(f.bootstrap, INPUTS_SINCE_S, None, timeout_s, dict(kafka), inputs)
    except Exception as exc:  # no lag topic yet, or not readable: said in the row
        f.inputs_error = str(exc).split("\n")[0][:200]
        return
    f.inputs = inputs


def _gather_version(f: Facts, kafka: Mapping[str, str], timeout_s: float) -> None:
    from pipeline.commands.broker_version import DecodeError, describe, fetch

    try:
        f.broker_version = describe(fetch(f.bootstrap, kafka, timeout_s))
    except (OSError, DecodeError) as exc:
        f.version_error = f"ApiVersions failed: {exc}"


def _gather_local(f: Facts, env: Mapping[str, str]) -> None:
    from pipeline.decide.policy_config import load_policy_config
    from pipeline.settings import load_settings

    try:
        f.replication_factor = load_settings(env=env).replication_factor
    except ConfigError as exc:
        f.settings_error = str(exc)
    try:
        load_signer(env, DECIDE)
        load_verifier(env)
    except ConfigError as exc:
        f.key_error = str(exc)
    try:
        f.policy = load_policy_config(env.get("LAGPILOT_POLICY_FILE") or None, env=env)
    except ConfigError as exc:
        f.policy_error = str(exc)


def _gather_admin_api(f: Facts, env: Mapping[str, str], timeout_s: float) -> None:
    import httpx

    urls = parse_list(env.get("LAGPILOT_REDPANDA_ADMIN_URLS", ""))
    f.admin_urls = urls
    user = env.get("LAGPILOT_REDPANDA_ADMIN_USERNAME")
    auth = (user, env.get("LAGPILOT_REDPANDA_ADMIN_PASSWORD", "")) if user else None
    key = "LAGPILOT_REDPANDA_ADMIN_TLS_VERIFY"
    verify = parse_bool_or_path(key, env.get(key, "true"))  # a CA bundle path, or a boolean
    for url in urls:
        try:
            r = httpx.get(
                f"{url.rstrip('/')}/v1/brokers",
                auth=auth,
                verify=verify,
                timeout=min(timeout_s, 5.0),
            )
        except (httpx.HTTPError, OSError) as exc:
            f.admin_results[url] = (0, f"unreachable ({type(exc).__name__}: {exc})")
            continue
        if r.status_code != 200:
            f.admin_results[url] = (r.status_code, r.text[:120])
            continue
        try:
            brokers = r.json()
            versions = sorted({str(b.get("version", "?")) for b in brokers})
            text = f"{len(brokers)} node(s), Redpanda {', '.join(versions)}"
        except (ValueError, AttributeError):
            text = "answered"
        f.admin_results[url] = (200, text)


def _ops(value: Any) -> frozenset[str] | None:
    if value is None:
        return None
    return frozenset(getattr(op, "name", str(op)) for op in value)


def _gather_broker(f: Facts, md: Any, kafka: Mapping[str, str], timeout_s: float) -> None:
    from confluent_kafka import KafkaException, TopicCollection
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(client_config(f.bootstrap, kafka))
    try:
        cluster = admin.describe_cluster(
            include_authorized_operations=True, request_timeout=timeout_s
        ).result()
        f.cluster_ops = _ops(cluster.authorized_operations)
    except KafkaException as exc:  # denied DESCRIBE on the cluster: nothing is allowed there
        f.cluster_ops = frozenset() if is_denied(exc) else None
    if f.cluster_ops is None and (f.broker_version or "").startswith("Apache Kafka"):
        f.cluster_ops = frozenset()  # Kafka reports them (KIP-430): none is "none allowed"
    policy = f.policy
    wanted = [topics.CONSUMER_OFFSETS, *LAGPILOT_TOPICS]
    if policy is not None and policy.partition_topics:  # the allow-list's own rule
        wanted += sorted(t for t in md.topics if policy.may_add_partitions(t))[:20]
    # __consumer_offsets is asked for by name: a listing leaves out what DESCRIBE denies
    named = {topics.CONSUMER_OFFSETS, *LAGPILOT_TOPICS}
    existing = [t for t in dict.fromkeys(wanted) if t in md.topics or t in named]
    if existing:
        futures = admin.describe_topics(
            TopicCollection(existing), include_authorized_operations=True, request_timeout=timeout_s
        )
        for name, fut in futures.items():
            try:
                desc = fut.result()
            except KafkaException as exc:
                if is_denied(exc):
                    f.topic_ops[name] = frozenset()  # not even DESCRIBE
                continue
            f.topic_partitions[name] = len(desc.partitions)
            f.topic_ops[name] = _ops(desc.authorized_operations)
    f.offsets_partitions = f.topic_partitions.pop(topics.CONSUMER_OFFSETS, None)
    f.offsets_ops = f.topic_ops.pop(topics.CONSUMER_OFFSETS, None)
    missing = [t for t in LAGPILOT_TOPICS if t not in f.topic_partitions and t not in f.topic_ops]
    if missing:
        new = [NewTopic(t, 1, f.replication_factor) for t in missing]
        for name, fut in admin.create_topics(
            new, validate_only=True, request_timeout=timeout_s
        ).items():
            try:
                fut.result()
                f.create_errors[name] = None
            except KafkaException as exc:
                err = exc.args[0]
                f.create_errors[name] = f"{err.name()}: {err.str()}"


def _gather_skew(f: Facts, kafka: Mapping[str, str], timeout_s: float) -> None:
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(client_config(f.bootstrap, kafka))
    config = {"message.timestamp.type": "LogAppendTime", "retention.ms": "3600000"}
    fut = admin.create_topics(
        [NewTopic(DOCTOR_TOPIC, 1, min(f.replication_factor, max(f.brokers, 1)), config=config)],
        request_timeout=timeout_s,
    )[DOCTOR_TOPIC]
    try:
        fut.result()
    except KafkaException as exc:
        if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":
            f.skew_error = f"cannot create {DOCTOR_TOPIC}: {exc.args[0].name()}"
            return
    producer = Producer({**client_config(f.bootstrap, kafka), "acks": "all"})
    stamps: list[tuple[int, int]] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            stamps.append(msg.timestamp())

    for _ in range(3):  # the topic may take a moment to get a leader after its creation
        sent = time.time()
        producer.produce(DOCTOR_TOPIC, b"lagpilot doctor clock check", on_delivery=delivered)
        producer.flush(timeout_s)
        acked = time.time()
        if stamps:
            kind, broker_ms = stamps[0]
            if kind != TIMESTAMP_LOG_APPEND_TIME:
                f.skew_error = f"{DOCTOR_TOPIC} does not use LogAppendTime; delete it"
                return
            f.skew_s = broker_ms / 1000 - (sent + acked) / 2
            f.skew_rtt_s = acked - sent
            return
        time.sleep(0.2)
    f.skew_error = f"could not write to {DOCTOR_TOPIC} within {timeout_s:g} s"
