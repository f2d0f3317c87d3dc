"""One translator of librdkafka's exceptions, at the I/O edge of every process.

librdkafka raises ``KafkaException(KafkaError)``; Quix Streams' exceptions carry the
``KafkaError`` as ``.error``; some calls hand back the ``KafkaError`` itself. ``kafka_error``
finds it in each; ``waiting_may_fix`` is the rule the long-running loops retry on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException


def kafka_error(exc: BaseException | KafkaError) -> KafkaError | None:
    """The ``KafkaError`` behind ``exc``, or None when it is not a Kafka client's error."""
    if isinstance(exc, KafkaError):
        return exc
    err: Any = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    err = getattr(exc, "error", err)  # quixstreams' Kafka exceptions carry .error
    return err if isinstance(err, KafkaError) else None


def is_denied(err: KafkaError) -> bool:
    """Authorization or authentication failed: a person must change an ACL or a secret."""
    name = str(err.name()).lower()
    return "authoriz" in name or "authentic" in name


def waiting_may_fix(exc: BaseException | KafkaError) -> bool:
    """Whether retrying later may succeed: everything but fatal, authorization and
    authentication errors (those need a person); a non-Kafka error is assumed transient."""
    err = kafka_error(exc)
    if err is None or err.retriable():
        return True
    return not (err.fatal() or is_denied(err))


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
