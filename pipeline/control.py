"""The control topic's edge: publish signed actions, and the kill-switch CLI.

``lagpilot control halt [--scope all|GROUP]`` stops every actuator and worker (and the
policy) from changing anything; ``lagpilot control resume`` lifts it; ``lagpilot control
tail`` prints control and outcome events as a table. Halts and resumes are signed with the
shared key (``LAGPILOT_SIGNING_KEY`` or ``LAGPILOT_SIGNING_KEY_FILE``), schema-checked
before they are sent, and keyed by their target, so a halt and its resume land on the same
partition and are read in order.

A halt is always published with mode ``act``: a kill switch marked as a recommendation would
be recorded and ignored by the actuator.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from pipeline.policy import CONTROL_TTL_MS, build_action
from schemas import (
    ActionType,
    ConfigError,
    EventError,
    Mode,
    decode,
    encode,
    load_signing_key,
    sign,
    validate,
    verify,
)
from schemas.topics import CONTROL, OUTCOMES

DEFAULT_BOOTSTRAP = "127.0.0.1:21092"
#: tail's columns and their widths (the last one, detail, takes the rest of the line)
COLUMNS = (("time(UTC)", 12), ("topic", 17), ("type", 19), ("target", 30), ("mode/result", 11),
           ("sig", 3), ("id", 12), ("detail", 0))  # fmt: skip
OPERATOR_POLICY_VERSION = "operator"


class ProducerLike(Protocol):
    """What ``publish_actions`` needs of a producer (confluent_kafka.Producer fits)."""

    def produce(self, topic: str, value: bytes, key: bytes, on_delivery: Any) -> None: ...
    def poll(self, timeout: float) -> int: ...
    def flush(self, timeout: float) -> int: ...


class PublishError(RuntimeError):
    """Actions could not be delivered to the control topic.

    ``retriable`` is the broker's verdict on the first failure (e.g. a leader election is
    retriable, an authorization failure is not).
    """

    def __init__(self, message: str, retriable: bool) -> None:
        super().__init__(message)
        self.retriable = retriable


def control_action(kind: ActionType, scope: str, *, now_ms: int, reason: str) -> dict[str, Any]:
    """An unsigned halt or resume for ``scope`` ("all" or a consumer group).

    Its id is new for every press of the switch (the window is the time it was issued); it
    holds until the opposite event, so ``expires_at`` is a year out.
    """
    if kind not in (ActionType.HALT, ActionType.RESUME):
        raise ValueError(f"control_action builds halt or resume, not {kind!r}")
    if not scope:
        raise ConfigError("--scope: must be 'all' or a consumer group name; pass e.g. --scope all")
    return build_action(
        kind,
        f"scope:{scope}",
        {"scope": scope},
        {"rule": "operator", "why": reason, "by": os.environ.get("USER", "unknown")},
        mode=Mode.ACT,
        issued_at_ms=now_ms,
        expires_at_ms=now_ms + CONTROL_TTL_MS,
        policy_version=OPERATOR_POLICY_VERSION,
        window=(now_ms,),
    )


def publish_actions(
    producer: ProducerLike,
    actions: Iterable[Mapping[str, Any]],
    key: bytes,
    *,
    topic: str = CONTROL,
    timeout_s: float = 10.0,
) -> list[dict[str, Any]]:
    """Sign, validate and produce ``actions`` keyed by their target; wait for delivery.

    ``key`` is the HMAC signing key. Returns the signed events as sent. An action that
    fails its schema raises ``EventError`` before anything is produced (a bug in the
    caller, never retriable); a delivery failure raises ``PublishError``.
    """
    signed = [sign(a, key) for a in actions]
    for event in signed:
        validate(event)
    failures: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(err)

    for event in signed:
        producer.produce(topic, encode(event), event["target"].encode(), on_delivery=delivered)
        producer.poll(0)
    left = producer.flush(timeout_s)
    if failures:
        err = failures[0]
        retriable = bool(getattr(err, "retriable", lambda: False)())
        raise PublishError(
            f"{len(failures)} of {len(signed)} actions not delivered to {topic}: {err}; "
            "check the broker and the topic's ACLs",
            retriable,
        )
    if left:
        raise PublishError(
            f"{left} actions still queued after {timeout_s:g} s; is the broker reachable?",
            True,
        )
    return signed


def _bootstrap(args: argparse.Namespace) -> str:
    return str(args.bootstrap or os.environ.get("KAFKA_BOOTSTRAP") or DEFAULT_BOOTSTRAP)


def _switch(args: argparse.Namespace, kind: ActionType) -> int:
    from confluent_kafka import Producer

    key = load_signing_key()
    now_ms = int(time.time() * 1000)
    action = control_action(kind, args.scope, now_ms=now_ms, reason=args.reason)
    producer = Producer(
        {"bootstrap.servers": _bootstrap(args), "enable.idempotence": True, "acks": "all"}
    )
    [event] = publish_actions(producer, [action], key, topic=args.topic, timeout_s=args.timeout)
    print(f"{kind} scope={args.scope} id={event['id']} published to {args.topic}")
    return 0


def format_row(cells: Sequence[str]) -> str:
    return "  ".join(c.ljust(w)[: w or None] for c, (_, w) in zip(cells, COLUMNS, strict=True))


def _row(topic: str, event: Mapping[str, Any], key: bytes | None) -> list[str]:
    """One table row: when, what, target, result or mode, id, detail."""
    if event.get("event") == "outcome":
        at, what = event.get("at", 0), event.get("action_type", "?")
        state = str(event.get("result", "?"))
        detail = event.get("reason") or (event.get("error") or {}).get("message", "")
        ident, sig = str(event.get("action_id", "")), ""
    else:
        at, what = event.get("issued_at", 0), str(event.get("type", "?"))
        state = str(event.get("mode", "?"))
        detail = event.get("params", "")
        ident, sig = str(event.get("id", "")), "?"
        if key is not None:
            try:
                verify(event, key)
                sig = "ok"
            except EventError:
                sig = "BAD"
    when = datetime.fromtimestamp(int(at) / 1000, UTC).strftime("%H:%M:%S.%f")[:-3]
    return [when, topic, what, str(event.get("target", "")), state, sig, ident[:12], str(detail)]


def _tail(args: argparse.Namespace) -> int:
    from confluent_kafka import Consumer, KafkaError

    try:
        key: bytes | None = load_signing_key()
    except ConfigError:
        key = None  # the table still shows events; the sig column says "?"
    consumer = Consumer(
        {
            "bootstrap.servers": _bootstrap(args),
            "group.id": f"lagpilot-control-tail-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest" if args.from_beginning else "latest",
        }
    )
    consumer.subscribe(sorted({args.topic, args.outcomes_topic}))
    print(format_row([name for name, _ in COLUMNS]), flush=True)
    shown, idle_since = 0, time.monotonic()
    try:
        while args.max is None or shown < args.max:
            if args.idle_exit is not None and time.monotonic() - idle_since > args.idle_exit:
                break
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    print(f"# {msg.error()}", file=sys.stderr)
                continue
            idle_since = time.monotonic()
            try:
                event = decode(msg.value() or b"")
            except EventError as exc:
                print(f"# skipped a malformed event at {msg.topic()}/{msg.partition()}"
                      f"@{msg.offset()}: {exc}", file=sys.stderr)  # fmt: skip
                continue
            print(format_row(_row(str(msg.topic()), event, key)), flush=True)
            shown += 1
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lagpilot control", description=__doc__.split("\n\n")[1])
    p.add_argument(
        "--bootstrap", help=f"Kafka bootstrap (else $KAFKA_BOOTSTRAP, {DEFAULT_BOOTSTRAP})"
    )
    p.add_argument("--topic", default=CONTROL, help=f"control topic (default {CONTROL})")
    sub = p.add_subparsers(dest="command", required=True)
    for name, help_ in (("halt", "stop all changes"), ("resume", "lift a halt")):
        s = sub.add_parser(name, help=help_)
        s.add_argument("--scope", default="all", help="'all' (default) or a consumer group")
        s.add_argument("--reason", default="operator kill switch", help="why, for the record")
        s.add_argument("--timeout", type=float, default=10.0, help="delivery timeout, seconds")
    t = sub.add_parser("tail", help="print control and outcome events as a table")
    t.add_argument("--outcomes-topic", default=OUTCOMES)
    t.add_argument("--from-beginning", action="store_true", help="start at the oldest event")
    t.add_argument("--max", type=int, default=None, help="stop after this many events")
    t.add_argument("--idle-exit", type=float, default=None, help="stop after N idle seconds")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from confluent_kafka import KafkaException

    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        if args.command == "tail":
            return _tail(args)
        kind = ActionType.HALT if args.command == "halt" else ActionType.RESUME
        return _switch(args, kind)
    except ConfigError as exc:
        print(f"lagpilot control: {exc}", file=sys.stderr)
        return 2
    except PublishError as exc:
        print(f"lagpilot control: {exc}", file=sys.stderr)
        return 75 if exc.retriable else 1  # EX_TEMPFAIL: try again
    except KafkaException as exc:
        print(f"lagpilot control: Kafka client error: {exc}; check --bootstrap", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
