"""How the actuator ends a transaction whose commit failed (``Runner._settle``).

A node restart makes commit_transaction and abort_transaction fail for seconds with
retriable errors. The actuator must ride that out (retry with backoff), abort when the
broker says the transaction must be aborted (and keep aborting until it is), and stop only
on a fatal error such as being fenced.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from actuators import runner as runner_mod
from actuators.runner import Runner


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


def _runner(producer: _Producer) -> Runner:
    r = Runner.__new__(Runner)
    r._producer = producer
    r.settings = SimpleNamespace(actuator_id="a1")  # type: ignore[assignment]
    r._stop = _NoWait()  # type: ignore[assignment]
    r._renewed_at = float("-inf")
    return r


class _NoWait:
    """run()'s stop event, without the backoff's real waits."""

    stopping = False

    def wait(self, timeout: float) -> bool:
        return self.stopping


def test_abort_is_retried_through_a_broker_restart_and_the_batch_is_reprocessed() -> None:
    p = _Producer(commits=[], aborts=[_err(retriable=True), _err(retriable=True), None])
    assert _runner(p)._settle(_err(abort=True)) is False
    # never a commit once the broker asked for an abort, even when the abort's own
    # error is only "retriable"
    assert p.calls == ["abort", "abort", "abort"]


def test_a_retriable_commit_is_retried_until_it_commits() -> None:
    p = _Producer(commits=[_err(retriable=True), None], aborts=[])
    assert _runner(p)._settle(_err(retriable=True)) is True
    assert p.calls == ["commit", "commit"]


def test_a_commit_retry_that_turns_abortable_aborts() -> None:
    p = _Producer(commits=[_err(abort=True)], aborts=[None])
    assert _runner(p)._settle(_err(retriable=True)) is False
    assert p.calls == ["commit", "abort"]


def test_fenced_again_soon_after_a_renewal_is_a_twin_and_ends_the_actuator() -> None:
    p = _Producer(commits=[], aborts=[])
    r = _runner(p)
    r._renewed_at = runner_mod.time.monotonic()
    with pytest.raises(RuntimeError, match="LAGPILOT_ACTUATOR_ID"):
        r._settle(_err(fatal=True, code=KafkaError._FENCED))
    assert p.calls == []


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
    monkeypatch: pytest.MonkeyPatch, answer: KafkaError
) -> None:
    _Renewed.made = []
    monkeypatch.setattr(runner_mod, "Producer", _Renewed)
    p = _Producer(commits=[], aborts=[answer])
    r = _runner(p)
    r._renewed_at = float("-inf")
    r._producer_config = {"transactional.id": "lagpilot-actuator-a1"}
    assert r._settle(_err(abort=True)) is False
    assert p.calls == ["abort"]
    [renewed] = _Renewed.made
    assert renewed.inits == [30]
    assert renewed.config["transactional.id"] == "lagpilot-actuator-a1"
    assert r._producer is renewed


def test_a_broker_away_longer_than_the_settle_window_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = iter(range(0, 10_000, 50))
    monkeypatch.setattr(runner_mod.time, "monotonic", lambda: float(next(clock)))
    p = _Producer(commits=[], aborts=[_err(retriable=True)] * 100)
    with pytest.raises(RuntimeError, match="could not end a transaction"):
        _runner(p)._settle(_err(abort=True))
    assert 0 < p.calls.count("abort") < 100


def test_a_stop_while_the_broker_is_away_ends_the_wait_at_once() -> None:
    p = _Producer(commits=[], aborts=[_err(retriable=True)] * 5)
    r = _runner(p)
    r._stop.stopping = True  # type: ignore[attr-defined]
    with pytest.raises(runner_mod._Stopped):
        r._settle(_err(abort=True))
    assert p.calls == ["abort"]
