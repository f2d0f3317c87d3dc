"""The per-broker ListOffsets client's settings (pure; the broker tests run it for real)."""

from __future__ import annotations

from pipeline.read.list_offsets import kafka_python_config


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
