"""One env coercer for both sides: the same words mean the same thing everywhere."""

from __future__ import annotations

import pytest

from actuators.settings import from_env
from pipeline.settings import load_settings
from runtime.env import (
    coerce,
    parse_bool,
    parse_bool_or_path,
    parse_float,
    parse_int,
    parse_list,
)
from schemas import ConfigError


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


@pytest.mark.parametrize(
    ("typ", "raw", "value"),
    [
        (bool, "off", False),
        ("bool", "Yes", True),
        ("bool | str", "/etc/ca.pem", "/etc/ca.pem"),
        ("bool | str", "0", False),
        (int, "42", 42),
        ("float", "0.25", 0.25),
        ("tuple[str, ...]", " a, ,b ", ("a", "b")),
        ("str | None", "x", "x"),
        (str, "x", "x"),
    ],
)
def test_one_coercer_reads_each_type_by_the_type_or_its_name(
    typ: object, raw: str, value: object
) -> None:
    """The settings dataclasses name their types as strings (``from __future__ import
    annotations``); the CLI's options pass the types themselves: both land here."""
    assert coerce("LAGPILOT_X", typ, raw) == value  # type: ignore[arg-type]


def test_the_cli_reads_booleans_as_the_settings_do(monkeypatch: pytest.MonkeyPatch) -> None:
    from runtime.cli import Parser

    p = Parser(prog="t")
    p.option("--flag", env="LAGPILOT_FLAG", default=False, type=bool, action="store_true")
    monkeypatch.setenv("LAGPILOT_FLAG", "off")
    assert p.parse_args([]).flag is False
    monkeypatch.setenv("LAGPILOT_FLAG", " On ")
    assert p.parse_args([]).flag is True
    monkeypatch.setenv("LAGPILOT_FLAG", "maybe")
    with pytest.raises(ConfigError, match="LAGPILOT_FLAG='maybe': not a valid true/false"):
        p.parse_args([])
