"""The broker settings as Quix Streams takes them: connection settings apart, the rest to
its clients (``LAGPILOT_KAFKA_<NAME>`` may name any librdkafka setting)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from quixstreams.kafka.configuration import ConnectionConfig

from pipeline.app import quix_connection

CONFIG = {
    "bootstrap.servers": "b1:9092,b2:9092",
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "lagpilot",
    "sasl.password": "secret",
    "ssl.ca.location": "/etc/ca.pem",
    "debug": "cgrp,fetch",
    "client.rack": "eu-1a",
}


def test_connection_settings_go_to_the_connection_the_rest_to_the_clients():
    connection, extra = quix_connection(CONFIG)
    assert connection.bootstrap_servers == "b1:9092,b2:9092"
    assert connection.security_protocol.upper() == "SASL_SSL"
    assert connection.sasl_mechanism == "SCRAM-SHA-512"
    assert connection.sasl_username == "lagpilot"
    assert connection.ssl_ca_location == "/etc/ca.pem"
    assert extra == {"debug": "cgrp,fetch", "client.rack": "eu-1a"}
    # nothing lost, nothing twice: the connection's librdkafka dict and the rest are the whole
    back = connection.as_librdkafka_dict()
    assert back.keys().isdisjoint(extra)
    assert {**back, **extra}.keys() >= CONFIG.keys()


def test_the_whole_config_as_a_connection_is_what_failed_at_start():
    with pytest.raises(ValidationError, match="debug"):
        ConnectionConfig.from_librdkafka_dict(CONFIG)


def test_a_plain_broker_config_has_nothing_extra():
    connection, extra = quix_connection({"bootstrap.servers": "localhost:9092"})
    assert connection.bootstrap_servers == "localhost:9092"
    assert extra == {}
