"""The raw client's settings, read from librdkafka's keys before any socket opens: each
mistake is a ConfigError naming the key to change."""

from __future__ import annotations

import ssl

import pytest

from pipeline.coordinator.connection import Security, security_settings, tls_context
from schemas.errors import ConfigError


def test_plaintext_by_default_and_tls_for_ssl() -> None:
    assert security_settings({}) == Security(False, None)
    assert security_settings({"security.protocol": "SSL"}) == Security(True, None)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "scram-sha-512"])
def test_sasl_mechanisms_lagpilot_logs_in_with(mechanism: str) -> None:
    got = security_settings({"security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
                             "sasl.username": "lp", "sasl.password": "pw"})  # fmt: skip
    assert got == Security(True, mechanism.upper(), "lp", "pw")


def test_librdkafkas_alias_sasl_mechanisms_is_read() -> None:
    got = security_settings({"security.protocol": "sasl_plaintext", "sasl.mechanisms": "PLAIN",
                             "sasl.username": "lp"})  # fmt: skip
    assert got.mechanism == "PLAIN" and not got.tls


@pytest.mark.parametrize("config", [
    {"security.protocol": "SASL_PLAINTEXT", "sasl.username": "lp"},  # librdkafka's GSSAPI
    {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "sasl.username": "lp"},
])  # fmt: skip
def test_another_mechanism_names_sasl_mechanism(config: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match=r"sasl\.mechanism=(GSSAPI|OAUTHBEARER): .*set "
                       r"sasl\.mechanism to one of them") as exc:  # fmt: skip
        security_settings(config)
    assert not exc.value.retriable


def test_a_missing_username_or_a_wrong_protocol_says_which_key() -> None:
    with pytest.raises(ConfigError, match=r"sasl\.username"):
        security_settings({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"})
    with pytest.raises(ConfigError, match=r"security\.protocol='tls'"):
        security_settings({"security.protocol": "TLS"})


def test_tls_verification_off_is_read_as_every_process_reads_booleans() -> None:
    off = tls_context({"enable.ssl.certificate.verification": "false"})
    assert off.verify_mode == ssl.CERT_NONE and not off.check_hostname
    on = tls_context({"enable.ssl.certificate.verification": "anything"})
    assert on.verify_mode == ssl.CERT_REQUIRED and on.check_hostname
