"""Intent before the call, reconcile after a crash (actuators/reconcile.py): the pure part.

The ledger keeps an intent until an outcome of its id arrives; ``in_effect`` says, from the
state the backend reads, whether an action's effect is already there; the dry-run backend
on a record file starts from the state its predecessor's calls left.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actuators.backends import DryRunBackend
from actuators.ledger import Ledger
from actuators.reconcile import in_effect, intent, observe
from bench.support.actuator_harness import KEY, action, release, throttle
from schemas import validate

NOW = 1_795_000_000_000
GROW = {"topic": "t", "total": 12}
MOVE = {"topic": "t", "partition": 3, "target_broker": 2}


def _grow() -> dict[str, Any]:
    return action("add_partitions", "topic:t", GROW, key=KEY, now_ms=NOW)


def _move() -> dict[str, Any]:
    return action("transfer_leadership", "topic:t/3", MOVE, key=KEY, now_ms=NOW)


def _throttle(rate: int = 5000) -> dict[str, Any]:
    return throttle("ok-1", rate, key=KEY, now_ms=NOW)


def test_an_intent_is_schema_valid_and_keeps_the_actions_params() -> None:
    a = _throttle()
    got = intent(a, actuator="a1", now_ms=NOW + 1)
    validate(got)
    assert got["action_id"] == a["id"] and got["params"] == a["params"]
    assert got["target"] == "client-id:ok-1" and got["at"] == NOW + 1


def test_the_ledger_keeps_an_intent_until_an_outcome_of_its_id() -> None:
    a, b = _throttle(), _throttle(6000)
    ledger = Ledger().fold_all(
        [intent(a, actuator="a1", now_ms=NOW), intent(b, actuator="a1", now_ms=NOW)]
    )
    assert set(ledger.intents) == {a["id"], b["id"]}
    ledger.fold({"event": "outcome", "action_id": a["id"], "result": "failed", "at": NOW})
    assert set(ledger.intents) == {b["id"]}  # any result ends it, not only applied
    assert ledger.applied == set()  # an intent is not an application


def test_an_intent_read_after_its_outcome_is_ignored() -> None:
    """The actuator folds its own outcome at once; its tail may read the intent later."""
    a = _throttle()
    ledger = Ledger()
    ledger.fold({"event": "outcome", "action_id": a["id"], "result": "applied", "at": NOW})
    ledger.fold(intent(a, actuator="a1", now_ms=NOW))
    assert ledger.intents == {}


def test_worker_outcomes_do_not_end_an_intent() -> None:
    a = _throttle()
    ledger = Ledger().fold_all([intent(a, actuator="a1", now_ms=NOW)])
    ledger.fold({"event": "worker_outcome", "action_id": a["id"], "did": "spread", "at": NOW})
    assert a["id"] in ledger.intents


@pytest.mark.parametrize(
    ("act", "observed", "done"),
    [
        (throttle("x", 5000, key=KEY, now_ms=NOW), 5000, True),
        (throttle("x", 5000, key=KEY, now_ms=NOW), None, False),
        (throttle("x", 5000, key=KEY, now_ms=NOW), 4999, False),  # another rate: set it
        (release("x", key=KEY, now_ms=NOW), None, True),
        (release("x", key=KEY, now_ms=NOW), 5000, False),
        (_grow(), 12, True),
        (_grow(), 16, True),
        (_grow(), 8, False),
        (_move(), 2, True),
        (_move(), 1, False),
    ],
)
def test_in_effect_only_when_the_cluster_shows_the_actions_state(
    act: dict[str, Any], observed: int | None, done: bool
) -> None:
    reason = in_effect(act, observed)
    assert (reason is not None) is done
    if done:
        assert reason is not None and reason.startswith("reconciled:")


def test_a_dry_run_backend_on_a_record_file_starts_where_its_predecessor_left(
    tmp_path: Path,
) -> None:
    record = tmp_path / "calls"
    first = DryRunBackend(str(record))
    first.throttle("client-id", "a", 100)
    first.throttle("client-id", "b", 200)
    first.release("client-id", "b")
    first.add_partitions("t", 12)
    first.transfer_leadership("t", 3, 2)
    first.close()
    again = DryRunBackend(str(record))
    assert again.producer_rate("client-id", "a") == 100
    assert again.producer_rate("client-id", "b") is None
    assert again.partition_count("t") == 12 and again.leader("t", 3) == 2
    assert observe(again, throttle("a", 100, key=KEY, now_ms=NOW)) == 100
    assert again.calls == []  # reading calls nothing
