"""The group protocol setting before anything connects: where it comes from, what each
protocol puts in the worker's consumer config, and the settings each one refuses (naming
the setting and the fix). The broker tests hold the consumer to the protocol it asked for."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException

from actuators.workers import MemoryDedupeStore, PoolWorker, Worker
from actuators.workers.group_protocol import (
    BROKER_OWNED,
    GROUP_PROTOCOL_ENV,
    HEARTBEAT_INTERVAL_MS,
    MIN_MAX_POLL_INTERVAL_MS,
    check_group_config,
    group_settings,
    resolve_group_protocol,
)
from schemas import ConfigError

KEY = b"unit-test-signing-key-0123456789"


def _worker(**over: Any) -> Worker:
    settings: dict[str, Any] = {"topics": ["t"], "instance_id": "w1", **over}
    return Worker(**_engine(**settings))


def _engine(**over: Any) -> dict[str, Any]:
    return {"bootstrap": "127.0.0.1:1", "group": "g", "handler": lambda msg, ctx: None,
            "dedupe": MemoryDedupeStore(), "signing_key": KEY, **over}  # fmt: skip


def test_classic_is_the_default_and_the_environment_chooses_when_the_keyword_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(GROUP_PROTOCOL_ENV, raising=False)
    assert resolve_group_protocol(None) == "classic"
    assert _worker().group_protocol == "classic"
    monkeypatch.setenv(GROUP_PROTOCOL_ENV, "consumer")
    assert _worker().group_protocol == "consumer"
    assert _worker(group_protocol="classic").group_protocol == "classic"  # the keyword wins
    monkeypatch.setenv(GROUP_PROTOCOL_ENV, " ")
    assert _worker().group_protocol == "classic"  # blank is unset


@pytest.mark.parametrize(
    ("keyword", "env", "names"),
    [
        ("KIP-848", None, "group_protocol='KIP-848': set it to 'classic'"),
        ("Consumer", None, "group_protocol='Consumer'"),
        (None, "cooperative", f"{GROUP_PROTOCOL_ENV}='cooperative': set it to 'classic'"),
    ],
)
def test_a_bad_protocol_is_refused_naming_where_it_came_from(
    monkeypatch: pytest.MonkeyPatch, keyword: str | None, env: str | None, names: str
) -> None:
    monkeypatch.delenv(GROUP_PROTOCOL_ENV, raising=False)
    if env is not None:
        monkeypatch.setenv(GROUP_PROTOCOL_ENV, env)
    with pytest.raises(ConfigError) as caught:
        _worker(group_protocol=keyword)
    assert names in str(caught.value) and "'consumer'" in str(caught.value)
    with pytest.raises(ConfigError):  # a pool takes the same setting, checked the same way
        PoolWorker(pool="big", **_engine(group_protocol=keyword))


def test_classic_asks_for_cooperative_sticky_and_a_short_heartbeat() -> None:
    c = _worker(group_protocol="classic").consumer_config()
    assert c["group.protocol"] == "classic"
    assert c["partition.assignment.strategy"] == "cooperative-sticky"
    assert c["heartbeat.interval.ms"] == HEARTBEAT_INTERVAL_MS == 500
    assert c["group.instance.id"] == "w1" and c["group.id"] == "g"
    # the user's consumer_config overrides the classic defaults
    mine = {"heartbeat.interval.ms": 1000, "session.timeout.ms": 6000}
    c = _worker(group_protocol="classic", consumer_config=mine).consumer_config()
    assert c["heartbeat.interval.ms"] == 1000 and c["session.timeout.ms"] == 6000


def test_consumer_leaves_the_broker_owned_settings_to_the_broker_and_keeps_static_membership() -> (
    None
):
    c = _worker(group_protocol="consumer").consumer_config()
    assert c["group.protocol"] == "consumer"
    assert not set(BROKER_OWNED) & set(c)  # librdkafka refuses any of them under consumer
    assert c["group.instance.id"] == "w1"  # static membership holds under KIP-848 too
    assert c["enable.auto.commit"] is False and c["enable.auto.offset.store"] is False
    c = _worker(group_protocol="consumer", consumer_config={"group.remote.assignor": "range"})
    assert c.consumer_config()["group.remote.assignor"] == "range"
    assert (
        "group.instance.id"
        not in _worker(group_protocol="consumer", instance_id="").consumer_config()
    )


@pytest.mark.parametrize("key", sorted(BROKER_OWNED))
def test_consumer_refuses_what_the_broker_owns_naming_where_to_set_it(key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _worker(group_protocol="consumer", consumer_config={key: 1})
    message = str(caught.value)
    assert f"consumer_config[{key!r}]" in message and BROKER_OWNED[key] in message
    assert "group_protocol='classic'" in message  # or keep it, with the classic protocol
    _worker(group_protocol="classic", consumer_config={key: 1})  # classic takes it


def test_consumer_refuses_a_max_poll_interval_below_what_librdkafka_takes_there() -> None:
    with pytest.raises(ConfigError, match=r"max.poll.interval.ms'\]=10000: .* at least 45000"):
        _worker(group_protocol="consumer", consumer_config={"max.poll.interval.ms": 10000})
    # librdkafka's rule, in the worker's group-less (classic) consumers that take it too
    config = {"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "max.poll.interval.ms": 10000}
    with pytest.raises(KafkaException, match=r"max\.poll\.interval\.ms"):
        Consumer(config)
    ok = {"max.poll.interval.ms": MIN_MAX_POLL_INTERVAL_MS}
    c = _worker(group_protocol="consumer", consumer_config=ok).consumer_config()
    Consumer({**config, **ok}).close()
    assert c["max.poll.interval.ms"] == MIN_MAX_POLL_INTERVAL_MS


def test_the_protocol_is_the_keyword_not_a_consumer_config_key() -> None:
    for protocol in ("classic", "consumer"):
        with pytest.raises(ConfigError, match="pass group_protocol='consumer'"):
            check_group_config(protocol, {"group.protocol": "consumer"})


def test_classic_refuses_the_remote_assignor_naming_the_protocol_it_needs() -> None:
    with pytest.raises(ConfigError, match=r"only under group_protocol='consumer'"):
        _worker(group_protocol="classic", consumer_config={"group.remote.assignor": "uniform"})


def test_each_protocol_sets_what_it_names() -> None:
    assert group_settings("consumer") == {"group.protocol": "consumer"}
    assert group_settings("classic")["group.protocol"] == "classic"


def test_a_pool_never_joins_so_its_consumer_names_no_protocol() -> None:
    p = PoolWorker(pool="big", **_engine(group_protocol="consumer"))
    c = p.consumer_config()
    assert p.group_protocol == "consumer"
    assert "group.protocol" not in c and "partition.assignment.strategy" not in c


@pytest.mark.parametrize("key", sorted(BROKER_OWNED))
def test_librdkafka_itself_refuses_each_broker_owned_setting_under_consumer(key: str) -> None:
    """The list the SDK refuses is librdkafka's own: each key fails its consumer's build."""
    value = "cooperative-sticky" if key == "partition.assignment.strategy" else "1000"
    if key == "group.protocol.type":
        value = "consumer"
    config = {"bootstrap.servers": "127.0.0.1:1", "group.id": "g", key: value}
    with pytest.raises(KafkaException, match=key.replace(".", r"\.")):
        Consumer({**config, **group_settings("consumer")})
    Consumer(config).close()  # the classic protocol takes it
