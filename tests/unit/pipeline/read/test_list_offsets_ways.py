"""How a sampler tick asks for offsets: the per-broker way's fallback to the AdminClient's,
and the AdminClient's answer by partition, with fakes of both clients (no broker)."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import kafka.errors as kp_errors
import pytest
from confluent_kafka import KafkaError, KafkaException

from pipeline.read.list_offsets_ways import BY_BROKER_PAUSE_MAX_TICKS, ListOffsetsWays
from pipeline.read.sampling import SamplerStats


class FakeByBroker:
    """The per-broker client: ``connect`` raises each of ``failures`` in turn, then connects."""

    def __init__(self, *failures: BaseException) -> None:
        self.failures = list(failures)
        self.closed = False
        self.partitions: dict[str, tuple[int, ...]] | None = None
        self.stable: dict[str, tuple[int, ...]] | None = None

    def connect(self) -> bool:
        if self.failures:
            raise self.failures.pop(0)
        return True

    def set_partitions(
        self, watched: dict[str, tuple[int, ...]], stable: dict[str, tuple[int, ...]]
    ) -> None:
        self.partitions, self.stable = dict(watched), dict(stable)

    def close(self) -> None:
        self.closed = True


class FakeAdmin:
    """``AdminClient.list_offsets`` answering each partition with its offset or its error."""

    def __init__(self, answers: dict[tuple[str, int], int | BaseException]) -> None:
        self.answers = answers
        self.asked: list[Any] = []

    def list_offsets(self, request: Any, **_: Any) -> dict[Any, Future[Any]]:
        self.asked.append(request)
        out: dict[Any, Future[Any]] = {}
        for tp in request:
            fut: Future[Any] = Future()
            answer = self.answers[(tp.topic, tp.partition)]
            if isinstance(answer, BaseException):
                fut.set_exception(answer)
            else:
                fut.set_result(SimpleNamespace(offset=answer))
            out[tp] = fut
        return out


def _ways(admin: Any = None, by_broker: Any = None) -> tuple[ListOffsetsWays, SamplerStats, list]:
    stats, logged = SamplerStats(), []
    ways = ListOffsetsWays(
        admin or FakeAdmin({}),
        by_broker,
        request_timeout_ms=100,
        stats=stats,
        fail=lambda where, exc, then: logged.append(("fail", where, then)),
        log_limited=lambda key, level, msg, *args: logged.append(("log", key, args[-1])),
    )
    return ways, stats, logged


def test_a_connect_failure_waiting_may_fix_pauses_the_per_broker_way_doubling() -> None:
    refused = kp_errors.KafkaConnectionError("refused")
    fast = FakeByBroker(refused, refused)
    ways, stats, logged = _ways(by_broker=fast)
    stats.ticks = 1
    assert ways.per_broker() is None  # tick 1 fails: the next 20 ticks ask per partition
    stats.ticks = 20
    assert ways.per_broker() is None and len(fast.failures) == 1  # not tried while paused
    stats.ticks = 21
    assert ways.per_broker() is None  # tried again, fails again: 40 ticks now
    stats.ticks = 60
    assert ways.per_broker() is None
    stats.ticks = 61
    assert ways.per_broker() is fast  # connected: the pause is reset
    assert stats.errors == {"list_offsets_by_broker:_transport": 2}
    assert logged == [("log", "list_offsets_by_broker", 20), ("log", "list_offsets_by_broker", 40)]
    assert ways._by_broker_pause_ticks == 20 and not fast.closed


def test_the_pause_is_capped() -> None:
    refused = kp_errors.KafkaConnectionError("refused")
    ways, stats, _ = _ways(by_broker=FakeByBroker(*[refused] * 12))
    for _ in range(12):
        stats.ticks = ways._by_broker_resume_tick
        ways.per_broker()
    assert ways._by_broker_pause_ticks == BY_BROKER_PAUSE_MAX_TICKS


def test_a_connect_failure_waiting_cannot_fix_ends_the_per_broker_way_for_good(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fast = FakeByBroker(kp_errors.SaslAuthenticationFailedError())
    ways, stats, logged = _ways(by_broker=fast)
    assert ways.per_broker() is None
    assert fast.closed and ways.by_broker is None
    assert logged == [] and "from now on" in caplog.text  # said once, whatever the limit
    stats.ticks = 10_000
    assert ways.per_broker() is None
    assert stats.errors == {"list_offsets_by_broker:sasl_authentication_failed": 1}


def test_the_admin_client_way_answers_by_partition_with_failures_by_kind() -> None:
    unknown = KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    admin = FakeAdmin({("a", 0): 10, ("a", 1): unknown, ("b", 0): 3})
    fast = FakeByBroker()
    ways, _, _ = _ways(admin, fast)
    ways.watch({"a": (1, 2), "b": (1,)}, {})
    assert ways.partitions == 3 and fast.partitions == {"a": (1, 2), "b": (1,)}
    offsets, failed, first = ways.by_partition() or ({}, {}, None)
    assert offsets == {("a", 0): 10, ("b", 0): 3}
    assert failed == {"unknown_topic_or_part": 1} and first is unknown


def test_a_leader_move_reaches_the_per_broker_way_without_a_new_admin_request() -> None:
    fast = FakeByBroker()
    ways, _, _ = _ways(FakeAdmin({("a", 0): 1}), fast)
    ways.watch({"a": (1,)}, {})
    request = ways._request
    ways.watch({"a": (2,)}, {"a": (1,)})  # same partitions, another leader
    assert ways._request is request and fast.partitions == {"a": (2,)}


def test_an_admin_call_that_fails_whole_is_a_failure_of_the_tick() -> None:
    class Refusing(FakeAdmin):
        def list_offsets(self, request: Any, **_: Any) -> dict[Any, Future[Any]]:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    ways, _, logged = _ways(Refusing({}))
    ways.watch({"a": (1,)}, {})
    assert ways.by_partition() is None
    assert logged == [("fail", "list_offsets", "retrying with backoff")]


def test_stable_offsets_are_asked_by_the_per_broker_way_only() -> None:
    """The ends of ``__consumer_offsets`` (the commits reader's alignment) go to the
    per-broker way; the AdminClient's way asks one isolation level per call and leaves
    them out; a change of their leaders alone reaches the per-broker way."""
    fast = FakeByBroker()
    ways, _, _ = _ways(FakeAdmin({("a", 0): 1}), fast)
    ways.watch({"a": (1,)}, {}, {"__consumer_offsets": (1, 2)})
    assert fast.partitions == {"a": (1,)} and fast.stable == {"__consumer_offsets": (1, 2)}
    assert [(tp.topic, tp.partition) for tp in ways._request] == [("a", 0)]
    assert ways.partitions == 1
    ways.watch({"a": (1,)}, {"a": (1,)}, {"__consumer_offsets": (2, 2)})
    assert fast.stable == {"__consumer_offsets": (2, 2)}
    ways.watch({"a": (1,)}, {"a": (1,)})
    assert fast.stable == {}
