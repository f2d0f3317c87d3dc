"""The partitions backend: idempotent partition growth and leadership moves, and the Kafka
clients' errors translated at the edge (PartitionAdmin on fakes of its admin clients)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from kafka.errors import (
    ClusterAuthorizationFailedError,
    ElectionNotNeededError,
    NotControllerError,
    PreferredLeaderNotAvailableError,
)

from actuators.errors import ActuatorError, from_kafka
from actuators.partitions import PartitionAdmin, leadership_noop


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


# -- PartitionAdmin on fakes of its two admin clients -----------------------------------------


class _Part:
    def __init__(self, pid: int, leader: int, replicas: list[int]) -> None:
        self.id, self.leader, self.replicas = pid, leader, replicas


class _Topic:
    def __init__(self, parts: dict[int, tuple[int, list[int]]], error: Any = None) -> None:
        self.partitions = {p: _Part(p, lead, reps) for p, (lead, reps) in parts.items()}
        self.error = error


class _Future:
    def __init__(self, exc: BaseException | None = None) -> None:
        self.exc = exc

    def result(self, timeout: float = 0) -> None:
        if self.exc is not None:
            raise self.exc


class FakeAdmin:
    """confluent_kafka's AdminClient: metadata and CreatePartitions."""

    def __init__(self, topics: dict[str, _Topic], fail: BaseException | None = None) -> None:
        self.topics, self.fail, self.created = topics, fail, []

    def list_topics(self, topic: str, timeout: float) -> Any:
        return SimpleNamespace(topics={t: v for t, v in self.topics.items() if t == topic})

    def create_partitions(self, new: list[Any], request_timeout: float) -> dict[str, _Future]:
        self.created += [(n.topic, n.new_total_count) for n in new]
        return {n.topic: _Future(self.fail) for n in new}


class FakeKpAdmin:
    """kafka-python's KafkaAdminClient: reassignments and elections, answers in turn."""

    def __init__(self, elections: list[int], reassign_error: Any = None) -> None:
        self.elections, self.reassign_error = list(elections), reassign_error
        self.reassigned: list[list[int]] = []
        self.elected = 0

    def alter_partition_reassignments(self, moves: dict[Any, list[int]]) -> dict[Any, Any]:
        self.reassigned += list(moves.values())
        return {tp: self.reassign_error for tp in moves}

    def elect_leaders(self, kind: int, parts: Any, raise_errors: bool) -> Any:
        self.elected += 1
        code = self.elections.pop(0) if len(self.elections) > 1 else self.elections[0]
        result = SimpleNamespace(partition_result=[SimpleNamespace(error_code=code)])
        return SimpleNamespace(replica_election_results=[result])


def _admin(topics: dict[str, _Topic], **fakes: Any) -> PartitionAdmin:
    admin = PartitionAdmin("127.0.0.1:1", client_id="unit", timeout_s=0.3)
    admin._admin = fakes.get("admin") or FakeAdmin(topics)
    admin._kp_admin = fakes.get("kp")
    return admin


def test_add_partitions_grows_a_topic_once_and_then_changes_nothing() -> None:
    fake = FakeAdmin({"t": _Topic({0: (1, [1]), 1: (1, [1])})})
    admin = _admin({}, admin=fake)
    assert admin.add_partitions("t", 4) == "t: 2 -> 4 partitions"
    assert fake.created == [("t", 4)]
    assert "already has 2 partitions" in admin.add_partitions("t", 2)  # a replay: a no-op
    assert fake.created == [("t", 4)]


class StaleAdmin(FakeAdmin):
    """Metadata that lags the controller: the first ``stale`` reads still show the old count,
    and CreatePartitions answers INVALID_PARTITIONS since the topic already has it."""

    def __init__(self, old: _Topic, new: _Topic, stale: int) -> None:
        refused = KafkaException(KafkaError(KafkaError.INVALID_PARTITIONS, "has 3, equal to 3"))
        super().__init__({"t": old}, fail=refused)
        self.new, self.stale = new, stale

    def list_topics(self, topic: str, timeout: float) -> Any:
        self.stale -= 1
        return SimpleNamespace(topics={"t": self.new if self.stale < 0 else self.topics["t"]})


def test_a_replay_on_stale_metadata_is_a_noop_once_the_metadata_agrees() -> None:
    """The broker test's race: a replay read the old count, asked again, and was refused."""
    old, grown = _Topic({0: (1, [1])}), _Topic({p: (1, [1]) for p in range(3)})
    admin = _admin({}, admin=StaleAdmin(old, grown, stale=2))
    assert "already has 3 partitions" in admin.add_partitions("t", 3)
    never = _admin({}, admin=StaleAdmin(old, grown, stale=10**6))  # the count is wrong for good
    with pytest.raises(ActuatorError) as caught:
        never.add_partitions("t", 3)
    assert (caught.value.code, caught.value.retriable) == ("INVALID_PARTITIONS", False)


def test_a_refused_create_partitions_keeps_the_brokers_verdict() -> None:
    refused = KafkaException(KafkaError(KafkaError.POLICY_VIOLATION))
    admin = _admin({}, admin=FakeAdmin({"t": _Topic({0: (1, [1])})}, fail=refused))
    with pytest.raises(ActuatorError) as caught:
        admin.add_partitions("t", 3)
    assert (caught.value.code, caught.value.retriable) == ("POLICY_VIOLATION", False)
    assert caught.value.message.startswith("CreatePartitions t -> 3: ")


def test_a_missing_topic_is_final_and_named() -> None:
    denied = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
    admin = _admin({"gone": _Topic({}, error=denied)})
    for topic in ("gone", "never"):
        with pytest.raises(ActuatorError, match=f"topic '{topic}' not found") as caught:
            admin.add_partitions(topic, 3)
        assert caught.value.retriable is False


def test_leadership_moves_by_reordering_the_replicas_then_a_preferred_election() -> None:
    kp = FakeKpAdmin(elections=[0])
    admin = _admin({"t": _Topic({0: (1, [1, 2, 3])})}, kp=kp)
    assert admin.transfer_leadership("t", 0, 3) == "t/0: leader 1 -> 3 (replicas [3, 1, 2])"
    assert kp.reassigned == [[3, 1, 2]] and kp.elected == 1
    kp = FakeKpAdmin(elections=[ElectionNotNeededError.errno])
    admin = _admin({"t": _Topic({0: (2, [3, 2])})}, kp=kp)  # 3 is already preferred
    assert "leader 2 -> 3" in admin.transfer_leadership("t", 0, 3)
    assert kp.reassigned == [] and kp.elected == 1
    assert "already leads" in _admin({"t": _Topic({0: (3, [3, 2])})}).transfer_leadership("t", 0, 3)


def test_an_election_waits_for_the_new_order_but_not_past_its_deadline() -> None:
    wait = PreferredLeaderNotAvailableError.errno
    kp = FakeKpAdmin(elections=[wait, wait, 0])
    admin = _admin({"t": _Topic({0: (1, [1, 2])})}, kp=kp)
    assert "leader 1 -> 2" in admin.transfer_leadership("t", 0, 2)
    assert kp.elected == 3
    stuck = _admin({"t": _Topic({0: (1, [1, 2])})}, kp=FakeKpAdmin(elections=[wait]))
    with pytest.raises(ActuatorError, match="after 0 s; the target may be out of sync") as e:
        stuck.transfer_leadership("t", 0, 2)
    assert e.value.retriable is True  # the runner's retry budget decides what comes next


def test_another_retriable_election_error_goes_to_the_runner_at_once() -> None:
    """Not a second retry loop under the runner's: only the propagation wait repeats."""
    kp = FakeKpAdmin(elections=[NotControllerError.errno, 0])
    admin = _admin({"t": _Topic({0: (1, [1, 2])})}, kp=kp)
    with pytest.raises(ActuatorError) as caught:
        admin.transfer_leadership("t", 0, 2)
    assert (caught.value.code, caught.value.retriable) == (NotControllerError.errno, True)
    assert kp.elected == 1


def test_a_refused_election_or_reassignment_is_final_with_its_code() -> None:
    denied = ClusterAuthorizationFailedError.errno
    admin = _admin({"t": _Topic({0: (1, [1, 2])})}, kp=FakeKpAdmin(elections=[denied]))
    with pytest.raises(ActuatorError) as caught:
        admin.transfer_leadership("t", 0, 2)
    assert (caught.value.code, caught.value.retriable) == (denied, False)
    kp = FakeKpAdmin(elections=[0], reassign_error=ClusterAuthorizationFailedError)
    with pytest.raises(ActuatorError, match="AlterPartitionReassignments") as caught:
        _admin({"t": _Topic({0: (1, [1, 2])})}, kp=kp).transfer_leadership("t", 0, 2)
    assert caught.value.retriable is False and kp.elected == 0
    with pytest.raises(ActuatorError, match="does not exist"):
        _admin({"t": _Topic({0: (1, [1, 2])})}).transfer_leadership("t", 5, 2)
