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


def test_the_progress_thresholds_are_settings_that_reach_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("LAGPILOT_PROGRESS_WARN_MIN_S", "LAGPILOT_PROGRESS_GRACE_S"):
        monkeypatch.delenv(var, raising=False)
    cfg = tmp_path / "lagpilot.toml"
    cfg.write_text("progress_warn_min_s = 0.3\nprogress_missed_reports = 4\n")
    s = settings_for(["--config", str(cfg)])
    assert (s.progress_warn_min_s, s.progress_missed_reports) == (0.3, 4)
    monkeypatch.setenv("LAGPILOT_PROGRESS_GRACE_S", "0.5")
    s = settings_for(["--config", str(cfg), "--progress-warn-min-s", "0.2"])
    progress = s.lag_config().progress
    assert (progress.warn_min_s, progress.missed_reports, progress.grace_s) == (0.2, 4, 0.5)
    assert progress.expire_s == 60.0 and progress.pause_half_life_s == 60.0  # defaults


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LAGPILOT_PROGRESS_WARN_MIN_S": "soon"}, "LAGPILOT_PROGRESS_WARN_MIN_S='soon': expected"),
        ({"LAGPILOT_PROGRESS_WARN_MIN_S": "0"}, "LAGPILOT_PROGRESS_WARN_MIN_S=0.0: must be"),
        ({"LAGPILOT_PROGRESS_MISSED_REPORTS": "-1"}, "LAGPILOT_PROGRESS_MISSED_REPORTS=-1: must"),
        ({"LAGPILOT_PROGRESS_EXPIRE_S": "0.4"}, "LAGPILOT_PROGRESS_EXPIRE_S=0.4"),
    ],
)
def test_a_bad_progress_setting_names_the_key_and_the_fix(env: dict, message: str) -> None:
    from schemas import ConfigError

    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        load_settings(env=env)
