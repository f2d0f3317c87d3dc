"""``python -m actuators`` / ``lagpilot actuate``: run the actuator until SIGTERM or SIGINT.

Configure (validate everything, no I/O) -> start (connect, rebuild the ledger) -> run ->
stop in reverse order. A configuration error exits 2 with the key and the fix.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from actuators.backends import BACKENDS_HELP, make_backend
from actuators.runner import Runner
from actuators.settings import from_env, load_policy
from schemas import ConfigError, load_signing_key, tracing


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lagpilot actuate",
        description="Apply signed control events from lagpilot.control; record outcomes.",
    )
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (env KAFKA_BOOTSTRAP)")
    p.add_argument("--backend", help=BACKENDS_HELP)
    p.add_argument("--policy", dest="policy_file", help="policy TOML (env LAGPILOT_POLICY_FILE)")
    p.add_argument("--actuator-id", help="unique, stable name (env LAGPILOT_ACTUATOR_ID)")
    p.add_argument("--metrics-port", type=int, help="/metrics, /healthz, /readyz (default 9102)")
    p.add_argument("--dry-run-log", help="dry-run backend: append each call to this file")
    p.add_argument("--max-batch", type=int, help="control events per transaction (default 32)")
    p.add_argument("--log-level", default="INFO")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    try:
        settings = from_env(
            bootstrap=args.bootstrap,
            backend=args.backend,
            policy_file=args.policy_file,
            actuator_id=args.actuator_id,
            metrics_port=args.metrics_port,
            dry_run_log=args.dry_run_log,
            max_batch=args.max_batch,
        )
        policy = load_policy(settings.policy_file)
        key = load_signing_key()
        tracing.setup("lagpilot-actuator")
    except (ConfigError, tracing.TracingConfigError) as exc:
        print(f"lagpilot actuate: configuration error: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    runner = Runner(settings, signing_key=key, policy=policy, backend=make_backend(settings))
    try:
        runner.start()
        runner.run(stop)
    finally:
        runner.close()
        tracing.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
