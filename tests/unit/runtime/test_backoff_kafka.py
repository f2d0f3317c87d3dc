"""One backoff and one Kafka error translator, for every retry loop and I/O edge."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from runtime.backoff import backoff_s, jittered_s
from runtime.kafka import (
    Fault,
    fault,
    is_denied,
    kafka_error,
    needs_a_person,
    waiting_may_fix,
)


def test_backoff_doubles_to_its_cap_and_scales_by_the_draw() -> None:
    assert [backoff_s(n, 0.25, 5.0) for n in range(7)] == [0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert backoff_s(3, 0.1, 2.0, unit=0.5) == pytest.approx(0.4)
    assert backoff_s(10**9, 0.1, 2.0) == 2.0  # a long outage does not overflow
    assert backoff_s(-1, 0.1, 2.0) == 0.1


@pytest.mark.parametrize(
    ("retry", "unit", "expected"),
    [
        (0, 0.0, 0.0),
        (0, 0.5, 0.05),
        (1, 0.5, 0.1),
        (3, 0.5, 0.4),
        (5, 0.5, 1.0),  # 0.1 * 32 = 3.2, capped at 2.0
        (60, 0.999, 1.998),  # large exponents stay capped
    ],
)
def test_backoff_is_full_jitter_under_an_exponential_cap(
    retry: int, unit: float, expected: float
) -> None:
    assert backoff_s(retry, 0.1, 2.0, unit) == pytest.approx(expected)


def test_full_jitter_stays_under_the_capped_schedule() -> None:
    draws = [jittered_s(4, 0.1, 1.0) for _ in range(200)]
    assert all(0.0 <= d < 1.0 for d in draws)
    assert max(draws) > 0.5 and min(draws) < 0.5  # spread over the range, not a constant


def test_the_translator_finds_the_kafka_error_wherever_it_is() -> None:
    err = KafkaError(KafkaError._TIMED_OUT)
    assert kafka_error(KafkaException(err)) is err
    assert kafka_error(err) is err

    class QuixError(Exception):
        def __init__(self, error: KafkaError) -> None:
            super().__init__("quix")
            self.error = error

    assert kafka_error(QuixError(err)) is err
    assert kafka_error(ValueError("not kafka")) is None


def test_waiting_may_fix_all_but_denied_and_fatal() -> None:
    def exc(code: int, fatal: bool = False) -> KafkaException:
        return KafkaException(KafkaError(code, fatal=fatal))

    assert waiting_may_fix(exc(KafkaError._TRANSPORT))
    assert waiting_may_fix(exc(KafkaError.UNKNOWN_TOPIC_OR_PART))
    assert not waiting_may_fix(exc(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    assert not waiting_may_fix(exc(KafkaError.SASL_AUTHENTICATION_FAILED))
    assert not waiting_may_fix(exc(KafkaError._FENCED, fatal=True))
    assert waiting_may_fix(OSError("not kafka: assumed transient"))


def test_denied_is_an_acl_and_a_failed_login_needs_a_person_too() -> None:
    denied = KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED)
    login = KafkaError(KafkaError.UNSUPPORTED_SASL_MECHANISM)
    assert is_denied(denied) and is_denied(KafkaException(denied))
    assert not is_denied(login) and not is_denied(ValueError("x"))
    assert needs_a_person(denied) and needs_a_person(login)
    assert needs_a_person(KafkaError(KafkaError._FENCED, fatal=True))
    assert not needs_a_person(KafkaError(KafkaError._TRANSPORT))
    assert not waiting_may_fix(KafkaException(login))  # the CLI's exit 77 and the loops agree


def test_one_fault_for_both_clients_and_for_what_is_neither() -> None:
    import kafka.errors as kafka_python

    timed_out = KafkaException(KafkaError(KafkaError.REQUEST_TIMED_OUT, retriable=True))
    assert fault(timed_out) == Fault("Broker: Request timed out", "REQUEST_TIMED_OUT", True)
    fatal = fault(KafkaError(KafkaError._FENCED, fatal=True))
    assert (fatal.code, fatal.retriable, fatal.fatal) == ("_FENCED", False, True)
    moving = fault(kafka_python.NotLeaderForPartitionError())
    assert (moving.code, moving.retriable) == (6, True)
    denied = fault(kafka_python.ClusterAuthorizationFailedError())
    assert (denied.code, denied.retriable) == (31, False)
    assert fault(kafka_python.KafkaTimeoutError("x")) == Fault("KafkaTimeoutError: x", None, True)
    assert fault(OSError("socket closed")) == Fault("socket closed", None, True)
