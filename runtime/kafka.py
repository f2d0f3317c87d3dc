"""One translator of Kafka clients' exceptions, at the I/O edge of every process.

librdkafka raises ``KafkaException(KafkaError)``; Quix Streams' exceptions carry the
``KafkaError`` as ``.error``; some calls hand back the ``KafkaError`` itself; kafka-python
(the actuator's quota and reassignment calls, the sampler's ListOffsets) raises its own
``kafka.errors.KafkaError`` with ``errno`` and ``retriable``. ``kafka_error`` finds
librdkafka's error in each; ``fault`` says what any of them means (message, code,
retriable, fatal); ``is_denied`` and ``needs_a_person`` name the errors no retry fixes;
``waiting_may_fix`` is the rule the long-running loops retry on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException


def kafka_error(exc: BaseException | KafkaError) -> KafkaError | None:
    """The ``KafkaError`` behind ``exc``, or None when it is not a Kafka client's error."""
    if isinstance(exc, KafkaError):
        return exc
    err: Any = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    err = getattr(exc, "error", err)  # quixstreams' Kafka exceptions carry .error
    return err if isinstance(err, KafkaError) else None


#: librdkafka's names for an ACL denial: the principal lacks a permission
DENIED = frozenset({"TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED",
                    "CLUSTER_AUTHORIZATION_FAILED", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
                    "DELEGATION_TOKEN_AUTHORIZATION_FAILED"})  # fmt: skip
#: librdkafka's names for a failed login: wrong secret, mechanism or listener
AUTH_FAILED = frozenset({"_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED",
                         "UNSUPPORTED_SASL_MECHANISM", "ILLEGAL_SASL_STATE"})  # fmt: skip


def _name(err: Any) -> str:
    """librdkafka's name of an error, exception or ``KafkaError``; "" for anything else."""
    found = kafka_error(err) if isinstance(err, BaseException | KafkaError) else None
    return str(found.name()) if found is not None else ""


def is_denied(err: BaseException | KafkaError) -> bool:
    """An ACL denial: a person must grant lagpilot's principal a permission."""
    return _name(err) in DENIED


def needs_a_person(err: BaseException | KafkaError) -> bool:
    """Fatal, denied, or a failed login: waiting fixes none of them."""
    found = kafka_error(err)
    if found is None:
        return False
    return bool(found.fatal()) or _name(found) in DENIED | AUTH_FAILED


def waiting_may_fix(exc: BaseException | KafkaError) -> bool:
    """Whether retrying later may succeed: everything but fatal, authorization and
    authentication errors (those need a person); a non-Kafka error is assumed transient."""
    err = kafka_error(exc)
    if err is None or err.retriable():
        return True
    return not needs_a_person(err)


@dataclass(frozen=True, slots=True)
class Fault:
    """What a Kafka client's exception says, whichever client raised it."""

    message: str
    code: int | str | None  # librdkafka's error name, or kafka-python's errno
    retriable: bool
    fatal: bool = False


def fault(exc: BaseException | KafkaError) -> Fault:
    """The one translation of a Kafka client's error: librdkafka's flags as they are,
    kafka-python's ``retriable`` and ``errno``; any other exception (a socket closed under
    the call) is not a broker's verdict, and assumed worth a retry."""
    err = kafka_error(exc)
    if err is not None:
        return Fault(str(err.str()), str(err.name()), bool(err.retriable()), bool(err.fatal()))
    from kafka import errors as kafka_python_errors

    if isinstance(exc, kafka_python_errors.KafkaError):
        code = getattr(exc, "errno", None)  # broker errors have one; client-side ones do not
        return Fault(str(exc), code, bool(exc.retriable))
    return Fault(str(exc), None, True)


#: librdkafka setting -> kafka-python keyword, for the TLS/SASL settings both clients know
KAFKA_PYTHON_NAMES = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
}


def kafka_python_unsupported(config: Mapping[str, Any]) -> list[str]:
    """The TLS/SASL settings of a librdkafka config that kafka-python cannot honour."""
    return sorted(
        k
        for k in config
        if k not in KAFKA_PYTHON_NAMES and k.startswith(("ssl.", "sasl.", "security."))
    )
