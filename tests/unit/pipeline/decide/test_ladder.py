"""The remedy ladders as configured (pipeline/decide/ladder.py, the policy file's
``[ladders]``, ``[diagnosis]`` and ``[verify]``): per group, errors that name the key and the
fix, and the example policy spelling the built-in ladders."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.decide.ladder import DEFAULT_LADDER, Step, parse_step
from pipeline.decide.policy_config import config_from_mapping
from schemas import ConfigError
from tests.support.decide import cfg


def test_ladders_are_configurable_per_group() -> None:
    config = cfg(ladders={"etl-*": {"hotspot": ["handoff_partition:10"]}})
    assert config.ladders.for_group("etl-1", "hotspot") == (Step("handoff_partition", 10.0),)
    assert config.ladders.for_group("workers", "hotspot")[0].action == "spread_partition"
    assert config_from_mapping({}).ladders.for_group("x", "hotspot") == DEFAULT_LADDER["hotspot"]
    assert parse_step("add_partitions:300:recommend") == Step("add_partitions", 300.0, True)


@pytest.mark.parametrize(
    ("ladders", "names"),
    [
        ({"default": {"hotspot": ["spread:30"]}}, "ladders.default.hotspot: unknown step"),
        ({"default": {"hot": ["spread_partition:30"]}}, "ladders.default.hot: unknown cause"),
        ({"default": {"hotspot": ["spread_partition:x"]}}, "is not a number of seconds"),
        ({"default": {"hotspot": "spread_partition:30"}}, "must be a list of steps"),
    ],
)
def test_bad_ladders_name_the_key_and_the_fix(ladders: dict[str, Any], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        cfg(ladders=ladders)


@pytest.mark.parametrize(
    ("section", "names"),
    [
        ({"diagnosis": {"enabled": "yes"}}, r"policy\.diagnosis\.enabled: must be true or false"),
        ({"diagnosis": {"burst_ratio": 1.0}}, r"policy\.diagnosis\.burst_ratio: must be > 1"),
        (
            {"verify": {"improve_ratio": 1.5}},
            r"policy\.verify\.improve_ratio: must be > 0 and <= 1",
        ),
        ({"verify": {"improve": 0.5}}, r"policy\.verify\.improve"),
    ],
)
def test_bad_diagnosis_and_verify_keys_are_named(section: dict[str, Any], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        config_from_mapping(section)


def test_the_example_policy_spells_the_built_in_ladders() -> None:
    from pathlib import Path

    from pipeline.decide.policy_config import load_policy_config

    example = Path(__file__).parents[4] / "deploy" / "policy.example.toml"
    config = load_policy_config(example, env={})
    assert config.diagnose
    for cause, steps in DEFAULT_LADDER.items():
        assert config.ladders.for_group("any-group", cause) == steps
