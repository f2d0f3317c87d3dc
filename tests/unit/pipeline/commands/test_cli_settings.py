"""``lagpilot run`` and ``lagpilot actuate`` read their settings as every command does:
flag, then environment, then the config file, then the default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def _parsers() -> dict[str, object]:
    from pipeline.commands import control, doctor, status
    from pipeline.commands import sample as sample_cli
    from pipeline.serve.keda import server

    return {
        "status": status._parser(),
        "control": control._parser(),
        "doctor": doctor._parser(),
        "sample": sample_cli.build_parser(),
        "scaler": server._parser(),
    }


@pytest.mark.parametrize("command", ["status", "control", "doctor", "sample", "scaler"])
def test_every_option_of_every_command_reads_flag_env_config_default(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each option the command resolves itself, one by one: the default alone, then the
    config file, the environment over it, the flag over both. (``run`` and ``actuate`` hand
    theirs to their settings loaders: the two tests above.)"""
    from runtime.cli import CONFIG_ENV, Parser

    parser = _parsers()[command]
    assert isinstance(parser, Parser)
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    checked = 0
    for opt in parser.options:
        if opt.fill and opt.type is not bool and opt.dest not in ("config", "log_level"):
            monkeypatch.delenv(opt.env, raising=False)
            _check_precedence(parser, command, opt, tmp_path / f"{opt.dest}.toml", monkeypatch)
            checked += 1
    assert checked >= 2, command


def _check_precedence(
    parser: Any, command: str, opt: Any, cfg: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    top = {a.dest for a in parser._actions}
    owners = [name for name, p in _subparsers(parser).items()
              if any(a.dest == opt.dest for a in p._actions)]  # fmt: skip
    sub = owners[:1] or (["tail"] if command == "control" else [])  # control needs one
    own = opt.dest in top
    action = next(a for p in [parser, *_subparsers(parser).values()] for a in p._actions
                  if a.dest == opt.dest)  # fmt: skip
    flag = action.option_strings[-1]
    values = [_sample(opt.type, i) for i in range(3)]
    key = "bootstrap" if opt.env == "KAFKA_BOOTSTRAP" else opt.env.lower()[len("lagpilot_") :]
    cfg.write_text(f"{key} = {values[0]!r}\n".replace("'", '"'))

    def parsed(*extra: str, config: bool = True) -> Any:
        head = ["--config", str(cfg)] if config else []
        argv = [*head, *(extra if own else ()), *sub, *(() if own else extra)]
        got = getattr(parser.parse_args(argv), opt.dest)
        return got[0] if opt.many and got else got

    assert parsed(config=False) == opt.default, opt
    assert parsed() == values[0], (opt, "config file")
    monkeypatch.setenv(opt.env, str(values[1]))
    assert parsed() == values[1], (opt, "environment over the config file")
    assert parsed(flag, str(values[2])) == values[2], (opt, "flag over the environment")


def _subparsers(parser: Any) -> dict[str, Any]:
    import argparse

    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {name: p for s in subs for name, p in s.choices.items()}


def _sample(typ: object, i: int) -> object:
    if typ is int:
        return 7 + i
    if typ is float:
        return 1.5 + i
    return f"v{i}x"


def test_every_option_of_every_command_shows_its_variable_and_default() -> None:
    import argparse

    from actuators.__main__ import _parser as actuate_parser
    from pipeline.__main__ import _parser as run_parser

    parsers = {**_parsers(), "run": run_parser(), "actuate": actuate_parser()}
    for command, parser in parsers.items():
        for p in [parser, *_subparsers(parser).values()]:
            for action in p._actions:
                if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                    continue
                assert "[env " in (action.help or ""), (command, action.option_strings)
                assert "; default " in action.help or "<NAME>" in action.help, (
                    command, action.option_strings)  # fmt: skip
        assert "example" in (parser.epilog or ""), command
