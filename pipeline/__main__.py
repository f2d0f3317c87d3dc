"""``python -m pipeline`` / ``lagpilot run``: start the pipeline (configure, start, stop)."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Any

from schemas import ConfigError, Mode, load_signing_key, tracing

log = logging.getLogger("lagpilot.pipeline")


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="lagpilot run",
        description="Read __consumer_offsets and watermark samples, model lag, decide, publish.",
        epilog="Every option also reads LAGPILOT_<OPTION> from the environment "
        "(e.g. LAGPILOT_SAMPLE_INTERVAL_MS); Kafka client settings pass through as "
        "LAGPILOT_KAFKA_<NAME> (LAGPILOT_KAFKA_SECURITY_PROTOCOL=SASL_SSL).",
    )
    ap.add_argument("--bootstrap", help="Kafka bootstrap servers (env KAFKA_BOOTSTRAP)")
    ap.add_argument("--consumer-group", dest="consumer_group")
    ap.add_argument("--state-dir", dest="state_dir")
    ap.add_argument("--sample-interval-ms", dest="sample_interval_ms", type=int)
    ap.add_argument("--include", help="regex of topics to watch (default: all)")
    ap.add_argument("--exclude", help="regex of topics not to watch")
    ap.add_argument("--window-s", dest="window_s", type=float)
    ap.add_argument("--metrics-port", dest="metrics_port", type=int)
    ap.add_argument("--policy-file", dest="policy_file", help="policy TOML file")
    ap.add_argument("--no-sampler", dest="run_sampler", action="store_false", default=None)
    ap.add_argument("--no-policy", dest="run_policy", action="store_false", default=None)
    ap.add_argument("--log-level", default="INFO")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    overrides = {k: v for k, v in vars(args).items() if k != "log_level" and v is not None}
    try:
        from pipeline.policy_config import load_policy_config
        from pipeline.settings import describe, load_settings

        settings = load_settings(overrides=overrides)
        policy_config = load_policy_config(settings.policy_file or None)
        policy = None
        if settings.run_policy and policy_config.mode is not Mode.OBSERVE:
            from pipeline.policy_op import PolicyOperator

            policy = PolicyOperator(policy_config, load_signing_key())
        tracing.setup("lagpilot-pipeline")
    except (ConfigError, tracing.TracingConfigError) as exc:
        print(f"lagpilot run: configuration error: {exc}", file=sys.stderr)
        return 2
    from pipeline.app import build_app
    from pipeline.exposition import RenderProcess
    from pipeline.metrics import BrokerProbe, HealthServer, PipelineMetrics

    metrics = PipelineMetrics()
    if policy is not None:
        policy.metrics = metrics
    server = None
    if settings.metrics_port:
        metrics.lag.process = RenderProcess()  # formatting off the model's GIL
        server = HealthServer(
            settings.metrics_port,
            metrics.registry,
            BrokerProbe(settings.broker_config()),
            extra=metrics.lag.render,
        ).start()
        log.info("metrics on :%d/metrics, health on /healthz and /readyz", server.port)
    log.info("starting with %s, policy mode %s", describe(settings), policy_config.mode.value)
    try:
        app = _build_with_retries(build_app, settings, metrics, policy)
    except KeyboardInterrupt:
        return 130
    try:
        app.run()
    except KeyboardInterrupt:
        pass
    finally:
        if server is not None:
            server.stop()
        if metrics.lag.process is not None:
            metrics.lag.process.close()
        tracing.shutdown()
    return 0


def _build_with_retries(build: Any, settings: Any, metrics: Any, policy: Any) -> Any:
    """Build the app, retrying while the broker cannot create or describe our topics yet
    (a cluster still starting, brokers briefly fenced): a transient broker state must not
    crash the pipeline at start. A configuration problem still fails at once."""
    from confluent_kafka import KafkaException
    from quixstreams.models.topics.exceptions import CreateTopicFailure, CreateTopicTimeout

    delay_s = 0.5
    for attempt in range(1, 13):
        try:
            app, _ = build(settings, metrics, policy=policy)
            return app
        except (CreateTopicFailure, CreateTopicTimeout, KafkaException) as exc:
            if attempt == 12:
                raise
            log.warning("broker not ready for our topics (%s); retrying in %.1fs", exc, delay_s)
            time.sleep(delay_s)
            delay_s = min(delay_s * 2, 5.0)
    raise AssertionError("unreachable")


if __name__ == "__main__":
    sys.exit(main())
