"""Only signed, valid, unexpired act-mode worker actions for our group become commands."""

from __future__ import annotations

from typing import Any

import pytest

from actuators.workers import Command, read_command
from actuators.workers.control import SeenIds
from schemas import ActionType, encode, sign, stable_id

KEY = b"workers-unit-test-key-0123456789"
NOW = 1_700_000_000_000


def action(type_: str, params: dict[str, Any], **over: Any) -> dict[str, Any]:
    event = {
        "event": "action",
        "v": 1,
        "id": stable_id(type_, params),
        "type": type_,
        "target": "group:workers",
        "params": params,
        "reason": {},
        "mode": "act",
        "issued_at": NOW - 1000,
        "expires_at": NOW + 60_000,
        "policy_version": "test",
    }
    event.update(over)
    return sign(event, KEY)


def read(event: dict[str, Any] | bytes, group: str = "workers") -> Command | str:
    payload = event if isinstance(event, bytes) else encode(event)
    return read_command(payload, group=group, key=KEY, now_ms=NOW)


SPREAD = {"group": "workers", "topic": "docs", "partition": 3, "lanes": 8, "pool": None}


def test_spread_for_our_group_is_a_command() -> None:
    got = read(action("spread_partition", SPREAD))
    assert got == Command(
        stable_id("spread_partition", SPREAD),
        ActionType.SPREAD_PARTITION,
        topic="docs",
        partition=3,
        lanes=8,
        pool=None,
        expires_at=NOW + 60_000,
    )


def test_handoff_names_the_pool() -> None:
    got = read(action("spread_partition", {**SPREAD, "pool": "big"}))
    assert isinstance(got, Command) and got.pool == "big"


@pytest.mark.parametrize(("scope", "want"), [("all", True), ("workers", True), ("other", False)])
def test_halt_scope(scope: str, want: bool) -> None:
    got = read(action("halt", {"scope": scope}))
    assert isinstance(got, Command) is want
    if not want:
        assert got == "other_group"


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        (b"not json", "malformed"),
        (action("restore_partition", {"group": "workers", "topic": "t"}), "schema"),
        ({**action("halt", {"scope": "all"}), "signature": "0" * 64}, "bad_signature"),
        (action("halt", {"scope": "all"}, mode="recommend"), "recommend"),
        (action("halt", {"scope": "all"}, expires_at=NOW - 1), "expired"),
        (action("release_producer", {"entity": "client-id", "name": "a"}), "not_for_workers"),
        (action("restore_partition", {"group": "x", "topic": "t", "partition": 0}), "other_group"),
    ],
)
def test_rejections_are_named(event: dict[str, Any] | bytes, reason: str) -> None:
    assert read(event) == reason


def test_forged_event_is_forged_even_for_another_group() -> None:
    other = action("restore_partition", {"group": "x", "topic": "t", "partition": 0})
    assert (
        read_command(encode(other), group="workers", key=b"another-key-0123456789", now_ms=NOW)
        == "bad_signature"
    )


def test_unsigned_event_is_rejected() -> None:
    event = action("halt", {"scope": "all"})
    del event["signature"]
    assert read(event) == "schema"  # the schema requires the signature field first


def test_seen_ids_act_once_and_stay_bounded() -> None:
    seen = SeenIds(size=2)
    assert seen.add("a") and not seen.add("a")
    assert seen.add("b") and seen.add("c")
    assert seen.add("a")  # evicted: the oldest id is forgotten first
