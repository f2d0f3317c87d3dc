"""The control edge without a broker: halt/resume events, publish_actions, the CLI's errors."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from confluent_kafka import KafkaError

from pipeline.commands.control import main
from pipeline.commands.tail import format_row
from pipeline.decide.control import PublishError, control_action, publish_actions
from pipeline.decide.policy import PolicyState, apply_control, build_action
from schemas import ActionType, ConfigError, EventError, sign, validate, verify

KEY = b"s" * 32
NOW = 1_800_000_000_000


class FakeProducer:
    """Records what would be produced; ``fail`` makes every delivery report an error."""

    def __init__(self, fail: Any = None, stuck: int = 0) -> None:
        self.sent: list[tuple[str, bytes, bytes]] = []
        self.callbacks: list[Any] = []
        self.fail, self.stuck = fail, stuck

    def produce(self, topic: str, value: bytes, key: bytes, on_delivery: Any) -> None:
        self.sent.append((topic, key, value))
        self.callbacks.append(on_delivery)

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        for cb in self.callbacks:
            cb(self.fail, None)
        self.callbacks = []
        return self.stuck


def broker_error(retriable: bool) -> KafkaError:
    """What librdkafka hands a delivery callback: a leader moving, or an ACL denial."""
    if retriable:
        return KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION, retriable=True)
    return KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)


def test_halt_is_a_valid_signed_act_event_that_the_policy_honours() -> None:
    halt = control_action(ActionType.HALT, "all", now_ms=NOW, reason="incident 42")
    signed = sign(halt, KEY)
    validate(signed)
    verify(signed, KEY)
    assert halt["mode"] == "act" and halt["target"] == "scope:actions"  # "all" is read as actions
    assert halt["params"] == {"scope": "actions"} and halt["expires_at"] > NOW + 300 * 86_400_000
    assert apply_control(PolicyState(), signed, NOW).halted == {"all": NOW}
    again = control_action(ActionType.HALT, "all", now_ms=NOW + 1, reason="x")
    assert again["id"] != halt["id"]  # each press of the switch is its own event


def test_control_action_rejects_other_types_and_empty_scope() -> None:
    with pytest.raises(ValueError, match="halt or resume"):
        control_action(ActionType.THROTTLE_PRODUCER, "all", now_ms=NOW, reason="x")
    with pytest.raises(ConfigError, match="--scope"):
        control_action(ActionType.HALT, "", now_ms=NOW, reason="x")


def test_publish_signs_validates_and_keys_by_target() -> None:
    producer = FakeProducer()
    actions = [
        control_action(ActionType.HALT, "workers", now_ms=NOW, reason="r"),
        build_action("scale_consumers", "group:workers",
                     {"group": "workers", "replicas": 2, "partitions": 4}, {"rule": "t"},
                     mode="recommend", issued_at_ms=NOW, expires_at_ms=NOW + 1,
                     policy_version="1", window=(NOW,)),
    ]  # fmt: skip
    sent = publish_actions(producer, actions, KEY, topic="ctl")
    assert [(t, k) for t, k, _ in producer.sent] == [("ctl", b"scope:actions:workers"),
                                                     ("ctl", b"group:workers")]  # fmt: skip
    for (_, _, value), event in zip(producer.sent, sent, strict=True):
        assert orjson.loads(value) == event
        verify(event, KEY)


def test_publish_refuses_an_invalid_action_before_producing_anything() -> None:
    producer = FakeProducer()
    good = control_action(ActionType.HALT, "all", now_ms=NOW, reason="r")
    bad = {**good, "params": {"scope": "actions", "extra": 1}}
    with pytest.raises(EventError, match="params"):
        publish_actions(producer, [good, bad], KEY)
    assert producer.sent == []


@pytest.mark.parametrize(("retriable", "stuck"), [(True, 0), (False, 0), (True, 1)])
def test_publish_failures_carry_retriable(retriable: bool, stuck: int) -> None:
    fail = broker_error(retriable) if not stuck else None
    producer = FakeProducer(fail=fail, stuck=stuck)
    with pytest.raises(PublishError) as err:
        publish_actions(producer, [control_action(ActionType.RESUME, "all", now_ms=NOW,
                                                  reason="r")], KEY)  # fmt: skip
    assert err.value.retriable is retriable
    # an ACL denial says so (exit 77) and names the grant; a leader moving does not
    assert err.value.denied is (not retriable)
    assert ("grant lagpilot's principal WRITE on" in str(err.value)) is (not retriable)


def test_cli_without_a_signing_key_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("LAGPILOT_SIGNING_KEY", raising=False)
    monkeypatch.delenv("LAGPILOT_SIGNING_KEY_FILE", raising=False)
    assert main(["--bootstrap", "127.0.0.1:1", "halt"]) == 78  # EX_CONFIG, before any I/O
    assert "LAGPILOT_SIGNING_KEY" in capsys.readouterr().err


def test_tail_rows_are_aligned_and_truncated() -> None:
    row = format_row(["12:00:00.000", "lagpilot.control", "halt", "x" * 50, "act", "ok",
                      "abcdef123456", "detail"])  # fmt: skip
    header = format_row(["time(UTC)", "topic", "type", "target", "mode/result", "sig", "id",
                         "detail"])  # fmt: skip
    assert row.index("act") == header.index("mode/result")
    assert "x" * 31 not in row


def test_since_accepts_seconds_and_durations() -> None:
    from pipeline.commands.tail import parse_since

    assert [parse_since(t) for t in ("90", "90s", "10m", "2h", "1d")] == [90, 90, 600, 7200, 86400]
    for bad in ("soon", "-5", "m"):
        with pytest.raises(ValueError, match="--since"):
            parse_since(bad)


def test_tail_filter_gives_an_outcome_its_actions_group() -> None:
    from pipeline.commands.tail import TailFilter

    keep = TailFilter(groups=["parsers"], types=["throttle_producer"])
    params = {"entity": "client-id", "name": "c"}
    action = {"event": "action", "id": "a1", "type": "throttle_producer", "params": params,
              "reason": {"group": "parsers"}}  # fmt: skip
    other = {**action, "id": "a2", "reason": {"group": "crawlers"}}
    assert keep(action) and not keep(other)
    assert keep({"event": "outcome", "action_id": "a1", "action_type": "throttle_producer"})
    assert not keep({"event": "outcome", "action_id": "a2", "action_type": "throttle_producer"})
    assert not keep({"event": "action", "id": "a3", "type": "halt", "params": {"scope": "parsers"}})
    assert TailFilter()(other)  # no filter: everything


def test_tail_counts_the_instances_that_applied_a_worker_action() -> None:
    from pipeline.commands.tail import InstanceTally, TailFilter, _row

    def report(instance: str, did: str = "spread") -> dict[str, Any]:
        return {"event": "worker_outcome", "v": 1, "action_id": "s1",
                "action_type": "spread_partition", "did": did, "group": "parsers",
                "instance": instance, "host": "h", "topic": "docs", "partition": 4,
                "lanes": 8, "at": 1795000001850}  # fmt: skip

    tally = InstanceTally()
    assert [tally.add(report(i)) for i in ("w1", "w1", "w2")] == [1, 1, 2]  # distinct only
    assert tally.applied_by("s1") == 2 and tally.applied_by("other") == 0
    row = _row("lagpilot.outcomes", report("w2"), None, applied_by=2)
    assert row[2:5] == ["spread_partition", "topic:docs/4", "spread"]
    assert row[-1] == "applied by 2 instances (this: w2, lanes 8)"
    halt = {**report("w1", "halted"), "action_type": "halt"}
    for key in ("topic", "partition", "lanes"):
        del halt[key]
    assert _row("t", halt, None, applied_by=1)[3:5] == ["scope:parsers", "halted"]
    assert TailFilter(groups=["parsers"], types=["spread_partition"])(report("w1"))
    assert not TailFilter(groups=["crawlers"])(report("w1"))


def test_scopes_are_explicit_and_workload_needs_a_group() -> None:
    workload = control_action(ActionType.HALT, "workload", group="g", now_ms=NOW, reason="r")
    validate(sign(workload, KEY))
    assert workload["params"] == {"scope": "workload", "group": "g"}
    assert workload["target"] == "scope:workload:g"
    # a workload halt is the workers' business: the policy keeps deciding
    assert apply_control(PolicyState(), sign(workload, KEY), NOW).halted == {}
    group_actions = control_action(ActionType.HALT, "actions", group="g", now_ms=NOW, reason="r")
    assert apply_control(PolicyState(), sign(group_actions, KEY), NOW).halted == {"g": NOW}
    with pytest.raises(ConfigError, match="--group"):
        control_action(ActionType.HALT, "workload", now_ms=NOW, reason="r")
    unsigned_workload = {**workload, "params": {"scope": "workload"}}
    with pytest.raises(EventError, match="group"):
        validate(sign(unsigned_workload, KEY))


def test_an_actions_params_read_as_key_value_pairs() -> None:
    from pipeline.commands.tail import _row

    action = {"event": "action", "issued_at": 1_796_000_000_000, "type": "spread_partition",
              "target": "group:g/topic:t/4", "mode": "act", "id": "0123456789abcdef",
              "params": {"group": "g", "topic": "t", "partition": 4, "lanes": 12,
                         "pool": None}}  # fmt: skip
    assert _row("lagpilot.control", action, None)[-1] == "group=g topic=t partition=4 lanes=12"
