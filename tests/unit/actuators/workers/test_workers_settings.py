"""Worker settings fail early with the key and the fix; the handler wrapper retries, then skips."""

from __future__ import annotations

from typing import Any

import pytest

from actuators.workers import EffectGuard, InDoubtError, MemoryDedupeStore, PoolWorker, Worker
from schemas import ConfigError

KEY = b"workers-unit-test-key-0123456789"


def worker(**over: Any) -> Worker:
    settings: dict[str, Any] = {
        "bootstrap": "127.0.0.1:1",
        "group": "g",
        "topics": ["t"],
        "handler": lambda msg, ctx: None,
        "dedupe": MemoryDedupeStore(),
        "signing_key": KEY,
        "instance_id": "w1",
        "max_attempts": 3,
        "retry_backoff_s": 0.0,
    }
    settings.update(over)
    return Worker(**settings)


@pytest.mark.parametrize(
    ("over", "names"),
    [
        ({"bootstrap": ""}, "bootstrap"),
        ({"group": ""}, "group"),
        ({"topics": []}, "topics"),
        ({"lanes": 0}, "lanes=0"),
        ({"max_buffered_per_partition": 1}, "max_buffered_per_partition"),
        ({"consumer_config": {"enable.auto.commit": True}}, "enable.auto.commit"),
        ({"consumer_config": {"group.id": "x"}}, "group.id"),
    ],
)
def test_bad_settings_name_the_key(over: dict[str, Any], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        worker(**over)


def test_missing_signing_key_says_how_to_set_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAGPILOT_SIGNING_KEY", raising=False)
    monkeypatch.delenv("LAGPILOT_SIGNING_KEY_FILE", raising=False)
    with pytest.raises(ConfigError, match="LAGPILOT_SIGNING_KEY"):
        worker(signing_key=None)


def test_defaults_are_cooperative_sticky_static_and_manual_commit() -> None:
    config = worker(consumer_config={"session.timeout.ms": 6000}).consumer_config()
    assert config["partition.assignment.strategy"] == "cooperative-sticky"
    assert config["group.instance.id"] == "w1"
    assert config["enable.auto.commit"] is False and config["enable.auto.offset.store"] is False
    assert config["session.timeout.ms"] == 6000
    assert "group.instance.id" not in worker(instance_id="").consumer_config()


def test_pool_commits_in_its_own_group() -> None:
    pool = PoolWorker(
        pool="big",
        bootstrap="127.0.0.1:1",
        group="g",
        handler=lambda m, c: None,
        dedupe=MemoryDedupeStore(),
        signing_key=KEY,
    )
    assert pool.consumer_config()["group.id"] == "g.pool.big"


class Msg:
    def __init__(self, offset: int, headers: list[tuple[str, bytes]] | None = None) -> None:
        self._offset, self._headers = offset, headers

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._headers


def test_a_failing_handler_is_retried_then_handed_to_on_failure() -> None:
    attempts: list[int] = []
    failures: list[tuple[int, str]] = []

    def handle(msg: Any, ctx: EffectGuard) -> None:
        attempts.append(ctx.attempt)
        raise OSError("tool down")

    w = worker(handler=handle, on_failure=lambda m, e: failures.append((m.offset(), str(e))))
    w._process(Msg(5))
    assert attempts == [1, 2, 3]
    assert failures == [(5, "tool down")]
    assert w.stats()["failed"] == 1 and w.stats()["retried"] == 2


def test_in_doubt_is_not_retried_and_a_flaky_handler_succeeds() -> None:
    calls: list[str] = []

    def handle(msg: Any, ctx: EffectGuard) -> None:
        calls.append(ctx.key)
        if msg.offset() == 1:
            raise InDoubtError("unknown")
        if len(calls) == 2:
            raise OSError("flaky once")

    w = worker(handler=handle)
    w._process(Msg(1))
    w._process(Msg(2, [("idempotency-key", b"order-9")]))
    assert calls == ["g/t/0/1", "order-9", "order-9"]
    assert w.stats() == {"failed": 1, "retried": 1, "processed": 1}
