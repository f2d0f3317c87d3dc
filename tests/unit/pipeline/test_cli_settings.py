"""``lagpilot run`` and ``lagpilot actuate`` read their settings as every command does:
flag, then environment, then the config file, then the default."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.__main__ import parse_args
from pipeline.settings import Settings, load_settings

SKIP = {"log_level", "debug", "config", "connect_timeout_s", "env", "kafka"}


def settings_for(argv: list[str]) -> Settings:
    args = parse_args(argv)
    overrides = {k: v for k, v in vars(args).items() if k not in SKIP and v is not None}
    return load_settings(env=args.env, overrides=overrides)


def test_run_reads_flag_env_config_file_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("LAGPILOT_WINDOW_S", "LAGPILOT_SAMPLE_INTERVAL_MS", "KAFKA_BOOTSTRAP"):
        monkeypatch.delenv(var, raising=False)
    cfg = tmp_path / "lagpilot.toml"
    cfg.write_text('bootstrap = "file:9092"\nwindow_s = 20\nsample_interval_ms = 500\n'
                   '[kafka]\nclient_id = "from-file"\n')  # fmt: skip
    s = settings_for(["--config", str(cfg)])
    assert (s.bootstrap, s.window_s, s.sample_interval_ms) == ("file:9092", 20, 500)
    assert s.kafka == {"client.id": "from-file"}
    assert settings_for([]).window_s == 10.0  # the default
    monkeypatch.setenv("LAGPILOT_WINDOW_S", "30")
    assert settings_for(["--config", str(cfg)]).window_s == 30
    assert settings_for(["--config", str(cfg), "--window-s", "40"]).window_s == 40
    assert settings_for(["--config", str(cfg), "--no-sampler"]).run_sampler is False


def test_actuate_reads_the_config_file_under_the_same_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from actuators.__main__ import _parser
    from actuators.settings import from_env

    monkeypatch.delenv("LAGPILOT_ACTUATOR_BACKEND", raising=False)
    cfg = tmp_path / "lagpilot.toml"
    cfg.write_text('actuator_backend = "dry-run"\nactuator_max_batch = 8\n')
    args = _parser().parse_args(["--config", str(cfg)])
    assert from_env(args.env).backend == "dry-run"
    assert from_env(args.env, max_batch=args.max_batch).max_batch == 8
    args = _parser().parse_args(["--config", str(cfg), "--max-batch", "4"])
    assert from_env(args.env, max_batch=args.max_batch).max_batch == 4


def test_the_outcomes_and_producer_rates_topics_follow_the_actuator_and_the_sdk() -> None:
    """The policy verifies from the outcomes topic the actuator writes, and attributes bursts
    from the rates topic the SDK's producers write: both are settable together with them."""
    s = load_settings(env={"LAGPILOT_OUTCOMES_TOPIC": "lagpilot.outcomes.run-1",
                           "LAGPILOT_PRODUCERS_TOPIC": "lagpilot.producers.run-1"})  # fmt: skip
    assert (s.outcomes_topic, s.producers_topic) == (
        "lagpilot.outcomes.run-1", "lagpilot.producers.run-1"
    )  # fmt: skip
    assert load_settings(env={}).outcomes_topic == "lagpilot.outcomes"
