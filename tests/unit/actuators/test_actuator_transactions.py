"""How the actuator's transactional producer ends a transaction whose commit failed
(``Transactions.settle``), and how its control consumer survives being fenced.

A node restart makes commit_transaction and abort_transaction fail for seconds with
retriable errors. The actuator must ride that out (retry with backoff), abort when the
broker says the transaction must be aborted (and keep aborting until it is), and stop only
on a fatal error such as being fenced.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from actuators import transactions as runner_mod
from actuators.transactions import Transactions


def _err(
    *,
    retriable: bool = False,
    abort: bool = False,
    fatal: bool = False,
    code: int = KafkaError._TIMED_OUT,
) -> KafkaError:
    return KafkaError(
        code, "1 message(s) timed out", fatal=fatal, retriable=retriable, txn_requires_abort=abort
    )  # fmt: skip


class _Producer:
    """Answers commit/abort calls from a script: an error is raised, None succeeds."""

    def __init__(self, commits: list[KafkaError | None], aborts: list[KafkaError | None]):
        self._commits: Iterator[KafkaError | None] = iter(commits)
        self._aborts: Iterator[KafkaError | None] = iter(aborts)
        self.calls: list[str] = []

    def commit_transaction(self, timeout: float) -> None:
        self.calls.append("commit")
        self._answer(next(self._commits))

    def abort_transaction(self, timeout: float) -> None:
        self.calls.append("abort")
        self._answer(next(self._aborts))

    @staticmethod
    def _answer(err: KafkaError | None) -> None:
        if err is not None:
            raise KafkaException(err)


def _runner(producer: _Producer, make_producer: object = None) -> Transactions:
    return Transactions(
        {"transactional.id": "lagpilot-actuator-a1"},
        {"group.instance.id": "a1"},
        "lagpilot.control",
        "a1",
        _NoWait(),  # type: ignore[arg-type]
        make_producer=lambda _cfg: producer,
        make_consumer=lambda _cfg: SimpleNamespace(),
    )


class _NoWait:
    """run()'s stop event, without the backoff's real waits."""

    stopping = False

    def wait(self, timeout: float) -> bool:
        return self.stopping


def test_abort_is_retried_through_a_broker_restart_and_the_batch_is_reprocessed() -> None:
    p = _Producer(commits=[], aborts=[_err(retriable=True), _err(retriable=True), None])
    assert _runner(p).settle(_err(abort=True)) is False
    # never a commit once the broker asked for an abort, even when the abort's own
    # error is only "retriable"
    assert p.calls == ["abort", "abort", "abort"]


def test_a_retriable_commit_is_retried_until_it_commits() -> None:
    p = _Producer(commits=[_err(retriable=True), None], aborts=[])
    assert _runner(p).settle(_err(retriable=True)) is True
    assert p.calls == ["commit", "commit"]


def test_a_commit_retry_that_turns_abortable_aborts() -> None:
    p = _Producer(commits=[_err(abort=True)], aborts=[None])
    assert _runner(p).settle(_err(retriable=True)) is False
    assert p.calls == ["commit", "abort"]


def test_fenced_after_its_renewals_in_the_window_is_a_twin_and_ends_the_actuator() -> None:
    p = _Producer(commits=[], aborts=[])
    r = _runner(p)
    now = runner_mod.time.monotonic()
    for ago_s in range(runner_mod.MAX_RENEWALS):
        r.producer_renewals.add(now - ago_s)
    with pytest.raises(RuntimeError, match="LAGPILOT_ACTUATOR_ID"):
        r.settle(_err(fatal=True, code=KafkaError._FENCED))
    assert p.calls == []


def test_two_failovers_in_a_minute_renew_the_producer_twice() -> None:
    """bench-faults row 2: the offsets leader, then the controller, restarted within a
    minute; each fenced the producer. Two renewals in the window are a failover's, not a
    twin's."""
    _Renewed.made = []
    r = _runner(_Producer(commits=[], aborts=[]))
    r._make_producer = _Renewed
    fenced = _err(fatal=True, code=KafkaError.INVALID_PRODUCER_EPOCH)
    assert r.settle(fenced) is False
    assert r.settle(fenced) is False
    assert len(_Renewed.made) == 2 and r.producer is _Renewed.made[-1]


def test_renewals_older_than_the_window_are_forgotten() -> None:
    from actuators.transactions import MAX_RENEWALS, TWIN_WINDOW_S, Renewals

    got = Renewals()
    for i in range(MAX_RENEWALS):
        got.add(100.0 + i)
    assert got.exhausted(100.0 + MAX_RENEWALS)
    assert not got.exhausted(100.0 + TWIN_WINDOW_S + 0.5)  # the first fell out of the window


class _Renewed:
    """A new transactional producer: records its config and init_transactions calls."""

    made: list[_Renewed] = []

    def __init__(self, config: dict[str, object]) -> None:
        self.config = config
        self.inits: list[float] = []
        _Renewed.made.append(self)

    def init_transactions(self, timeout: float) -> None:
        self.inits.append(timeout)


@pytest.mark.parametrize(
    "answer",
    [
        # seen in bench-faults row 2: after a coordinator's node restarted, the abort was
        # answered INVALID_TXN_STATE (neither retriable nor abortable) ...
        _err(code=KafkaError.INVALID_TXN_STATE),
        # ... or "fenced": the coordinator expired the transaction while the node was down
        _err(fatal=True, code=KafkaError._FENCED),
    ],
    ids=["invalid_txn_state", "fenced_by_a_timeout"],
)
def test_a_transaction_the_producer_cannot_end_is_ended_by_a_new_producer(
    answer: KafkaError,
) -> None:
    _Renewed.made = []
    p = _Producer(commits=[], aborts=[answer])
    r = _runner(p)
    r._make_producer = _Renewed
    assert r.settle(_err(abort=True)) is False
    assert p.calls == ["abort"]
    [renewed] = _Renewed.made
    assert renewed.inits == [30]
    assert renewed.config["transactional.id"] == "lagpilot-actuator-a1"
    assert r.producer is renewed


def test_a_broker_away_longer_than_the_settle_window_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = iter(range(0, 10_000, 50))
    monkeypatch.setattr(runner_mod.time, "monotonic", lambda: float(next(clock)))
    p = _Producer(commits=[], aborts=[_err(retriable=True)] * 100)
    with pytest.raises(RuntimeError, match="could not end a transaction"):
        _runner(p).settle(_err(abort=True))
    assert 0 < p.calls.count("abort") < 100


def test_a_stop_while_the_broker_is_away_ends_the_wait_at_once() -> None:
    p = _Producer(commits=[], aborts=[_err(retriable=True)] * 5)
    r = _runner(p)
    r.stop.stopping = True  # type: ignore[attr-defined]
    with pytest.raises(runner_mod.Stopped):
        r.settle(_err(abort=True))
    assert p.calls == ["abort"]


class _Consumer:
    """A control consumer: records subscribe and close."""

    made: list[_Consumer] = []

    def __init__(self, config: dict[str, object], *, close_blocks: bool = False) -> None:
        self.config, self.subscribed, self.closed = config, [], False
        self._blocks = close_blocks
        _Consumer.made.append(self)

    def subscribe(self, topics: list[str]) -> None:
        self.subscribed.append(topics)

    def close(self) -> None:
        if self._blocks:
            import time

            time.sleep(3600)  # a consumer whose coordinator is away (left behind, daemon)
        self.closed = True


FENCED_MEMBER = KafkaError(
    KafkaError.FENCED_INSTANCE_ID, "Fatal consumer error: fenced", fatal=True
)


def test_a_fenced_control_consumer_is_renewed_under_the_same_instance_id() -> None:
    """librdkafka#3437, seen in bench-faults row 2: after the coordinator failed over, the
    static member is fenced by itself. A new consumer rejoins; the old one is closed."""
    _Consumer.made = []
    r = _runner(_Producer(commits=[], aborts=[]))
    r._make_consumer = _Consumer
    old = r.consumer = _Consumer({"group.instance.id": "a1"})
    r.renew_consumer(FENCED_MEMBER)
    assert r.consumer is not old and isinstance(r.consumer, _Consumer)
    assert r.consumer.config["group.instance.id"] == "a1"
    assert r.consumer.subscribed == [["lagpilot.control"]]
    assert old.closed


def test_a_consumer_fenced_again_after_its_renewals_in_the_window_is_a_twin() -> None:
    """Two coordinator moves in a minute (bench-faults row 2) renew it twice; a twin fences
    it at every renewal, and the one after MAX_RENEWALS stops the actuator."""
    _Consumer.made = []
    r = _runner(_Producer(commits=[], aborts=[]))
    r._make_consumer = _Consumer
    r.consumer = _Consumer({})
    for _ in range(runner_mod.MAX_RENEWALS):
        r.renew_consumer(FENCED_MEMBER)
    assert runner_mod.MAX_RENEWALS >= 2  # a failover of the offsets leader, then the controller
    with pytest.raises(RuntimeError, match="LAGPILOT_ACTUATOR_ID"):
        r.renew_consumer(FENCED_MEMBER)
    assert len(_Consumer.made) == 1 + runner_mod.MAX_RENEWALS  # none after the twin is seen


def test_a_close_that_blocks_is_left_behind_within_its_wait() -> None:
    import time

    from actuators.transactions import close_within

    started = time.monotonic()
    assert close_within(_Consumer({}, close_blocks=True), 0.3, "a stuck consumer") is False
    assert time.monotonic() - started < 2.0
    done = _Consumer({})
    assert close_within(done, 5.0, "a consumer") is True and done.closed


def test_a_fatal_consumer_error_is_known_by_its_code_or_its_flag() -> None:
    """What librdkafka hands the consumer after a fence: code _FATAL, flag not set (seen in
    bench-faults row 2, where the flag alone let the actuator idle with a dead consumer)."""
    from actuators.transactions import is_fatal

    assert is_fatal(KafkaError(KafkaError._FATAL, "Fatal error: Broker: Static consumer fenced"))
    assert is_fatal(FENCED_MEMBER)
    assert not is_fatal(KafkaError(KafkaError._PARTITION_EOF, "eof"))
    assert not is_fatal(None)


class _Blocked(_Producer):
    """A transaction whose send_offsets_to_transaction never returns (librdkafka#5456: the
    call ignores its timeout while the group's coordinator is away)."""

    def __init__(self) -> None:
        super().__init__(commits=[], aborts=[])
        self.released = threading.Event()

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def produce(self, *args: object, **kwargs: object) -> None:
        self.calls.append("produce")

    def send_offsets_to_transaction(self, *args: object) -> None:
        self.calls.append("send_offsets")
        self.released.wait(30)  # until the test ends: the call outlives its deadline


def test_send_offsets_blocked_past_its_deadline_is_ended_by_a_new_producer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The transaction is given up at the deadline (not after the 43 s row 2 saw), a new
    producer with the same transactional id ends it, the batch is reprocessed (False), and
    the renewal is not counted as a fence (three of these in a minute are no twin)."""
    monkeypatch.setattr(runner_mod, "SEND_OFFSETS_S", 0.2)
    _Renewed.made = []
    blocked = _Blocked()
    r = _runner(blocked)  # type: ignore[arg-type]
    r._make_producer = _Renewed
    r.consumer = SimpleNamespace(consumer_group_metadata=lambda: "meta")
    offsets = [TopicPartition("lagpilot.control", 0, 5)]
    started = time.monotonic()
    try:
        assert r.commit("lagpilot.outcomes", [("a1", {"x": 1})], offsets, lambda _k: None) is False
    finally:
        blocked.released.set()
    assert time.monotonic() - started < 3.0
    assert blocked.calls == ["begin", "produce", "send_offsets"]  # never committed
    [renewed] = _Renewed.made
    assert renewed.inits == [30] and r.producer is renewed
    assert not r.producer_renewals.at_s


def test_send_offsets_errors_reach_the_settling_as_before() -> None:
    class _Refused(_Blocked):
        def send_offsets_to_transaction(self, *args: object) -> None:
            self.calls.append("send_offsets")
            raise KafkaException(_err(abort=True))

        def abort_transaction(self, timeout: float) -> None:
            self.calls.append("abort")

    p = _Refused()
    r = _runner(p)  # type: ignore[arg-type]
    r.consumer = SimpleNamespace(consumer_group_metadata=lambda: "meta")
    offsets = [TopicPartition("lagpilot.control", 0, 5)]
    assert r.commit("lagpilot.outcomes", [], offsets, lambda _k: None) is False
    assert p.calls == ["begin", "send_offsets", "abort"]
