"""Pipeline settings: defaults, then ``LAGPILOT_*`` environment, then command-line flags.

Validated once at start, before any I/O; a bad value raises ``ConfigError`` naming the key
and the fix. Kafka client settings (TLS, SASL) pass through from ``LAGPILOT_KAFKA_<NAME>``
variables: ``LAGPILOT_KAFKA_SECURITY_PROTOCOL=SASL_SSL`` becomes ``security.protocol``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from pipeline.model.config import LagConfig
from pipeline.model.group_health import HealthConfig
from pipeline.model.progress import ProgressConfig
from pipeline.read.backlog import DEFAULT_MAX_BUFFERED_BYTES
from runtime import env as env_values
from schemas import ConfigError
from schemas import topics as topic_names

ENV_PREFIX = "LAGPILOT_"
KAFKA_ENV_PREFIX = "LAGPILOT_KAFKA_"
DEFAULT_BOOTSTRAP = "127.0.0.1:21092"


@dataclass(frozen=True)
class Settings:
    bootstrap: str = DEFAULT_BOOTSTRAP  # env KAFKA_BOOTSTRAP or LAGPILOT_BOOTSTRAP
    consumer_group: str = "lagpilot-pipeline"
    # Static membership (group.instance.id): a restarted replica takes its partitions back at
    # once instead of after session_timeout_ms. Give each replica a stable, unique id (the
    # pod name of a StatefulSet); empty: dynamic membership.
    instance_id: str = ""
    session_timeout_ms: int = 10_000
    state_dir: str = ".lagpilot/state"
    offsets_topic: str = "__consumer_offsets"  # another name only for benchmarks and replays
    # where a NEW pipeline group starts its topics: "latest" skips old samples in the
    # shared watermarks topic; the commits source always reads __consumer_offsets from the
    # start and re-sends what it knows periodically, so no group's position is missed
    auto_offset_reset: str = "latest"
    commit_interval_s: float = 1.0
    # commits are coalesced per topic for at most this long, and flushed before each sample
    # they precede (a replica that does not sample their topic sends them at this pace)
    commit_flush_ms: int = 250
    sample_interval_ms: int = 250
    # the bytes the pipeline's queues may hold (prefetched records, undelivered batches);
    # a replica fed more than it models pauses its reader at this bound and says it is
    # behind (lagpilot_input_behind_seconds) instead of growing (pipeline/read/backlog.py)
    max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES
    # every share group's state (KIP-932: start offset and the broker's lag per
    # share-partition) is read this often; 0: share groups are not read
    # (pipeline/read/share_positions.py)
    share_groups_interval_ms: int = 500
    metadata_refresh_ms: int = 5000
    # one ListOffsets per leader broker a tick (kafka-python's protocol classes, answered
    # per partition), not the AdminClient's future per partition (several times the CPU);
    # false, or TLS/SASL settings kafka-python lacks, keep the AdminClient's way
    # (pipeline/read/list_offsets.py)
    list_offsets_per_broker: bool = True
    include: str = ".*"
    exclude: str = ""
    window_s: float = 10.0
    history_rows: int = 4096  # cap on HWM history rows per topic (pipeline/model/history.py)
    warn_time_lag_s: float = 5.0
    err_time_lag_s: float = 30.0
    # partition_lag snapshots of every partition this often, of partitions not OK every
    # partition_alert_interval_ms, and at once on a status change; group_lag summaries
    # every sample while a group is not OK, else every ok_summary_interval_ms
    partition_snapshot_interval_ms: int = 30_000
    partition_alert_interval_ms: int = 1000
    ok_summary_interval_ms: int = 1000
    # ...stretched past these rates per replica (a large estate: 5,000 group-topics get
    # their OK summaries every 10 s; 250,000 group-partitions their snapshots every 250 s);
    # 0: never stretched. Non-OK summaries, alerts and status changes are never held.
    max_ok_summaries_per_s: float = 500.0
    max_snapshots_per_s: float = 1000.0
    persist_interval_ms: int = 1000  # HWM history to the state store
    # every group-partition's rate window to the state store: a crash loses at most this
    # much of the window (thinner fits for one window after a restart); large at scale
    # (the window grows with groups x partitions, and each write encodes it whole)
    window_persist_interval_ms: int = 5000
    # where the HWM history cannot answer (time lag extrapolated), the timestamp of the
    # record at the committed offset is read from the broker: at most this many reads a
    # second (0: never), each group-partition at most every record_read_interval_s
    record_reads_per_s: float = 20.0
    record_read_interval_s: float = 30.0
    worst_n: int = 5
    # SDK workers' progress reports (pipeline/model/progress.py, docs/lag-model.md): where a
    # worker reports, WARN after progress_warn_min_s without progress while data waits
    # (or 1.5 x its usual time per message, if longer); a worker silent for
    # progress_missed_reports of its reports plus progress_grace_s counts as stopped from
    # then on; a report older than progress_expire_s is dropped (commits judge again)
    progress_warn_min_s: float = 0.15
    # ...or this, where another partition of the same worker advanced this long after the
    # stuck one last did (the process runs: the partition's own work is slow)
    progress_moving_worker_min_s: float = 0.1
    # ...or this, where every partition of one worker (two at least) paused at once
    progress_whole_worker_min_s: float = 0.4
    progress_whole_worker_stop_s: float = 1.0  # and STALL/STOP there after this long
    progress_missed_reports: int = 2
    progress_grace_s: float = 0.4
    progress_expire_s: float = 60.0
    # a healthy worker's whole pauses (every partition holding work at once, below the WARN
    # threshold, ended in progress) lift its usual interval; the learned pause halves
    # every this many seconds
    progress_pause_half_life_s: float = 60.0
    # group health (pipeline/model/group_health.py): a group whose generation moves
    # storm_rebalances times within storm_window_s while no commit advances for
    # group_stall_s is in a rebalance STORM; unchanged groups are re-published every
    # group_health_interval_ms
    storm_rebalances: int = 3
    storm_window_s: float = 60.0
    group_stall_s: float = 10.0
    group_health_interval_ms: int = 5_000
    topic_partitions: int = 16  # partitions of lagpilot.watermarks (the unit of parallelism)
    replication_factor: int = 1
    metrics_port: int = 9101  # 0 disables /metrics, /healthz, /readyz
    control_topic: str = "lagpilot.control"  # the actuator and workers must read the same
    # where the actuator and the workers report outcomes (the policy verifies from them and
    # writes its verification events there) and where SDK producers report their rates;
    # the actuator's LAGPILOT_OUTCOMES_TOPIC and the producers' rates topic must match
    outcomes_topic: str = topic_names.OUTCOMES
    producers_topic: str = topic_names.PRODUCERS
    requests_topic: str = "lagpilot.requests"  # lagpilot mcp publishes action requests here
    policy_file: str = ""  # empty: built-in policy defaults (mode recommend)
    run_sampler: bool = True
    run_policy: bool = True
    kafka: Mapping[str, str] = field(default_factory=dict)

    def broker_config(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, **self.kafka}

    def consumer_config(self) -> dict[str, Any]:
        """Extra consumer settings for the pipeline's own consumer group."""
        extra: dict[str, Any] = {
            "session.timeout.ms": self.session_timeout_ms,
            "heartbeat.interval.ms": max(500, self.session_timeout_ms // 10),
            "fetch.wait.max.ms": 50,
        }
        if self.instance_id:
            extra["group.instance.id"] = self.instance_id
        return extra

    def health_config(self) -> HealthConfig:
        return HealthConfig(
            storm_rebalances=self.storm_rebalances,
            storm_window_s=self.storm_window_s,
            stall_s=self.group_stall_s,
            interval_ms=self.group_health_interval_ms,
        )

    def lag_config(self) -> LagConfig:
        return LagConfig(
            window_s=self.window_s,
            history_rows=self.history_rows,
            warn_time_lag_s=self.warn_time_lag_s,
            err_time_lag_s=self.err_time_lag_s,
            worst_n=self.worst_n,
            progress=ProgressConfig(
                warn_min_s=self.progress_warn_min_s,
                moving_worker_min_s=self.progress_moving_worker_min_s,
                whole_worker_min_s=self.progress_whole_worker_min_s,
                whole_worker_stop_s=self.progress_whole_worker_stop_s,
                missed_reports=self.progress_missed_reports,
                grace_s=self.progress_grace_s,
                expire_s=self.progress_expire_s,
                pause_half_life_s=self.progress_pause_half_life_s,
            ),
        )


_BOUNDS: dict[str, tuple[float, float]] = {
    "commit_interval_s": (0.05, 60),
    "session_timeout_ms": (3_000, 300_000),
    "commit_flush_ms": (1, 5_000),
    "sample_interval_ms": (20, 60_000),
    "max_buffered_bytes": (16 * 1024 * 1024, 16 * 1024**3),
    "share_groups_interval_ms": (0, 600_000),
    "metadata_refresh_ms": (100, 3_600_000),
    "window_s": (1, 3_600),
    "history_rows": (16, 100_000),
    "warn_time_lag_s": (0.1, 86_400),
    "err_time_lag_s": (0.1, 86_400),
    "partition_snapshot_interval_ms": (0, 3_600_000),
    "partition_alert_interval_ms": (0, 3_600_000),
    "ok_summary_interval_ms": (0, 60_000),
    "max_ok_summaries_per_s": (0, 1_000_000),
    "max_snapshots_per_s": (0, 1_000_000),
    "persist_interval_ms": (50, 600_000),
    "window_persist_interval_ms": (50, 600_000),
    "record_reads_per_s": (0, 10_000),
    "record_read_interval_s": (1, 86_400),
    "worst_n": (1, 100),
    "progress_warn_min_s": (0.02, 60),
    "progress_moving_worker_min_s": (0.02, 60),
    "progress_whole_worker_min_s": (0.02, 60),
    "progress_whole_worker_stop_s": (0.1, 600),
    "progress_missed_reports": (0, 100),
    "progress_grace_s": (0, 60),
    "progress_expire_s": (1, 86_400),
    "progress_pause_half_life_s": (0, 86_400),
    "storm_rebalances": (2, 1_000),
    "storm_window_s": (1, 3_600),
    "group_stall_s": (0.1, 3_600),
    "group_health_interval_ms": (100, 600_000),
    "topic_partitions": (1, 10_000),
    "replication_factor": (1, 5),
    "metrics_port": (0, 65_535),
}


def _coerce(name: str, typ: Any, raw: Any) -> Any:
    return env_values.coerce(f"{ENV_PREFIX}{name.upper()}", typ, raw)


def load_settings(
    env: Mapping[str, str] | None = None, overrides: Mapping[str, Any] | None = None
) -> Settings:
    """Settings from ``env`` (``LAGPILOT_<FIELD>``, plus ``KAFKA_BOOTSTRAP``) and overrides."""
    import os

    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    types = {f.name: f.type for f in fields(Settings)}
    if env.get("KAFKA_BOOTSTRAP"):
        values["bootstrap"] = env["KAFKA_BOOTSTRAP"]
    for name, typ in types.items():
        if name == "kafka":
            continue
        raw = env.get(f"{ENV_PREFIX}{name.upper()}")
        if raw is not None and raw != "":
            values[name] = _coerce(name, typ, raw)
    kafka = {
        k[len(KAFKA_ENV_PREFIX) :].lower().replace("_", "."): v
        for k, v in env.items()
        if k.startswith(KAFKA_ENV_PREFIX)
    }
    values["kafka"] = kafka
    for name, raw in (overrides or {}).items():
        if name not in types:
            raise ConfigError(f"unknown setting {name!r}; known: {', '.join(sorted(types))}")
        if raw is not None:
            values[name] = _coerce(name, types[name], raw) if name != "kafka" else raw
    settings = Settings(**values)
    validate_settings(settings)
    return settings


def validate_settings(s: Settings) -> None:
    for name, (lo, hi) in _BOUNDS.items():
        value = getattr(s, name)
        if not lo <= value <= hi:
            raise ConfigError(
                f"{ENV_PREFIX}{name.upper()}={value}: must be between {lo} and {hi}; "
                f"set it in range (default {getattr(Settings(), name)})"
            )
    if not re.fullmatch(r"[^,\s]+:\d+(,[^,\s]+:\d+)*", s.bootstrap):
        raise ConfigError(
            f"KAFKA_BOOTSTRAP={s.bootstrap!r}: expected host:port[,host:port...], "
            "e.g. 127.0.0.1:9092"
        )
    if s.auto_offset_reset not in {"earliest", "latest"}:
        raise ConfigError(
            f"{ENV_PREFIX}AUTO_OFFSET_RESET={s.auto_offset_reset!r}: use earliest or latest"
        )
    if s.err_time_lag_s < s.warn_time_lag_s:
        raise ConfigError(
            f"{ENV_PREFIX}ERR_TIME_LAG_S={s.err_time_lag_s} is below "
            f"{ENV_PREFIX}WARN_TIME_LAG_S={s.warn_time_lag_s}; ERR must be the higher level"
        )
    if s.window_s * 1000 < 3 * s.sample_interval_ms:
        raise ConfigError(
            f"{ENV_PREFIX}WINDOW_S={s.window_s} holds fewer than 3 samples at "
            f"{ENV_PREFIX}SAMPLE_INTERVAL_MS={s.sample_interval_ms}; widen the window"
        )
    if s.progress_expire_s * 1000 <= 2 * s.sample_interval_ms:
        raise ConfigError(
            f"{ENV_PREFIX}PROGRESS_EXPIRE_S={s.progress_expire_s} drops worker reports before "
            f"two samples of {ENV_PREFIX}SAMPLE_INTERVAL_MS={s.sample_interval_ms} can use "
            "them; raise it (default 60)"
        )
    for pattern_key in ("include", "exclude"):
        pattern = getattr(s, pattern_key)
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(
                f"{ENV_PREFIX}{pattern_key.upper()}={pattern!r} is not a valid regex ({exc})"
            ) from None


def describe(s: Settings) -> dict[str, Any]:
    """Settings for the start-up log line: Kafka secrets are masked."""
    d = dataclasses.asdict(s)
    d["kafka"] = {
        k: ("***" if any(w in k for w in ("password", "secret", "token", "key")) else v)
        for k, v in s.kafka.items()
    }
    return d
