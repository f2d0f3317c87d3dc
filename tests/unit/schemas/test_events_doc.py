"""docs/events.md cannot rot: every ```json example there is valid against its schema.

Examples whose schema file does not exist yet are still parsed (they must be JSON events);
the action and outcome examples, whose schemas exist, must all be present.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
import pytest

from schemas import ActionType, OutcomeResult, validate, verify

DOC = Path(__file__).resolve().parents[3] / "docs" / "events.md"
DEMO_KEY = b"demo-signing-key-not-a-secret"


def examples() -> list[dict[str, Any]]:
    blocks = re.findall(r"```json\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    return [orjson.loads(block) for block in blocks]


def has_schema(event: dict[str, Any]) -> bool:
    name = f"{event['event']}.v{event['v']}.json"
    return resources.files("schemas").joinpath(name).is_file()


def test_every_example_is_an_event_and_those_with_a_schema_validate() -> None:
    found = examples()
    assert len(found) >= 12
    for event in found:
        assert isinstance(event.get("event"), str) and isinstance(event.get("v"), int), event
        if has_schema(event):
            validate(event)


def test_every_action_type_has_a_signed_example() -> None:
    actions = [e for e in examples() if e["event"] == "action"]
    assert {a["type"] for a in actions} == {str(t) for t in ActionType}
    for action in actions:
        verify(action, DEMO_KEY)  # the doc says they are signed with the demo key


def test_outcome_examples_are_present() -> None:
    outcomes = [e for e in examples() if e["event"] == "outcome"]
    assert outcomes and {o["result"] for o in outcomes} <= {str(r) for r in OutcomeResult}
    assert {"applied", "failed"} <= {o["result"] for o in outcomes}


@pytest.mark.parametrize(
    "kind",
    [
        "watermarks",
        "commit",
        "partition_lag",
        "group_lag",
        "offset_deleted",
        "group_health",
        "input_state",
        "owners",
        "worker_outcome",
        "producer_rates",
        "action_request",
        "request_verdict",
    ],
)
def test_every_published_event_kind_is_documented(kind: str) -> None:
    assert kind in {e["event"] for e in examples()}
