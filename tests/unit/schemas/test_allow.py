"""One allow-list rule: the policy proposes and the actuator applies by the same answer."""

from __future__ import annotations

import pytest

from actuators.settings import parse_policy
from pipeline.decide.policy_config import config_from_mapping
from schemas.allow import throttle_allowed, topic_allowed

GLOBS = ("agent-*", "ingest-?", "exact")


@pytest.mark.parametrize(
    ("entity", "name", "allowed"),
    [
        ("client-id", "agent-7", True),
        ("client-id", "ingest-a", True),
        ("client-id", "exact", True),
        ("client-id", "other", False),
        ("client-id-prefix", "agent-", True),  # covered: every id it throttles matches
        ("client-id-prefix", "ingest-", False),  # "ingest-?" does not cover "ingest-ab"
        ("client-id-prefix", "exact", False),  # not a glob ending in *
    ],
)
def test_policy_and_actuator_give_the_same_answer(entity: str, name: str, allowed: bool) -> None:
    assert throttle_allowed(entity, name, GLOBS) is allowed
    doc = {"allow": {"throttle_client_ids": list(GLOBS), "partition_topics": ["docs*"]}}
    assert parse_policy(doc).allow.allows_throttle(entity, name) is allowed
    assert config_from_mapping(doc).may_throttle(name, entity) is allowed


def test_empty_lists_allow_nothing() -> None:
    assert not topic_allowed("docs", ()) and not throttle_allowed("client-id", "a", ())
    assert topic_allowed("docs-1", ("docs*",))
