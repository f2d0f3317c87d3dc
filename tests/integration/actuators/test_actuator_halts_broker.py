"""The actuator and the kill switch's scopes on the real broker: an actuator started after a
global actions halt (kept on the halts topic; no actuator ran to record its outcome) applies
nothing; a workload halt is the workers' business and leaves the actuator acting."""

from __future__ import annotations

import time

import pytest

from actuators.backends import DryRunBackend
from actuators.runner import Runner
from bench.support import actuator_harness as T
from bench.support.actuator_harness import KEY, Harness
from pipeline.commands.control import main as control_main


def cli(harness: Harness, *argv: str) -> None:
    assert control_main(["--bootstrap", harness.bootstrap, "--topic", harness.control, *argv]) == 0


def test_an_actuator_started_after_a_halt_obeys_it(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAGPILOT_SIGNING_KEY", KEY.decode())
    cli(harness, "halt", "--scope", "workload", "--group", "g")  # not the actuator's
    cli(harness, "halt", "--reason", "before any actuator ran")  # --scope actions
    backend = DryRunBackend()
    # before it reads a single control event, the kept state says halted
    first = Runner(harness.settings("first"), signing_key=KEY, policy=T.ACT_POLICY,
                   backend=backend).start(serve_metrics=False)  # fmt: skip
    assert first.ledger.halted
    first.close()
    runner = harness.start(backend)
    blocked = T.throttle("ok-1", 1000, key=KEY, now_ms=int(time.time() * 1000))
    harness.send(blocked)
    got = [o for o in harness.read_outcomes(until=3) if o["action_id"] == blocked["id"]]
    assert [(o["result"], o["reason"].split(":")[0]) for o in got] == [("rejected", "halted")]
    assert backend.calls == []

    cli(harness, "resume")  # read from the control topic like any event
    deadline = time.monotonic() + 5
    while runner.ledger.halted and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not runner.ledger.halted
    fine = T.throttle("ok-2", 2000, key=KEY, now_ms=int(time.time() * 1000))
    harness.send(fine)
    outcomes = harness.read_outcomes(until=5)
    assert [o["result"] for o in outcomes if o["action_id"] == fine["id"]] == ["applied"]
    assert backend.calls == [("throttle", "client-id", "ok-2", 2000)]
