"""``python -m actuators`` / ``lagpilot actuate``: run the actuator until SIGTERM or SIGINT.

Configure (validate everything, no I/O) -> start (connect, rebuild the ledger) -> run ->
stop in reverse order. This is the composition root: the backend and the runner's Kafka
clients are built here and handed to the ``Runner``. A configuration error exits 78 with
the key and the fix; a broker that cannot be reached at start exits 69 with its address
(the supervisor restarts it).
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

from actuators.backends import BACKENDS_HELP, make_backend
from actuators.errors import ActuatorError
from actuators.runner import Runner, kafka_clients
from actuators.settings import Settings, from_env, load_policy
from runtime import tracing
from runtime.cli import (
    EX_CONFIG,
    EX_FAILED,
    EX_NOPERM,
    EX_UNAVAILABLE,
    CommandError,
    Parser,
    connect,
    run,
    service_parser,
)
from schemas import load_verifier

EXAMPLE = """example:
  export KAFKA_BOOTSTRAP=redpanda-0:9092 LAGPILOT_SIGNING_KEY_FILE=/etc/lagpilot/key
  lagpilot actuate --policy deploy/policy.example.toml --actuator-id actuator-0
"""


def _parser() -> Parser:
    d, a = Settings(), "LAGPILOT_ACTUATOR_"
    p = service_parser(
        "lagpilot actuate",
        "Apply signed control events from lagpilot.control; record outcomes.",
        EXAMPLE,
    )
    p.setting("--backend", env=a + "BACKEND", default=d.backend, help=BACKENDS_HELP)
    p.setting("--policy", dest="policy_file", env="LAGPILOT_POLICY_FILE",
              help="policy TOML (mode and [allow])")  # fmt: skip
    p.setting("--actuator-id", env=a + "ID", default="the host name",
              help="unique, stable name (the transactional id)")  # fmt: skip
    p.setting("--metrics-port", env=a + "METRICS_PORT", default=d.metrics_port, type=int,
              help="/metrics, /healthz, /readyz; 0 disables")  # fmt: skip
    p.setting("--dry-run-log", env=a + "DRY_RUN_LOG",
              help="dry-run backend: append each call to this file")  # fmt: skip
    p.setting("--max-batch", env=a + "MAX_BATCH", default=d.max_batch, type=int,
              help="control events per transaction")  # fmt: skip
    return p


def _actuate(args: Any) -> int:
    settings = from_env(
        args.env,
        bootstrap=args.bootstrap,
        backend=args.backend,
        policy_file=args.policy_file,
        actuator_id=args.actuator_id,
        metrics_port=args.metrics_port,
        dry_run_log=args.dry_run_log,
        max_batch=args.max_batch,
    )
    policy = load_policy(settings.policy_file)
    key = load_verifier(args.env)
    tracing.setup("lagpilot-actuator")
    for topic in (settings.control_topic, settings.outcomes_topic):
        connect(settings.bootstrap, settings.kafka, args.connect_timeout_s, topic=topic)
    backend = _backend(settings)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    runner = Runner(settings, signing_key=key, policy=policy, backend=backend,
                    clients=kafka_clients(settings))  # fmt: skip
    try:
        try:
            runner.start()
        except ActuatorError as exc:  # its topics could not be created
            if exc.code is not None and "AUTHORIZATION_FAILED" in str(exc.code):
                raise CommandError(
                    f"permission denied at {settings.bootstrap}: {exc.message} ({exc.code}); "
                    "create the topic by hand or grant lagpilot's principal CREATE on the "
                    "cluster (docs/runbook.md lists the ACLs)",
                    EX_NOPERM,
                ) from exc
            raise CommandError(f"{exc.message} at {settings.bootstrap}", EX_FAILED) from exc
        runner.run(stop)
    finally:
        runner.close()
        tracing.shutdown()
    return 0


def _backend(settings: Settings) -> Any:
    """The backend; with the Redpanda Admin API, one GET /v1/brokers first, so a wrong URL
    or password is said at start in one line, not at the first leadership move."""
    from actuators.redpanda_admin import RedpandaAdminError

    urls = ",".join(settings.redpanda_admin_urls)
    try:
        backend = make_backend(settings)
    except RedpandaAdminError as exc:  # the client refused its settings, before any I/O
        raise CommandError(f"Redpanda Admin API settings: {exc}", EX_CONFIG) from exc
    admin = getattr(backend, "admin", None)
    if admin is None:
        return backend
    try:
        admin.brokers()
    except RedpandaAdminError as exc:
        if exc.status in (401, 403):
            raise CommandError(
                f"the Redpanda Admin API at {urls} refused the credentials (HTTP {exc.status});"
                " set LAGPILOT_REDPANDA_ADMIN_USERNAME and LAGPILOT_REDPANDA_ADMIN_PASSWORD",
                EX_NOPERM,
            ) from exc
        raise CommandError(
            f"cannot reach the Redpanda Admin API at {urls} ({exc.message}); check "
            "LAGPILOT_REDPANDA_ADMIN_URLS (port 9644) and that the Admin API listens there",
            EX_UNAVAILABLE,
        ) from exc
    return backend


def main(argv: list[str] | None = None) -> int:
    return run("lagpilot actuate", _parser(), _actuate, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
