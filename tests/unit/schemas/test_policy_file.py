"""One reading of the policy file for both sides: the pipeline's config and the actuator's
cap and allow-lists come from the same parse, and fail with the same words."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actuators.settings import load_policy, parse_policy
from pipeline.decide.policy_config import config_from_mapping, load_policy_config
from schemas import ConfigError

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("name", ["policy.example.toml", "policy.default.toml"])
def test_both_sides_read_the_same_mode_and_allow_lists(name: str) -> None:
    path = ROOT / "deploy" / name
    pipeline, actuator = load_policy_config(path, env={}), load_policy(str(path))
    assert pipeline.mode is actuator.mode
    assert pipeline.partition_topics == actuator.allow.partition_topics
    assert pipeline.throttle_client_ids == actuator.allow.throttle_client_ids


@pytest.mark.parametrize(
    "doc",
    [
        {"mode": "yolo"},
        {"allow": {"partition_topics": "orders"}},
        {"allow": {"throttle_client_ids": [""]}},
        {"allow": {"throtle_client_ids": ["a"]}},
        {"allow": ["a"]},
    ],
)
def test_a_mistake_in_mode_or_allow_reads_the_same_on_both_sides(doc: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as pipeline:
        config_from_mapping(doc, {})
    with pytest.raises(ConfigError) as actuator:
        parse_policy(doc)
    assert str(pipeline.value) == str(actuator.value)
    assert "policy." in str(actuator.value)


def test_an_unreadable_file_names_the_variable_on_both_sides(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("mode = ")
    for path in (tmp_path / "missing.toml", bad):
        with pytest.raises(ConfigError) as pipeline:
            load_policy_config(path, env={})
        with pytest.raises(ConfigError) as actuator:
            load_policy(str(path))
        assert str(pipeline.value) == str(actuator.value)
