"""The workers' engine, ``Worker`` and ``PoolWorker`` before they connect: what they accept,
what they refuse (naming the setting and the fix), and the consumer each one configures.

Nothing here connects: the consumer is built only in ``start()`` (the broker tests run it).
"""

from __future__ import annotations

from typing import Any

import pytest

from actuators.workers import MemoryDedupeStore, PoolWorker, Worker
from actuators.workers.handoff import pool_group_id
from actuators.workers.worker import INSTANCE_ID_ENV
from schemas import ConfigError

KEY = b"unit-test-signing-key-0123456789"


def _settings(**over: Any) -> dict[str, Any]:
    return {"bootstrap": "127.0.0.1:1", "group": "g", "handler": lambda msg, ctx: None,
            "dedupe": MemoryDedupeStore(), "signing_key": KEY, **over}  # fmt: skip


@pytest.mark.parametrize(
    ("over", "names"),
    [
        ({"bootstrap": ""}, "bootstrap is empty"),
        ({"group": ""}, "group is empty"),
        ({"lanes": 0}, "lanes=0: must be an integer >= 1"),
        ({"max_workers": 1.5}, "max_workers=1.5"),
        ({"max_buffered_per_partition": 1}, "max_buffered_per_partition=1"),
        ({"max_attempts": 0}, "max_attempts=0"),
        ({"progress_interval_ms": 5}, "LAGPILOT_PROGRESS_INTERVAL_MS=5: must be between 10 and"),
        (
            {"consumer_config": {"enable.auto.commit": True}},
            "consumer_config['enable.auto.commit']",
        ),
        ({"consumer_config": {"group.id": "x"}}, "remove it from consumer_config"),
    ],
)
def test_bad_engine_settings_are_refused_naming_the_setting(
    over: dict[str, Any], names: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        Worker(topics=["t"], **_settings(**over))
    assert names in str(caught.value)
    assert caught.value.retriable is False


def test_a_worker_needs_topics() -> None:
    for topics in ([], [""], "t"):
        with pytest.raises(ConfigError, match="topics="):
            Worker(topics=topics, **_settings())  # type: ignore[arg-type]


def test_the_worker_commits_only_what_it_processed_and_keeps_static_membership(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(INSTANCE_ID_ENV, "pod-3")
    w = Worker(topics=["t"], consumer_config={"fetch.min.bytes": 1, "auto.offset.reset": "latest"},
               **_settings())  # fmt: skip
    c = w.consumer_config()
    assert c["enable.auto.commit"] is False and c["enable.auto.offset.store"] is False
    assert c["group.id"] == "g" and c["group.instance.id"] == "pod-3"
    assert c["partition.assignment.strategy"] == "cooperative-sticky"
    assert c["fetch.min.bytes"] == 1 and c["auto.offset.reset"] == "latest"  # the user's extras
    assert callable(c["on_commit"])
    assert (
        "group.instance.id"
        not in Worker(topics=["t"], instance_id="", **_settings()).consumer_config()
    )


def test_the_instance_id_defaults_to_host_and_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(INSTANCE_ID_ENV, raising=False)
    w = Worker(topics=["t"], **_settings())
    assert w.instance_id.endswith("-g") and len(w.instance_id) > 2


def test_a_pool_worker_commits_in_its_own_group_and_never_joins_the_owners() -> None:
    p = PoolWorker(pool="himem", **_settings())
    c = p.consumer_config()
    assert c["group.id"] == pool_group_id("g", "himem") == "g.pool.himem"
    assert "group.instance.id" not in c and "partition.assignment.strategy" not in c
    assert c["enable.auto.commit"] is False and c["enable.auto.offset.store"] is False
    assert p.held() == set() and not p.running


def test_a_pool_name_with_a_colon_is_refused() -> None:
    with pytest.raises(ValueError, match="pool name"):
        PoolWorker(pool="a:b", **_settings())
