"""Policy configuration: the example file loads, overrides resolve, every error names its key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipeline.decide.policy_config import (
    POLICY_ACTIONS,
    SECTIONS,
    PolicyConfig,
    Thresholds,
    config_from_mapping,
    load_policy_config,
)
from schemas import ConfigError, Mode

ROOT = Path(__file__).resolve().parents[4]
EXAMPLE = ROOT / "deploy" / "policy.example.toml"


def test_example_file_loads_with_its_sections() -> None:
    cfg = load_policy_config(EXAMPLE, env={})
    assert cfg.mode is Mode.RECOMMEND
    assert cfg.policy_version == "2026-11-29.1"
    assert cfg.throttle_floor_bytes_per_s == 1_048_576
    assert cfg.broker_ids == (1, 2, 3)
    assert cfg.may_throttle("ingest-") and cfg.may_throttle("crawler-7")
    assert not cfg.may_throttle("billing")
    exact = config_from_mapping({"allow": {"throttle_client_ids": ["agent-", "bot-?"]}})
    assert exact.may_throttle("agent-") and exact.may_throttle("bot-1")
    assert not exact.may_throttle("agent-", "client-id-prefix")  # would cover "agent-x" too
    assert cfg.may_add_partitions("docs.raw") and not cfg.may_add_partitions("orders")
    assert [p.target for p in cfg.producers] == ["client-id-prefix:ingest-", "client-id:crawler-7"]
    assert cfg.cooldown_s("transfer_leadership") == 300
    assert cfg.cooldown_s("spread_partition") == 30
    assert cfg.spread_pool == "overflow"


def test_no_file_means_builtin_defaults() -> None:
    assert load_policy_config(None, env={}) == PolicyConfig()


def test_file_comes_from_the_environment(tmp_path: Path) -> None:
    f = tmp_path / "p.toml"
    f.write_text('mode = "act"\n')
    assert load_policy_config(env={"LAGPILOT_POLICY_FILE": str(f)}).mode is Mode.ACT


def test_overrides_apply_by_specificity_then_file_order() -> None:
    cfg = config_from_mapping(
        {
            "thresholds": {
                "default": {"time_lag_s": 30, "offset_lag": 1000},
                "group:w*,topic:docs": {"time_lag_s": 2},
                "group:workers": {"time_lag_s": 5, "exit_ratio": 0.9},
                "topic:docs": {"time_lag_s": 7, "offset_lag": 50},
            }
        }
    )
    assert cfg.thresholds_for("workers", "docs") == Thresholds(
        time_lag_s=2, offset_lag=50, exit_ratio=0.9
    )
    assert cfg.thresholds_for("workers", "orders").time_lag_s == 5
    assert cfg.thresholds_for("other", "docs").time_lag_s == 7
    assert cfg.thresholds_for("other", "orders") == Thresholds(time_lag_s=30, offset_lag=1000)


def test_environment_overrides_win_over_the_file() -> None:
    cfg = config_from_mapping(
        {"mode": "act", "budget": {"actions_per_minute": 3}},
        env={
            "LAGPILOT_POLICY_MODE": "observe",
            "LAGPILOT_POLICY_ACTIONS_PER_MINUTE": "9",
            "LAGPILOT_POLICY_ACTIONS_ENABLED": "throttle_producer, release_producer",
            "LAGPILOT_POLICY_THROTTLE_FLOOR_BYTES_PER_S": "2000",
            "LAGPILOT_POLICY_LEASE_S": "45",
            "LAGPILOT_POLICY_VERSION": "v9",
        },
    )
    assert cfg.mode is Mode.OBSERVE
    assert cfg.actions_per_minute == 9
    assert cfg.enabled == {"throttle_producer", "release_producer"}
    assert cfg.throttle_floor_bytes_per_s == 2000
    assert cfg.throttle_lease_s == 45
    assert cfg.policy_version == "v9"


BAD: list[tuple[dict[str, Any], str]] = [
    ({"mode": "acts"}, "policy.mode"),
    ({"modee": "act"}, "policy.modee"),
    ({"thresholds": {"default": {"time_lag_s": -1}}}, "policy.thresholds.default.time_lag_s"),
    ({"thresholds": {"default": {"time_lag_s": "10"}}}, "policy.thresholds.default.time_lag_s"),
    ({"thresholds": {"default": {"offset_lag": 0}}}, "policy.thresholds.default.offset_lag"),
    ({"thresholds": {"default": {"exit_ratio": 1.5}}}, "policy.thresholds.default.exit_ratio"),
    ({"thresholds": {"default": {"enter_windows": 0}}}, "policy.thresholds.default.enter_windows"),
    ({"thresholds": {"default": {"exit_window": 3}}}, "policy.thresholds.default.exit_window"),
    ({"thresholds": {"workers": {"time_lag_s": 3}}}, 'policy.thresholds."workers"'),
    ({"thresholds": {"group:w": {"time_lag": 3}}}, 'policy.thresholds."group:w".time_lag'),
    ({"thresholds": {"topic:t": {"exit_ratio": 0}}}, 'policy.thresholds."topic:t".exit_ratio'),
    ({"cooldowns": {"default_s": -5}}, "policy.cooldowns.default_s"),
    ({"cooldowns": {"throttle": 5}}, "policy.cooldowns.throttle"),
    ({"budget": {"actions_per_minute": 0}}, "policy.budget.actions_per_minute"),
    ({"budget": {"actions_per_minte": 5}}, "policy.budget.actions_per_minte"),
    ({"throttle": {"floor_bytes_per_s": 0}}, "policy.throttle.floor_bytes_per_s"),
    ({"throttle": {"step_ratio": 1.2}}, "policy.throttle.step_ratio"),
    (
        {"throttle": {"start_bytes_per_s": 10, "floor_bytes_per_s": 100}},
        "policy.throttle.start_bytes_per_s",
    ),
    ({"throttle": {"lease_s": 10}, "cooldowns": {"default_s": 30}}, "policy.throttle.lease_s"),
    ({"allow": {"partition_topics": "docs"}}, "policy.allow.partition_topics"),
    ({"allow": {"throttle_clients": ["a"]}}, "policy.allow.throttle_clients"),
    ({"producers": {"a*b": ["t"]}}, "policy.producers.a*b"),
    ({"producers": {"ingest": []}}, "policy.producers.ingest"),
    ({"brokers": {"ids": [1, -2]}}, "policy.brokers.ids"),
    ({"actions": {"enabled": ["halt"]}}, "policy.actions.enabled"),
    ({"actions": {"ttl_s": 0}}, "policy.actions.ttl_s"),
    ({"hotspot": {"lanes": 1}}, "policy.hotspot.lanes"),
    ({"hotspot": {"ratio": 0.5}}, "policy.hotspot.ratio"),
    ({"leadership": {"min_partitions": 1}}, "policy.leadership.min_partitions"),
    ({"scale": {"lag_per_replica": 0}}, "policy.scale.lag_per_replica"),
    ({"partitions": {"growth_ratio": 0.9}}, "policy.partitions.growth_ratio"),
    ({"state": {"forget_after_s": 0}}, "policy.state.forget_after_s"),
    ({"budget": 5}, "policy.budget"),
    ({"partitions": {"max_total": 0}}, "policy.partitions.max_total"),
    ({"hotspot": {"pool": ""}}, "policy.hotspot.pool"),
    ({"diagnosis": {"enabled": "yes"}}, "policy.diagnosis.enabled"),
    ({"diagnosis": {"burst_ratio": 0.5}}, "policy.diagnosis.burst_ratio"),
    ({"diagnosis": {"hold_ratio": 2}}, "policy.diagnosis.hold_ratio"),
    ({"verify": {"improve_ratio": 1.5}}, "policy.verify.improve_ratio"),
    ({"ladders": {"default": {"hotspot": "spread"}}}, "policy.ladders.default.hotspot"),
    ({"ladders": {"default": {"flood": []}}}, "policy.ladders.default.flood"),
]


@pytest.mark.parametrize(("data", "key"), BAD, ids=[k for _, k in BAD])
def test_every_error_names_its_key_and_a_fix(data: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        config_from_mapping(data)
    message = str(err.value)
    assert message.startswith(key + ":") or message.startswith(key + " "), message
    assert ";" in message, f"no fix given: {message}"


def test_every_section_of_the_table_has_an_error_case() -> None:
    """Each section parser of SECTIONS is proved to name its key and the fix above."""
    covered = {key.split(".")[1].split('"')[0] for _, key in BAD if key.count(".") >= 1}
    assert {name for name, _ in SECTIONS} <= covered


@pytest.mark.parametrize("section", [n for n, _ in SECTIONS if n not in ("producers", "ladders")])
def test_a_misspelt_key_in_any_section_is_named_with_the_known_ones(section: str) -> None:
    """``producers`` maps any client id and ``ladders`` any glob: they have no fixed keys."""
    data: dict[str, Any] = {section: {"no_such_key": 1}}
    if section == "thresholds":
        data = {"thresholds": {"default": {"no_such_key": 1}}}
    with pytest.raises(ConfigError) as err:
        config_from_mapping(data)
    message = str(err.value)
    assert message.startswith(f"policy.{section}."), message
    assert ".no_such_key: unknown key; " in message  # then the fix: the keys it knows
    assert "know" in message.split("unknown key; ", 1)[1], message


def test_every_section_reaches_the_config() -> None:
    """A value set in each section arrives in its PolicyConfig field (none is dropped by the
    table of parsers)."""
    cfg = config_from_mapping(
        {
            "mode": "act",
            "policy_version": "v7",
            "thresholds": {"default": {"time_lag_s": 9}, "topic:t": {"offset_lag": 5}},
            "cooldowns": {"default_s": 11, "add_partitions": 99},
            "budget": {"actions_per_minute": 4},
            "throttle": {"floor_bytes_per_s": 1000, "start_bytes_per_s": 2000,
                         "step_ratio": 0.25, "lease_s": 600},
            "allow": {"partition_topics": ["docs"], "throttle_client_ids": ["ingest-*"]},
            "producers": {"ingest-*": ["docs"]},
            "brokers": {"ids": [3, 1, 3]},
            "actions": {"enabled": ["throttle_producer"], "ttl_s": 7},
            "hotspot": {"ratio": 3, "lanes": 6, "pool": "big"},
            "leadership": {"min_partitions": 4},
            "scale": {"lag_per_replica": 123},
            "partitions": {"growth_ratio": 1.5, "max_total": 64},
            "state": {"forget_after_s": 77},
            "diagnosis": {"enabled": True, "burst_ratio": 2.5, "hold_ratio": 0.6,
                          "rates_stale_s": 8},
            "verify": {"improve_ratio": 0.4},
            "ladders": {"default": {"hotspot": ["spread_partition:2"]}},
        }
    )  # fmt: skip
    assert (cfg.mode, cfg.policy_version) == (Mode.ACT, "v7")
    assert cfg.default_thresholds.time_lag_s == 9 and cfg.overrides[0].values == {"offset_lag": 5}
    assert cfg.cooldown_default_s == 11 and cfg.cooldowns_s["add_partitions"] == 99
    assert cfg.actions_per_minute == 4
    assert (cfg.throttle_floor_bytes_per_s, cfg.throttle_start_bytes_per_s,
            cfg.throttle_step_ratio, cfg.throttle_lease_s) == (1000, 2000, 0.25, 600)  # fmt: skip
    assert cfg.partition_topics == ("docs",) and cfg.throttle_client_ids == ("ingest-*",)
    assert [(p.entity, p.name, p.topics) for p in cfg.producers] == [
        ("client-id-prefix", "ingest-", ("docs",))
    ]
    assert cfg.broker_ids == (1, 3)
    assert cfg.enabled == {"throttle_producer"} and cfg.action_ttl_s == 7
    assert (cfg.hot_ratio, cfg.spread_lanes, cfg.spread_pool) == (3, 6, "big")
    assert cfg.leadership_min_partitions == 4 and cfg.lag_per_replica == 123
    assert (cfg.partitions_growth_ratio, cfg.partitions_max_total) == (1.5, 64)
    assert cfg.forget_after_s == 77
    assert (cfg.diagnose, cfg.burst_ratio, cfg.hold_ratio, cfg.rates_stale_s) == (
        True, 2.5, 0.6, 8)  # fmt: skip
    assert cfg.verify_improve_ratio == 0.4
    assert cfg.ladders != PolicyConfig().ladders


def test_the_briefs_example_message() -> None:
    with pytest.raises(ConfigError, match=r"^policy\.thresholds\.default\.time_lag_s: must be > 0"
                       r" \(got -1\); set a positive number of seconds"):  # fmt: skip
        config_from_mapping({"thresholds": {"default": {"time_lag_s": -1}}})


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"LAGPILOT_POLICY_MODE": "fast"}, "LAGPILOT_POLICY_MODE"),
        ({"LAGPILOT_POLICY_ACTIONS_PER_MINUTE": "many"}, "LAGPILOT_POLICY_ACTIONS_PER_MINUTE"),
        ({"LAGPILOT_POLICY_ACTIONS_PER_MINUTE": "-1"}, "LAGPILOT_POLICY_ACTIONS_PER_MINUTE"),
        ({"LAGPILOT_POLICY_LEASE": "30"}, "LAGPILOT_POLICY_LEASE"),
        ({"LAGPILOT_POLICY_ACTIONS_ENABLED": "throttle"}, "LAGPILOT_POLICY_ACTIONS_ENABLED"),
    ],
)
def test_environment_errors_name_the_variable(env: dict[str, str], name: str) -> None:
    with pytest.raises(ConfigError, match=name):
        config_from_mapping({}, env=env)


def test_unreadable_and_invalid_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"LAGPILOT_POLICY_FILE=.*cannot be read"):
        load_policy_config(tmp_path / "missing.toml", env={})
    bad = tmp_path / "bad.toml"
    bad.write_text("mode = \n")
    with pytest.raises(ConfigError, match=r"bad\.toml: not valid TOML"):
        load_policy_config(bad, env={})


def test_errors_are_not_retriable() -> None:
    with pytest.raises(ConfigError) as err:
        config_from_mapping({"mode": 1})
    assert err.value.retriable is False


def test_enabled_defaults_to_every_policy_action() -> None:
    assert config_from_mapping({}).enabled == {str(t) for t in POLICY_ACTIONS}
