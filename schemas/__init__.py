"""lagpilot's event contract: typed values, JSON Schemas, and their codec.

``pipeline`` and ``actuators`` share only this package and the topics it names.
"""

from schemas.actions import WORKER_ACTIONS, Action, ActionType, Mode, Outcome, OutcomeResult
from schemas.codec import (
    ConfigError,
    EventError,
    EventSigner,
    EventVerifier,
    SharedKey,
    Signer,
    Verifier,
    canonical,
    decode,
    encode,
    load_signing_key,
    sign,
    stable_id,
    to_dict,
    validate,
    verify,
)
from schemas.keys import (
    Keyring,
    SigningKey,
    load_signer,
    load_verifier,
)
from schemas.lag import (
    SEVERITY,
    GroupLag,
    LagStatus,
    PartitionLag,
    WorstPartition,
    group_lag_from_dict,
)
from schemas.offsets import (
    CoordinatorRecord,
    GroupMember,
    GroupMetadata,
    GroupRemoved,
    OffsetCommit,
    OffsetDeleted,
    TopicAssignment,
)
from schemas.producers import ProducerRate
from schemas.watermarks import Watermarks

__all__ = [
    "SEVERITY",
    "WORKER_ACTIONS",
    "Action",
    "ActionType",
    "ConfigError",
    "CoordinatorRecord",
    "EventError",
    "EventSigner",
    "EventVerifier",
    "GroupLag",
    "GroupMember",
    "GroupMetadata",
    "GroupRemoved",
    "Keyring",
    "LagStatus",
    "Mode",
    "OffsetCommit",
    "OffsetDeleted",
    "Outcome",
    "OutcomeResult",
    "PartitionLag",
    "ProducerRate",
    "SharedKey",
    "Signer",
    "SigningKey",
    "TopicAssignment",
    "Verifier",
    "Watermarks",
    "WorstPartition",
    "canonical",
    "decode",
    "encode",
    "group_lag_from_dict",
    "load_signer",
    "load_signing_key",
    "load_verifier",
    "sign",
    "stable_id",
    "to_dict",
    "validate",
    "verify",
]
