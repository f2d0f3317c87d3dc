"""One env coercer for both sides: the same words mean the same thing everywhere."""

from __future__ import annotations

import pytest

from actuators.settings import from_env
from pipeline.settings import load_settings
from schemas import ConfigError
from schemas.runtime.env import parse_bool, parse_bool_or_path, parse_float, parse_int, parse_list


@pytest.mark.parametrize("raw", ["1", "true", "YES", " on "])
def test_true_words(raw: str) -> None:
    assert parse_bool("K", raw) is True and parse_bool_or_path("K", raw) is True


@pytest.mark.parametrize("raw", ["0", "False", "no", "OFF"])
def test_false_words(raw: str) -> None:
    assert parse_bool("K", raw) is False and parse_bool_or_path("K", raw) is False


def test_a_path_is_a_path_and_empty_is_the_safe_default() -> None:
    assert parse_bool_or_path("K", "/etc/ca.pem") == "/etc/ca.pem"
    assert parse_bool_or_path("K", "") is True


def test_errors_name_the_variable_and_are_config_errors() -> None:
    for parse, raw in ((parse_bool, "maybe"), (parse_int, "1.5"), (parse_float, "fast")):
        with pytest.raises(ConfigError, match=r"^LAGPILOT_X='") as caught:
            parse("LAGPILOT_X", raw)
        assert caught.value.retriable is False
    assert parse_int("K", "42") == 42 and parse_float("K", "0.5") == 0.5
    assert parse_list(" a, ,b ,") == ("a", "b")


def test_tls_verify_off_turns_verification_off_in_the_actuator_as_in_the_pipeline() -> None:
    """The drift this module ended: ``off`` was read by the actuator as a CA file path."""
    assert (
        from_env({"LAGPILOT_REDPANDA_ADMIN_TLS_VERIFY": "off"}).redpanda_admin_tls_verify is False
    )
    assert from_env(
        {"LAGPILOT_REDPANDA_ADMIN_TLS_VERIFY": "/ca.pem"}
    ).redpanda_admin_tls_verify == ("/ca.pem")


def test_both_sides_reject_the_same_bad_boolean() -> None:
    with pytest.raises(ConfigError, match="LAGPILOT_"):
        load_settings({"LAGPILOT_RUN_POLICY": "maybe"})
