"""Publish signed actions to the control topic: build an operator's action
(``control_action``) and send events signed, schema-checked and keyed by their target
(``publish_actions``), so a halt and its resume land on one partition and are read in order.
``lagpilot control`` (``pipeline.commands.control``) and the MCP server publish through it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from pipeline.decide.state import CONTROL_TTL_MS, build_action
from schemas import (
    ActionType,
    ConfigError,
    Mode,
    Signer,
    encode,
    sign,
    validate,
)
from schemas.errors import LagpilotError
from schemas.halts import halt_params, halt_scope
from schemas.topics import CONTROL

log = logging.getLogger("lagpilot.control")
OPERATOR_POLICY_VERSION = "operator"


class ProducerLike(Protocol):
    """What ``publish_actions`` needs of a producer (confluent_kafka.Producer fits)."""

    def produce(self, topic: str, value: bytes, key: bytes, on_delivery: Any) -> None: ...
    def poll(self, timeout: float) -> int: ...
    def flush(self, timeout: float) -> int: ...


class PublishError(LagpilotError, RuntimeError):
    """Actions could not be delivered to the control topic.

    ``retriable`` is the broker's verdict on the first failure (e.g. a leader election is
    retriable, an authorization failure is not).
    """

    def __init__(self, message: str, retriable: bool, denied: bool = False) -> None:
        super().__init__(message, retriable=retriable)
        self.denied = denied  # an ACL refused the write: exit 77, not "try again"


def control_action(
    kind: ActionType, scope: str, *, now_ms: int, reason: str, group: str | None = None
) -> dict[str, Any]:
    """An unsigned halt or resume for ``scope`` (``actions`` or ``workload``, optionally of
    one ``group``; the older ``all`` and ``<group>`` are read as ``actions``).

    Its id is new for every press of the switch (the window is the time it was issued); it
    holds until the opposite event, so ``expires_at`` is a year out.
    """
    if kind not in (ActionType.HALT, ActionType.RESUME):
        raise ValueError(f"control_action builds halt or resume, not {kind!r}")
    if not scope:
        raise ConfigError("--scope: must be actions or workload; pass e.g. --scope actions")
    try:
        params = halt_params(scope, group)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return build_action(
        kind,
        f"scope:{halt_scope(params).state_key}",
        params,
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
    key: Signer,
    *,
    topic: str = CONTROL,
    timeout_s: float = 10.0,
    key_of: Any = None,
) -> list[dict[str, Any]]:
    """Sign, validate and produce ``actions`` keyed by their target; wait for delivery.

    ``key`` is the operator's role key (or, until the migration is done, the shared key).
    Returns the signed events as sent. An action that fails its schema raises ``EventError``
    before anything is produced (a bug in the caller, never retriable); a delivery failure
    raises ``PublishError``.
    """
    signed = [sign(a, key) for a in actions]
    for event in signed:
        validate(event)
    failures: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(err)

    for event in signed:
        k = key_of(event) if key_of is not None else event["target"]
        producer.produce(topic, encode(event), k.encode(), on_delivery=delivered)
        producer.poll(0)
    left = producer.flush(timeout_s)
    if failures:
        from runtime.kafka import fault, is_denied

        err = failures[0]  # librdkafka's KafkaError, as the delivery callback hands it over
        found = fault(err)
        retriable, name = found.retriable, found.code
        denied = is_denied(err) or "authorization failed" in found.message.lower()
        fix = (
            f"grant lagpilot's principal WRITE on {topic} (docs/runbook.md lists the ACLs)"
            if denied
            else "check the broker and the topic's ACLs"
        )
        raise PublishError(
            f"{len(failures)} of {len(signed)} actions not delivered to {topic} ({name}); {fix}",
            retriable,
            denied,
        )
    if left:
        raise PublishError(
            f"{left} actions still queued after {timeout_s:g} s; is the broker reachable?",
            True,
        )
    return signed
