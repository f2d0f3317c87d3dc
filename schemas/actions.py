"""Action events on ``lagpilot.control`` and outcome events on ``lagpilot.outcomes``.

An action is a plain dict on the wire (JSON Schema ``action.v1.json``); these types name its
vocabulary. ``issued_at`` and ``expires_at`` are epoch milliseconds.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, TypedDict


class Mode(StrEnum):
    OBSERVE = "observe"  # decide and log, publish nothing
    RECOMMEND = "recommend"  # publish actions marked as recommendations; never applied
    ACT = "act"  # publish actions that actuators apply


class ActionType(StrEnum):
    THROTTLE_PRODUCER = "throttle_producer"
    RELEASE_PRODUCER = "release_producer"
    TRANSFER_LEADERSHIP = "transfer_leadership"
    ADD_PARTITIONS = "add_partitions"
    SPREAD_PARTITION = "spread_partition"
    RESTORE_PARTITION = "restore_partition"
    SCALE_CONSUMERS = "scale_consumers"
    HALT = "halt"
    RESUME = "resume"


#: Actions the worker SDK obeys; the broker-side actuator delegates them (outcome
#: ``delegated``) and the workers report what they did (``worker_outcome``).
WORKER_ACTIONS = frozenset(
    {ActionType.SPREAD_PARTITION, ActionType.RESTORE_PARTITION, ActionType.HALT, ActionType.RESUME}
)


class OutcomeResult(StrEnum):
    APPLIED = "applied"
    DUPLICATE = "duplicate"
    REJECTED = "rejected"
    FAILED = "failed"
    EXPIRED = "expired"
    RECORDED = "recorded"  # a recommendation, or an action for another actuator: not applied
    RELEASED = "released"  # a throttle lease ended and the quota was removed
    DELEGATED = "delegated"  # a worker action, left to the SDK workers: see their worker_outcome


class Action(TypedDict):
    event: str  # "action"
    v: int  # 1
    id: str  # idempotency key: stable hash of type, target and decision window
    type: str  # ActionType
    target: str  # e.g. "client-id:agent-7", "topic:orders/3", "group:workers"
    params: dict[str, Any]
    reason: dict[str, Any]
    mode: str  # Mode
    issued_at: int
    expires_at: int
    policy_version: str
    signature: str


class Outcome(TypedDict, total=False):
    event: str  # "outcome"
    v: int  # 1
    action_id: str
    action_type: str
    target: str
    result: str  # OutcomeResult
    reason: str  # why rejected / what was done
    error: dict[str, Any]  # {"message", "code", "retriable"} when failed
    actuator: str
    at: int  # epoch ms
    lease_expires_at: int  # throttles: when the quota is released unless renewed
    params: dict[str, Any]
