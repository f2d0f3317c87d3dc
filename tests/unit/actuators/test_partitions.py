"""The partitions backend's pure parts: idempotent leadership moves, translated errors."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from actuators.errors import ActuatorError, from_kafka
from actuators.partitions import leadership_noop


def test_a_move_to_the_current_leader_is_a_noop_with_a_reason() -> None:
    assert "already leads" in (leadership_noop("t", 0, 2, [1, 2, 3], 2) or "")


def test_a_move_to_another_replica_must_be_done() -> None:
    assert leadership_noop("t", 0, 1, [1, 2, 3], 2) is None
    assert leadership_noop("t", 0, None, [1, 2, 3], 2) is None  # leaderless: elect it


def test_a_move_to_a_non_replica_is_refused_for_good_naming_the_replicas() -> None:
    with pytest.raises(ActuatorError) as caught:
        leadership_noop("t", 0, 1, [1, 2], 5)
    assert caught.value.retriable is False
    assert "[1, 2]" in str(caught.value) and "pick a target among the replicas" in str(caught.value)


def test_librdkafka_errors_keep_their_code_and_retriability() -> None:
    e = from_kafka(
        "CreatePartitions t -> 8",
        KafkaException(KafkaError(KafkaError.REQUEST_TIMED_OUT, retriable=True)),
    )
    assert (e.code, e.retriable) == ("REQUEST_TIMED_OUT", True)
    e = from_kafka(
        "metadata for t", KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    )
    assert (e.code, e.retriable) == ("TOPIC_AUTHORIZATION_FAILED", False)
    assert e.message.startswith("metadata for t: ")
    e = from_kafka("metadata for t", RuntimeError("socket closed"))
    assert e.code is None and e.retriable is True  # not a broker verdict: worth a retry


def test_kafka_python_errors_keep_their_errno_and_retriability() -> None:
    import kafka.errors as kafka_python

    e = from_kafka("move leadership of t/0 to 2", kafka_python.NotLeaderForPartitionError())
    assert (e.code, e.retriable) == (6, True)
    assert e.message == "move leadership of t/0 to 2: [Error 6] NotLeaderForPartitionError"
    e = from_kafka("AlterClientQuotas", kafka_python.KafkaTimeoutError("x"), hint="is it up?")
    assert (e.code, e.retriable) == (None, True)
    # the outcome has no hint field: the hint ends its message
    assert e.as_outcome_error() == {"message": "AlterClientQuotas: KafkaTimeoutError: x; is it up?",
                                    "code": None, "retriable": True}  # fmt: skip
