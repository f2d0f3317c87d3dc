"""``lagpilot sample``'s command line (pipeline/commands/sample.py), without a broker."""

from __future__ import annotations

import pytest

from pipeline.commands.sample import build_parser, main
from schemas import topics


def test_cli_defaults_match_the_issue() -> None:
    args = build_parser().parse_args(["--bootstrap", "h:9092", "-X", "security.protocol=SSL"])
    assert args.sample_interval_ms == 250
    assert args.metadata_refresh_ms == 5000
    assert args.topic == topics.WATERMARKS
    assert args.config_pairs == ["security.protocol=SSL"]
    assert not args.include_internal


def test_cli_rejects_malformed_client_setting(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--bootstrap", "h:9092", "-X", "security.protocol"]) == 78  # EX_CONFIG
    assert "write client settings as key=value" in capsys.readouterr().err


def test_list_offsets_per_broker_is_the_default_and_the_flag_or_variable_turns_it_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert build_parser().parse_args([]).list_offsets_per_broker is True
    assert (
        build_parser().parse_args(["--list-offsets-per-partition"]).list_offsets_per_broker is False
    )
    monkeypatch.setenv("LAGPILOT_LIST_OFFSETS_PER_BROKER", "false")
    assert build_parser().parse_args([]).list_offsets_per_broker is False
