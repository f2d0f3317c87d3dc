"""``python -m pipeline`` / ``lagpilot run``: start the pipeline (configure, start, stop)."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from pipeline.state_dir import check_state_dir, state_write_error
from runtime import tracing
from runtime.backoff import backoff_s
from runtime.cli import (
    CLIENT_LOG,
    EX_CONFIG,
    EX_NOPERM,
    EX_UNAVAILABLE,
    CommandError,
    Parser,
    connect,
    explain_kafka,
    run,
    service_parser,
    topic_creation_failed,
    unreachable_sentence,
    watch_client_logs,
)
from schemas import ConfigError, Mode, load_signer, load_verifier
from schemas.keys import DECIDE

log = logging.getLogger("lagpilot.pipeline")


EXAMPLE = """example:
  export KAFKA_BOOTSTRAP=redpanda-0:9092 LAGPILOT_SIGNING_KEY_FILE=/etc/lagpilot/key
  lagpilot run --policy-file deploy/policy.example.toml --include 'orders.*'

Every setting of pipeline/settings.py is also LAGPILOT_<SETTING> (e.g.
LAGPILOT_WINDOW_S) or a key of the --config file; Kafka client settings pass through as
LAGPILOT_KAFKA_<NAME> (LAGPILOT_KAFKA_SECURITY_PROTOCOL=SASL_SSL). While the broker cannot
be reached, run says so once, keeps retrying, and /readyz stays false.
"""


def parse_args(argv: list[str]) -> Any:
    return _parser().parse_args(argv)


def _parser() -> Parser:
    from pipeline.settings import Settings

    d = Settings()
    ap = service_parser(
        "lagpilot run",
        "Read __consumer_offsets and watermark samples, model lag, decide, publish.",
        EXAMPLE,
    )

    def opt(flag: str, dest: str, help_: str, type_: Any = str, **kw: Any) -> None:
        env, default = f"LAGPILOT_{dest.upper()}", getattr(d, dest)
        ap.setting(flag, dest=dest, env=env, default=default, type=type_, help=help_, **kw)

    opt("--consumer-group", "consumer_group", "the pipeline's consumer group (replicas share it)")
    opt("--state-dir", "state_dir", "RocksDB state directory")
    opt("--sample-interval-ms", "sample_interval_ms", "watermark sampling period", int)
    opt("--include", "include", "regex of topics to watch")
    opt("--exclude", "exclude", "regex of topics not to watch")
    opt("--window-s", "window_s", "model window, seconds", float)
    opt("--metrics-port", "metrics_port", "/metrics, /healthz, /readyz; 0 disables", int)
    opt("--policy-file", "policy_file", "policy TOML file (built-in defaults if none)")
    opt(
        "--progress-warn-min-s",
        "progress_warn_min_s",
        "SDK worker reports: WARN after this long without progress while data waits",
        float,
    )
    opt(
        "--progress-missed-reports",
        "progress_missed_reports",
        "SDK worker reports: how many may be missed before silence counts",
        int,
    )
    opt(
        "--progress-grace-s",
        "progress_grace_s",
        "SDK worker reports: grace beyond the missed reports before silence counts",
        float,
    )
    opt(
        "--progress-expire-s",
        "progress_expire_s",
        "SDK worker reports: drop a report this old (commits judge again)",
        float,
    )
    opt(
        "--no-sampler",
        "run_sampler",
        "do not run the watermark sampler here",
        bool,
        action="store_false",
    )
    opt("--no-policy", "run_policy", "model only, decide nothing here", bool, action="store_false")
    return ap


def main(argv: list[str] | None = None) -> int:
    return run("lagpilot run", _parser(), _run, sys.argv[1:] if argv is None else argv)


def _has_key(env: Any) -> bool:
    try:
        load_signer(env, DECIDE)
    except ConfigError:
        return False
    return True


def _run(args: Any) -> int:
    skip = {"log_level", "debug", "config", "connect_timeout_s", "env", "kafka"}
    overrides = {k: v for k, v in vars(args).items() if k not in skip and v is not None}
    from pipeline.decide.policy_config import load_policy_config
    from pipeline.settings import describe, load_settings

    settings = load_settings(env=args.env, overrides=overrides)
    watch_client_logs(settings.bootstrap)  # the broker going mid-run: our sentence first
    policy_config = load_policy_config(settings.policy_file or None, env=args.env)
    policy = None
    # observe decides nothing, but answers action requests (as recommendations) when a
    # signing key lets it verify them; without a key, observe runs no policy at all
    observe = policy_config.mode is Mode.OBSERVE
    if settings.run_policy and (not observe or _has_key(args.env)):
        from pipeline.decide.policy_op import PolicyOperator

        policy = PolicyOperator(
            policy_config, load_signer(args.env, DECIDE), verifier=load_verifier(args.env)
        )
    tracing.setup("lagpilot-pipeline")
    from pipeline.app import build_app
    from pipeline.observe.metrics import BrokerProbe, HealthServer, PipelineMetrics
    from pipeline.observe.render_process import RenderProcess

    metrics = PipelineMetrics()
    if policy is not None:
        policy.metrics = metrics
    server = None
    if settings.metrics_port:
        metrics.lag.process = RenderProcess()  # formatting off the model's GIL
        server = HealthServer(
            settings.metrics_port,
            metrics.registry,
            BrokerProbe({**settings.broker_config(), "logger": CLIENT_LOG}),
            extra=metrics.lag.stream,  # the lag families in chunks, as they are written
        ).start()
        log.info("metrics on :%d/metrics, health on /healthz and /readyz", server.port)
    log.info("starting with %s, policy mode %s", describe(settings), policy_config.mode.value)
    try:
        check_state_dir(settings.state_dir)  # before the broker: a fix needs no broker
        wait_for_broker(settings.bootstrap, dict(settings.kafka), args.connect_timeout_s)
        if policy is not None:  # a halt kept from before this pipeline's state existed
            policy.adopt_kept_halts(settings.broker_config(), settings.control_topic)
        run_until_stopped(build_app, settings, metrics, policy)
    except KeyboardInterrupt:
        pass
    except Exception as exc:
        # a store that cannot be written ends the run: said as the directory and its fix
        err = state_write_error(exc, settings.state_dir)
        if err is None:
            raise
        raise err from exc
    finally:
        if server is not None:
            server.stop()
        if metrics.lag.process is not None:
            metrics.lag.process.close()
        tracing.shutdown()
    return 0


def wait_for_broker(bootstrap: str, kafka: dict[str, str], timeout_s: float) -> None:
    """Return once the broker answers. A service keeps trying while it cannot be reached:
    it says so in its own words (once, then on every tenth try), never with a traceback.
    Authentication and TLS failures are configuration, not weather: they end the run."""
    tries = 0
    while True:
        try:
            connect(bootstrap, kafka, timeout_s)
            if tries:
                log.info("the broker at %s answers now", bootstrap)
            return
        except CommandError as exc:
            if exc.exit_code != EX_UNAVAILABLE:
                raise
            if tries % 10 == 0:
                log.warning("%s; retrying every %.0f s, /readyz is false", exc, 5.0)
            time.sleep(backoff_s(tries, 0.5, 5.0))  # 0.5, 1, 2, 4, then every 5 s
            tries += 1


def run_until_stopped(
    build: Any,
    settings: Any,
    metrics: Any,
    policy: Any,
    pause_s: float = 1.0,
    max_quick_failures: int = 10,
    steady_s: float = 60.0,
) -> None:
    """Run the app; when the broker takes it down, build a new one and run again (from the
    last committed offsets; state and the policy's budget carry over).

    Broker weather, not bugs, ends Quix Streams' ``run()`` with:
    - ``CheckpointConsumerCommitError``: a commit refused, e.g. UNKNOWN_MEMBER_ID after the
      broker restarted and forgot the group's members;
    - ``CheckpointProducerTimeout``: the checkpoint's flush timed out while a broker of the
      cluster was down;
    - ``SourceException``: the commits source's process ended, e.g. its reads failed while
      the node leading ``__consumer_offsets`` was down;
    - ``PartitionAssignmentError``: restoring state on assignment failed while the cluster's
      controller was down.
    Each would otherwise stop the pipeline for good at one broker restart (bench/faults/rows.py
    runs these faults). Replayed inputs are harmless: actions carry idempotent ids. The
    pause doubles up to 30 s while runs keep failing fast; ``max_quick_failures`` runs in a
    row that each fail within ``steady_s`` end the run (a supervisor then sees a crash
    loop, not a silent one).
    """
    from quixstreams.checkpointing.exceptions import (
        CheckpointConsumerCommitError,
        CheckpointProducerTimeout,
    )
    from quixstreams.exceptions import PartitionAssignmentError
    from quixstreams.sources.base.exceptions import SourceException

    quick_failures = 0
    while True:
        app = _build_with_retries(build, settings, metrics, policy)
        started = time.monotonic()
        try:
            app.run()
            return
        except (
            CheckpointConsumerCommitError,
            CheckpointProducerTimeout,
            SourceException,
            PartitionAssignmentError,
        ) as exc:
            if time.monotonic() - started >= steady_s:
                quick_failures = 0
            quick_failures += 1
            delay_s = backoff_s(quick_failures - 1, pause_s, 30.0)
            if quick_failures > max_quick_failures:
                raise
            cause = exc.__cause__ or exc.__context__
            log.warning(
                "the pipeline's run ended on broker trouble (%s: %s%s); rebuilding it and "
                "resuming from the last committed offsets in %.1f s (%d of %d quick restarts)",
                type(exc).__name__,
                exc,
                f", caused by {type(cause).__name__}: {cause}" if cause else "",
                delay_s,
                quick_failures,
                max_quick_failures,
            )
            time.sleep(delay_s)


def _build_with_retries(build: Any, settings: Any, metrics: Any, policy: Any) -> Any:
    """Build the app, retrying while the broker cannot create or describe our topics yet
    (a cluster still starting, brokers briefly fenced): a transient broker state must not
    crash the pipeline at start. A configuration problem still fails at once."""
    from confluent_kafka import KafkaException
    from quixstreams.models.topics.exceptions import (
        CreateTopicFailure,
        CreateTopicTimeout,
        TopicNotFoundError,
        TopicPermissionError,
    )

    # TopicNotFoundError: a topic Quix just created is not described yet (a broker that just
    # started, under load)
    retried = (
        CreateTopicFailure,
        CreateTopicTimeout,
        TopicPermissionError,
        TopicNotFoundError,
        KafkaException,
    )
    for attempt in range(1, 13):
        try:
            app, _ = build(settings, metrics, policy=policy)
            return app
        except retried as exc:
            if isinstance(exc, KafkaException):
                err = explain_kafka(exc, bootstrap=settings.bootstrap)
            else:  # Quix words an ACL denial "verify if Create and Read are allowed"
                err = topic_creation_failed(exc, None, settings.bootstrap)
            if err.exit_code in (EX_NOPERM, EX_CONFIG):
                raise err from exc  # authentication, ACLs, TLS: no retry fixes those
            if attempt == 12:
                raise
            delay_s = backoff_s(attempt - 1, 0.5, 5.0)  # 0.5, 1, 2, 4, then 5 s
            if isinstance(exc, KafkaException) and err.exit_code == EX_UNAVAILABLE:
                log.warning("%s", unreachable_sentence(settings.bootstrap, str(exc)))
            else:
                log.warning("broker not ready for our topics (%s); retrying in %.1fs", exc, delay_s)
            time.sleep(delay_s)
    raise AssertionError("unreachable")


if __name__ == "__main__":
    sys.exit(main())
