"""The per-broker ListOffsets way's pure parts: its client settings, the requests grouped by
leader, answers read per partition (the broker tests run it for real)."""

from __future__ import annotations

import struct
from typing import Any

import kafka.errors as kp_errors
import pytest
from kafka.future import Future
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

from pipeline.read.list_offsets import (
    READ_COMMITTED,
    Answer,
    build_request,
    group_by_leader,
    kafka_python_config,
    read_response,
    settle,
)
from pipeline.read.sampling import TOPOLOGY_ERRORS


def test_tls_and_sasl_settings_translate_to_kafka_python() -> None:
    config = {
        "bootstrap.servers": "b1:9092,b2:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "lagpilot",
        "sasl.password": "pw",
        "ssl.ca.location": "/etc/ca.pem",
        "client.id": "lagpilot-sampler",
        "linger.ms": 5,  # a producer setting: nothing to do with offsets, left out
    }
    assert kafka_python_config(config) == {
        "bootstrap_servers": "b1:9092,b2:9092",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "lagpilot",
        "sasl_plain_password": "pw",
        "ssl_cafile": "/etc/ca.pem",
        "client_id": "lagpilot-sampler",
    }


def test_a_security_setting_kafka_python_lacks_keeps_the_sampler_on_the_admin_client() -> None:
    # never sample with half of the user's security settings honoured
    config = {"bootstrap.servers": "b:9092", "sasl.oauthbearer.config": "scope=x"}
    assert kafka_python_config(config) is None


# -- grouping by leader, the requests


def test_partitions_are_grouped_by_their_leader_and_leaderless_ones_apart() -> None:
    watched = {"a": (1, 2, 1), "b": (2,), "c": (-1, 1)}
    assert group_by_leader(watched) == {
        1: {"a": [0, 2], "c": [1]},
        2: {"a": [1], "b": [0]},
        -1: {"c": [0]},
    }
    assert group_by_leader({}) == {}


@pytest.mark.parametrize("version", [1, 5, 10])  # v6+ is flexible (compact, tagged fields)
def test_a_request_encoded_once_is_the_bytes_kafka_python_encodes_each_time(version: int) -> None:
    topics = {"orders": [0, 2, 5], "o" * 200: list(range(40))}
    once = build_request(topics)
    plain = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=[
            (t, [(p, -1, -1) if version >= 4 else (p, -1) for p in ps]) for t, ps in topics.items()
        ],
    )
    for correlation_id in (1, 2, 2**31 - 1):  # the body is kept, the header is new each time
        for request in (once, plain):
            request.API_VERSION = version
            request.with_header(correlation_id=correlation_id, client_id="lagpilot-sampler")
        sent = once.encode(framed=True, header=True)
        assert sent == plain.encode(framed=True, header=True)
        assert struct.unpack(">i", sent[:4])[0] == len(sent) - 4
    assert once.encode(version=version) == plain.encode(version=version)


def test_a_request_says_the_latest_offset_read_uncommitted_without_fencing() -> None:
    request = build_request({"t": [3]})
    assert (request.replica_id, request.isolation_level) == (-1, 0)
    assert request._min_version == 1  # (v0 answers with a list of offsets)
    stable = build_request({"t": [3]}, READ_COMMITTED)  # the last stable offset: v2 at least
    assert (stable.isolation_level, stable._min_version) == (1, 2)
    (topic,) = request.topics
    (partition,) = topic.partitions
    assert (topic.name, partition.partition_index) == ("t", 3)
    assert (partition.timestamp, partition.current_leader_epoch) == (-1, -1)


# -- reading an answer per partition


def _response(topics: dict[str, list[tuple[int, int, int]]], version: int = 5) -> Any:
    """A ListOffsets response as it comes off the wire: kafka-python's bytes, decoded."""
    t = ListOffsetsResponse.ListOffsetsTopicResponse
    p = t.ListOffsetsPartitionResponse
    response = ListOffsetsResponse(
        throttle_time_ms=0,
        topics=[
            t(
                name=name,
                partitions=[
                    p(partition_index=i, error_code=code, timestamp=-1, offset=offset,
                      leader_epoch=0)
                    for i, code, offset in parts
                ],
            )
            for name, parts in topics.items()
        ],
    )  # fmt: skip
    return ListOffsetsResponse.decode(response.encode(version=version), version=version)


def test_a_partition_with_an_error_is_minus_one_alone_and_counted_by_kind() -> None:
    answer = Answer.empty({"a": 3, "b": 2})
    response = _response({"a": [(0, 0, 10), (1, 3, -1), (2, 0, 30)], "b": [(0, 6, -1), (1, 0, 7)]})
    assert read_response(response.topics, answer) == 5
    assert answer.hwms == {"a": [10, -1, 30], "b": [-1, 7]}
    assert answer.failed == {"unknown_topic_or_part": 1, "not_leader_for_partition": 1}
    assert answer.answered == 3
    assert isinstance(answer.first_error, kp_errors.UnknownTopicOrPartitionError)
    # both kinds mean the topology moved: the sampler re-reads metadata at its next tick
    assert set(answer.failed) <= TOPOLOGY_ERRORS


def test_an_answer_for_a_partition_not_watched_is_ignored() -> None:
    answer = Answer.empty({"a": 1})
    assert read_response(_response({"a": [(0, 0, 4), (1, 0, 9)], "x": [(0, 0, 1)]}).topics, answer)
    assert answer.hwms == {"a": [4]} and answer.answered == 1 and not answer.failed


def _done(value: Any = None, exc: BaseException | None = None) -> Future:
    future = Future()
    return future.failure(exc) if exc is not None else future.success(value)


def test_each_broker_settles_its_own_partitions() -> None:
    """Requests are keyed by (leader, isolation level): broker 1 also answers the last
    stable offsets of ``s``, in a request of their own."""
    answer = Answer.empty({"a": 4, "b": 1, "s": 2})
    sent = {
        (1, 0): (_done(_response({"a": [(0, 0, 5), (2, 0, 6)]})), 3),  # asked 3, answered 2
        (1, 1): (_done(_response({"s": [(0, 0, 7), (1, 0, 8)]})), 2),
        (2, 0): (Future(), 1),  # no answer yet: late
        (3, 0): (_done(exc=kp_errors.KafkaConnectionError("refused")), 1),
    }
    assert settle(answer, sent) == [(2, 0)]
    assert answer.hwms == {"a": [5, -1, 6, -1], "b": [-1], "s": [7, 8]}
    assert answer.failed == {"not_in_response": 1, "timed_out": 1, "_transport": 1}
    assert (answer.answered, answer.brokers_answered) == (4, 2)
    assert isinstance(answer.first_error, TimeoutError)
    assert "broker 2 did not answer" in str(answer.first_error)


def test_counting_nothing_counts_nothing() -> None:
    answer = Answer.empty({})
    answer.count("timed_out", 0, TimeoutError())
    assert answer.failed == {} and answer.first_error is None
