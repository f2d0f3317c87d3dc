"""One backoff and one Kafka error translator, for every retry loop and I/O edge."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from schemas.runtime.backoff import backoff_s, jittered_s
from schemas.runtime.kafka import kafka_error, waiting_may_fix


def test_backoff_doubles_to_its_cap_and_scales_by_the_draw() -> None:
    assert [backoff_s(n, 0.25, 5.0) for n in range(7)] == [0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert backoff_s(3, 0.1, 2.0, unit=0.5) == pytest.approx(0.4)
    assert backoff_s(10**9, 0.1, 2.0) == 2.0  # a long outage does not overflow
    assert backoff_s(-1, 0.1, 2.0) == 0.1


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
