"""The runner's loop without a broker: a ``Runner`` given fake Kafka clients
(``RunnerClients``) turns a batch of control events into intents, backend calls and one
transaction of outcomes and offsets; each event is read (decoded, its signature verified)
once, and still judged against the ledger as the batch's earlier events left it."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from confluent_kafka import TopicPartition

from actuators import checks
from actuators.backends import DryRunBackend
from actuators.reconcile import IntentLog
from actuators.runner import Runner, RunnerClients
from actuators.settings import Settings
from actuators.transactions import Transactions
from bench.support import actuator_harness as T
from schemas import decode, encode

CONTROL, OUTCOMES = "unit.control", "unit.outcomes"


@dataclass
class Msg:
    """The confluent_kafka.Message accessors the runner reads."""

    _value: bytes | None
    _offset: int
    _topic: str = CONTROL
    _partition: int = 0

    def value(self) -> bytes | None:
        return self._value

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def headers(self) -> None:
        return None

    def error(self) -> None:
        return None


@dataclass
class FakeConsumer:
    """The control consumer (``batches``: what consume() gives) or the ledger's tail."""

    batches: list[list[Msg]] = field(default_factory=list)
    seeks: list[TopicPartition] = field(default_factory=list)

    def consume(self, num_messages: int = 1, timeout: float = 0) -> list[Msg]:
        return self.batches.pop(0) if self.batches else []

    def consumer_group_metadata(self) -> object:
        return object()

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append(tp)

    def subscribe(self, topics: list[str]) -> None:
        return None

    def close(self) -> None:
        return None


@dataclass
class FakeProducer:
    """The transactional producer and the intents producer: what was produced, and the
    offsets each committed transaction carried."""

    produced: list[tuple[str, bytes, dict[str, Any]]] = field(default_factory=list)
    offsets: list[list[TopicPartition]] = field(default_factory=list)
    transactions: int = 0

    def produce(self, topic: str, *, key: bytes, value: bytes, headers: Any = None) -> None:
        self.produced.append((topic, key, decode(value)))

    def flush(self, timeout: float = 0) -> int:
        return 0

    def init_transactions(self, timeout: float) -> None:
        return None

    def begin_transaction(self) -> None:
        return None

    def send_offsets_to_transaction(self, offsets: Any, meta: Any, timeout: float) -> None:
        self.offsets.append(list(offsets))

    def commit_transaction(self, timeout: float) -> None:
        self.transactions += 1

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [value for _, _, value in self.produced if value["event"] == kind]


@dataclass
class Fakes:
    control: FakeConsumer
    txn: FakeProducer
    intents: FakeProducer
    clients: RunnerClients


def fakes() -> Fakes:
    control, txn, intents = FakeConsumer(), FakeProducer(), FakeProducer()
    transactions = Transactions({}, {}, CONTROL, "a1", threading.Event(),
                                make_producer=lambda _cfg: txn,
                                make_consumer=lambda _cfg: control)  # fmt: skip
    clients = RunnerClients(
        admin=cast(Any, object()),  # start() and ready() only: not called here
        transactions=transactions,
        intents=IntentLog(lambda: intents, OUTCOMES, "a1"),
        tail=cast(Any, FakeConsumer()),
        kept_halt_ms=lambda _key: None,
    )
    return Fakes(control, txn, intents, clients)


def runner(f: Fakes, backend: DryRunBackend) -> Runner:
    settings = Settings(bootstrap="127.0.0.1:1", backend="dry-run", actuator_id="a1",
                        control_topic=CONTROL, outcomes_topic=OUTCOMES,
                        metrics_port=0).validated()  # fmt: skip
    return Runner(settings, signing_key=T.KEY, policy=T.ACT_POLICY, backend=backend,
                  clients=f.clients)  # fmt: skip


def now_ms() -> int:
    return int(time.time() * 1000)


def test_a_runner_given_its_clients_applies_a_batch_in_one_transaction() -> None:
    f, backend = fakes(), DryRunBackend()
    r = runner(f, backend)
    action = T.throttle("ok-1", 1_000, key=T.KEY, now_ms=now_ms())
    f.control.batches = [[Msg(encode(action), 7)]]
    assert r.step() == 1
    assert backend.calls == [("throttle", "client-id", "ok-1", 1_000)]
    assert [e["action_id"] for e in f.intents.events("intent")] == [action["id"]]
    [applied] = f.txn.events("outcome")
    assert applied["action_id"] == action["id"] and applied["result"] == "applied"
    assert f.txn.transactions == 1
    assert [(tp.topic, tp.partition, tp.offset) for tp in f.txn.offsets[0]] == [(CONTROL, 0, 8)]


def test_each_event_is_read_once_per_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The intents and the handling judge one reading: the signature is verified and the
    value decoded once per event, not once for the intents and again to apply it."""
    verified: list[str] = []
    decoded: list[bytes] = []
    verify, decode_ = checks.verify, checks.decode

    def counting_verify(event: dict[str, Any], key: Any) -> None:
        verified.append(event["id"])
        verify(event, key)

    def counting_decode(raw: bytes) -> dict[str, Any]:
        decoded.append(raw)
        return decode_(raw)

    monkeypatch.setattr(checks, "verify", counting_verify)
    monkeypatch.setattr(checks, "decode", counting_decode)
    f = fakes()
    r = runner(f, DryRunBackend())
    action = T.throttle("ok-1", 1_000, key=T.KEY, now_ms=now_ms())
    f.control.batches = [[Msg(encode(action), 0)]]
    assert r.step() == 1
    assert verified == [action["id"]] and len(decoded) == 1
    assert [e["result"] for e in f.txn.events("outcome")] == ["applied"]


def test_a_batch_event_is_judged_against_the_ledger_its_earlier_events_left() -> None:
    """Read once, judged twice: the intents judge the batch against the ledger as it was,
    the handling against the ledger as the earlier events of the batch changed it."""
    f, backend = fakes(), DryRunBackend()
    r = runner(f, backend)
    action = T.throttle("ok-1", 1_000, key=T.KEY, now_ms=now_ms())
    f.control.batches = [[Msg(encode(action), 0), Msg(encode(action), 1)]]
    assert r.step() == 2
    assert [e["result"] for e in f.txn.events("outcome")] == ["applied", "duplicate"]
    assert len(backend.calls) == 1 and len(f.intents.events("intent")) == 1
