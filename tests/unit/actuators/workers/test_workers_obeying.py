"""How the poll thread obeys halt and resume (obeying.py), without a broker: a workload
halt stops processing and pauses every partition until resumed, an actions halt undoes
lagpilot's spreads and refuses new ones until lifted, and each instance says what it did
on the outcomes topic."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from schemas import ActionType
from tests.support.workers import Msg, Plain, command, plain, wait_until, wire

TP = ("t", 0)


@pytest.fixture
def seen() -> list[int]:
    return []


@pytest.fixture
def engine(seen: list[int]) -> Iterator[Plain]:
    e = plain(lambda msg, ctx: seen.append(msg.offset()), lanes=1)
    yield e
    e._shutdown()


def test_a_workload_halt_stops_processing_and_pauses_until_resumed(
    engine: Plain, seen: list[int]
) -> None:
    fakes = wire(engine, assigned=[TP])
    fakes.control.commands = [command(ActionType.HALT, scope="workload:g")]
    engine._poll_once()
    assert engine._dispatcher.halted and TP in fakes.consumer.paused
    fakes.consumer.batches = [[Msg(0), Msg(1)]]  # fetched before the pause took effect
    engine._poll_once()
    assert seen == []  # queued, not run
    fakes.control.commands = [command(ActionType.RESUME, scope="workload:g")]
    engine._poll_once()
    wait_until(lambda: seen == [0, 1])
    assert TP in fakes.consumer.resumed
    assert fakes.reporter.did() == ["halted", "resumed"]
    assert all(
        e["group"] == "g" and e["instance"] == engine.instance for e in fakes.reporter.events
    )


def test_an_actions_halt_restores_spreads_and_refuses_new_ones_until_lifted(
    engine: Plain,
) -> None:
    fakes = wire(engine, assigned=[TP, ("t", 1)])
    engine._dispatcher.set_lanes(TP, 4)  # spread earlier
    fakes.control.commands = [command(ActionType.HALT, scope="actions:g")]
    engine._poll_once()
    assert engine.lanes(*TP) == 1 and engine.stats()["restored_on_halt"] == 1
    assert not engine._dispatcher.halted  # processing goes on
    spread = command(ActionType.SPREAD_PARTITION, ("t", 1), lanes=3)
    fakes.control.commands = [spread]
    engine._poll_once()
    assert engine.applied == [] and engine.stats()["refused_spread_halted"] == 1
    fakes.control.commands = [command(ActionType.RESUME, scope="actions:g"), spread]
    engine._poll_once()
    assert engine.applied == [spread] and engine.actions_halts == set()


def test_lifting_the_global_actions_halt_lifts_every_actions_halt(engine: Plain) -> None:
    fakes = wire(engine, assigned=[TP])
    fakes.control.commands = [command(ActionType.HALT, scope="actions:g"),
                              command(ActionType.HALT, scope="actions")]  # fmt: skip
    engine._poll_once()
    assert engine.actions_halts == {"actions:g", "actions"}
    fakes.control.commands = [command(ActionType.RESUME, scope="actions:g")]
    engine._poll_once()
    assert engine.actions_halts == {"actions"}  # the global one still holds
    fakes.control.commands = [command(ActionType.HALT, scope="actions:g"),
                              command(ActionType.RESUME, scope="actions")]  # fmt: skip
    engine._poll_once()
    assert engine.actions_halts == set()


def test_obeying_with_tracing_on_runs_the_same_command(
    engine: Plain, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runtime import tracing

    spans: list[str] = []
    monkeypatch.setattr(tracing, "on", lambda: True)

    class Span:
        def __init__(self, name: str, **_: object) -> None:
            spans.append(name)

        def __enter__(self) -> None:
            return None

        def __exit__(self, *exc: object) -> None:
            return None

    monkeypatch.setattr(tracing, "span", Span)
    fakes = wire(engine, assigned=[TP])
    spread = command(ActionType.SPREAD_PARTITION, TP, lanes=2)
    fakes.control.commands = [spread]
    engine._poll_once()
    assert engine.applied == [spread] and spans == ["lagpilot.worker.obey"]


def test_a_halt_lets_running_messages_finish() -> None:
    gate = threading.Event()
    done: list[int] = []
    engine = plain(lambda msg, ctx: (gate.wait(5), done.append(msg.offset())), lanes=1)
    try:
        fakes = wire(engine, assigned=[TP])
        fakes.consumer.batches = [[Msg(0), Msg(1)]]
        engine._poll_once()  # 0 runs (held at the gate), 1 waits in its lane
        fakes.control.commands = [command(ActionType.HALT, scope="workload:g")]
        engine._poll_once()
        gate.set()
        wait_until(lambda: done == [0])
        assert engine._dispatcher.positions() == {TP: 1}  # 1 was not started
    finally:
        engine._shutdown()


def test_the_obeying_part_stands_alone_with_what_it_is_given(engine: Plain) -> None:
    """The engine's commands part is built from explicit dependencies: the lanes, the
    assigned partitions, the tally, the engine's hooks and its clients."""
    from actuators.workers.handling import Tally
    from actuators.workers.obeying import Obeying
    from tests.support.workers import FakeReporter

    applied: list[object] = []
    reporter, tally = FakeReporter(), Tally()
    part = Obeying(kind="worker", group="g", host="h", dispatcher=engine._dispatcher,
                   default_lanes=1, assigned={TP}, tally=tally, apply=applied.append,
                   restore_all=lambda: None, control=lambda: None,
                   reporter=lambda: reporter, instance_id=lambda: "w-0")  # fmt: skip
    spread = command(ActionType.SPREAD_PARTITION, TP, lanes=2)
    part.obey(spread)
    part.obey(command(ActionType.HALT, scope="actions:g"))
    assert applied == [spread] and part.actions_halts == {"actions:g"}
    assert reporter.did() == ["halted"] and reporter.events[0]["instance"] == "w-0"
    assert tally.snapshot()["obeyed_spread_partition"] == 1
