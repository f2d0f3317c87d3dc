"""``lagpilot run`` builds its app again while the broker is not ready for its topics: a
topic created a moment ago and not yet described (TopicNotFoundError, seen on a broker that
had just started under load, bench/faults/rows.py row 3) is weather, not a crash."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from quixstreams.models.topics.exceptions import TopicNotFoundError

import pipeline.__main__ as main


def test_a_topic_not_described_yet_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(main.time, "sleep", lambda s: None)
    calls: list[int] = []

    def build(settings: Any, metrics: Any, policy: Any) -> tuple[str, None]:
        calls.append(1)
        if len(calls) < 3:
            raise TopicNotFoundError('Topic "lagpilot.lag" not found on the broker')
        return "app", None

    settings = SimpleNamespace(bootstrap="127.0.0.1:9")
    assert main._build_with_retries(build, settings, None, None) == "app"
    assert len(calls) == 3


def test_a_config_error_is_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(main.time, "sleep", lambda s: None)
    calls: list[int] = []

    def build(settings: Any, metrics: Any, policy: Any) -> tuple[str, None]:
        calls.append(1)
        raise ValueError("bad setting")

    with pytest.raises(ValueError):
        main._build_with_retries(build, SimpleNamespace(bootstrap="127.0.0.1:9"), None, None)
    assert len(calls) == 1
