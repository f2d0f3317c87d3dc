"""``lagpilot control``: the kill switch and the control topic's tail.

``lagpilot control halt [--scope actions|workload] [--group G]``: ``actions`` (the default)
stops lagpilot acting (actuators, the policy; workers restore spreads and keep processing),
``workload --group G`` pauses that group's workers (schemas/halts.py); ``lagpilot control
resume`` lifts it; ``lagpilot control tail`` prints control and outcome events as a table.
Halts and resumes are signed with the operator's role key (``LAGPILOT_PRIVATE_KEY_FILE``;
the shared ``LAGPILOT_SIGNING_KEY`` until the migration to role keys is done),
schema-checked before they are sent, and keyed by their target, so a halt and its resume
land on the same partition and are read in order. Each is also kept on the compacted
``lagpilot.halts`` (keyed by scope), which processes that start later read.

A halt is always published with mode ``act``: a kill switch marked as a recommendation would
be recorded and ignored by the actuator.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence

from pipeline.commands.tail import tail
from pipeline.decide.control import (
    PublishError,
    control_action,
    publish_actions,
)
from runtime.cli import (
    EX_FAILED,
    EX_NOPERM,
    EX_TEMPFAIL,
    EX_USAGE,
    ClientErrors,
    CommandError,
    Parser,
    add_connection,
    client_config,
    connect,
    explain_kafka,
    run,
)
from schemas import (
    ActionType,
    ConfigError,
    EventError,
    load_signer,
)
from schemas.halts import halt_scope, halts_topic_for
from schemas.keys import OPERATOR
from schemas.topics import CONTROL, OUTCOMES

log = logging.getLogger("lagpilot.control")


def _switch(args: argparse.Namespace, kind: ActionType) -> int:
    from confluent_kafka import KafkaException, Producer

    key = load_signer(args.env, OPERATOR)
    now_ms = int(time.time() * 1000)
    action = control_action(
        kind, args.scope, now_ms=now_ms, reason=args.reason, group=args.scope_group
    )
    connect(args.bootstrap, args.kafka, args.connect_timeout_s, topic=args.topic)
    errors = ClientErrors()  # a fatal idempotence error says why only through error_cb
    producer = Producer(
        {
            **client_config(args.bootstrap, args.kafka, errors),
            "enable.idempotence": True,
            "acks": "all",
        }
    )
    try:
        [event] = publish_actions(producer, [action], key, topic=args.topic, timeout_s=args.timeout)
        scope = halt_scope(event["params"])
        # the kept state: a worker, actuator or pipeline that starts later reads it
        args.halts_topic = args.halts_topic or halts_topic_for(args.topic)
        _ensure_halts_topic(args)
        publish_actions(producer, [event], key, topic=args.halts_topic, timeout_s=args.timeout,
                        key_of=lambda _: scope.state_key)  # fmt: skip
    except KafkaException as exc:
        producer.poll(0)
        err = explain_kafka(exc, bootstrap=args.bootstrap, topic=args.topic, seen=errors.errors)
        raise err from exc
    print(f"{kind} scope={scope} id={event['id']} published to {args.topic} and {args.halts_topic}")
    return 0


def _ensure_halts_topic(args: argparse.Namespace) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    from runtime.kafka import fault

    admin = AdminClient(client_config(args.bootstrap, args.kafka))
    new = NewTopic(args.halts_topic, 1, -1, config={"cleanup.policy": "compact"})
    try:
        admin.create_topics([new])[args.halts_topic].result(timeout=args.timeout)
    except KafkaException as exc:
        if fault(exc).code != "TOPIC_ALREADY_EXISTS":
            raise


EXAMPLE = """examples:
  lagpilot control halt --reason "INC-123: stop all actions"
  lagpilot control tail --since 10m --group doc-parsers --type throttle_producer
  lagpilot control tail --since 1h --json --idle-exit 2 | jq -c 'select(.result == "failed")'
"""


def _parser() -> Parser:
    p = Parser(prog="lagpilot control", description=__doc__.split("\n\n")[1], epilog=EXAMPLE)
    add_connection(p)
    p.option("--topic", env="LAGPILOT_CONTROL_TOPIC", default=CONTROL, help="control topic")
    sub = p.subcommands(dest="command", required=True, metavar="{halt,resume,tail}")
    for name, help_ in (("halt", "stop all changes"), ("resume", "lift a halt")):
        s = sub.add_parser(name, help=help_, epilog=EXAMPLE)
        s.option(
            "--scope",
            env="LAGPILOT_CONTROL_SCOPE",
            default="actions",
            help="actions: lagpilot stops acting, workers restore spreads and keep processing; "
            "workload: the --group's workers pause processing (docs/runbook.md)",
        )
        s.option(
            "--group",
            env="LAGPILOT_CONTROL_GROUP",
            dest="scope_group",
            help="limit it to one consumer group (required for --scope workload)",
        )
        s.option(
            "--halts-topic",
            env="LAGPILOT_HALTS_TOPIC",
            help="compacted topic keeping the halts in force (default: lagpilot.halts, or "
            "<--topic>.halts for another control topic)",
        )
        s.option(
            "--reason",
            env="LAGPILOT_CONTROL_REASON",
            default="operator kill switch",
            help="why, for the record",
        )
        s.option(
            "--timeout",
            env="LAGPILOT_CONTROL_TIMEOUT_S",
            default=10.0,
            type=float,
            help="delivery timeout, seconds",
        )
        p.adopt(s)
    t = sub.add_parser("tail", help="print control and outcome events", epilog=EXAMPLE)
    t.option(
        "--outcomes-topic", env="LAGPILOT_OUTCOMES_TOPIC", default=OUTCOMES, help="outcomes topic"
    )
    t.switch(
        "--from-beginning", env="LAGPILOT_TAIL_FROM_BEGINNING", help="start at the oldest event"
    )
    t.option(
        "--since",
        env="LAGPILOT_TAIL_SINCE",
        help="start this far back: seconds or 90s, 10m, 2h, 1d (default: new events)",
    )
    t.option(
        "--group",
        env="LAGPILOT_TAIL_GROUP",
        action="append",
        help="only events about this consumer group (repeatable)",
    )
    t.option(
        "--type",
        env="LAGPILOT_TAIL_TYPE",
        action="append",
        help="only this action type, e.g. halt, throttle_producer (repeatable)",
    )
    t.switch(
        "--json",
        env="LAGPILOT_TAIL_JSON",
        help="one JSON event per line (with its topic), for scripts",
    )
    t.option("--max", env="LAGPILOT_TAIL_MAX", type=int, help="stop after this many events")
    t.option(
        "--idle-exit", env="LAGPILOT_TAIL_IDLE_EXIT_S", type=float, help="stop after N idle seconds"
    )
    p.adopt(t)
    return p


def _control(args: argparse.Namespace) -> int:
    try:
        if args.command == "tail":
            return tail(args)
        kind = ActionType.HALT if args.command == "halt" else ActionType.RESUME
        return _switch(args, kind)
    except PublishError as exc:
        code = EX_NOPERM if exc.denied else EX_TEMPFAIL if exc.retriable else EX_FAILED
        raise CommandError(str(exc), code) from exc
    except ValueError as exc:  # --since
        if isinstance(exc, ConfigError | EventError):
            raise
        raise CommandError(str(exc), EX_USAGE) from exc


def main(argv: Sequence[str] | None = None) -> int:
    return run(
        "lagpilot control", _parser(), _control, list(sys.argv[1:] if argv is None else argv)
    )


if __name__ == "__main__":
    sys.exit(main())
