"""Worker outcome events: schema-valid, keyed per instance, optional fields left out."""

from __future__ import annotations

import pytest

from actuators.workers.outcomes import (
    HALTED,
    HANDOFF_STARTED,
    SPREAD,
    outcome_key,
    worker_outcome,
)
from schemas import EventError, validate


def test_a_spread_report_validates_and_is_keyed_by_action_and_instance() -> None:
    event = worker_outcome(action_id="a1", action_type="spread_partition", did=SPREAD,
                           group="g", instance="w-1", host="h", now_ms=5,
                           topic="docs", partition=3, lanes=8)  # fmt: skip
    validate(event)
    assert outcome_key(event) == b"a1|w-1"
    assert (event["topic"], event["partition"], event["lanes"]) == ("docs", 3, 8)
    assert "pool" not in event and "offset" not in event


def test_halt_and_handoff_reports_validate() -> None:
    validate(worker_outcome(action_id="a2", action_type="halt", did=HALTED, group="g",
                            instance="w-1", host="h", now_ms=5))  # fmt: skip
    validate(worker_outcome(action_id="a3", action_type="spread_partition", did=HANDOFF_STARTED,
                            group="g", instance="w-1", host="h", now_ms=5, topic="t",
                            partition=0, pool="bigmem", offset=0))  # fmt: skip


def test_an_unknown_step_is_refused_by_the_schema() -> None:
    event = worker_outcome(action_id="a", action_type="halt", did="exploded", group="g",
                           instance="w", host="h", now_ms=1)  # fmt: skip
    with pytest.raises(EventError):
        validate(event)
