"""A pipeline whose state never saw a halt (new, or state lost) obeys the halt kept on the
halts topic from its first message; a workload halt does not stop the policy; role keys:
the pipeline signs as decide and takes halts only from the operator."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.commands.control import main as control_main
from pipeline.decide.policy_config import config_from_mapping
from pipeline.decide.policy_op import PolicyOperator
from schemas.keys import DECIDE, Keyring, SigningKey, read_public_key
from tests.support.state import MemoryState
from tests.unit.pipeline.decide.test_policy_op import T0, summary

CONFIG = {
    "mode": "act", "cooldowns": {"default_s": 2},
    "thresholds": {"default": {"time_lag_s": 10, "enter_windows": 2}},
    "ladders": {"default": {"hotspot": ["spread_partition:2"]}},
}  # fmt: skip


def decisions(op: PolicyOperator) -> list[dict[str, Any]]:
    store, out = MemoryState(), []
    for i in range(4):
        out += op(summary(T0 + i * 250, 40.0), "policy", T0, None, store)
    return out


def test_a_new_pipeline_obeys_the_kept_halt_and_ignores_a_workload_one(
    kafka_bootstrap: str, unique_name: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipeline.commands.keys import new_pair

    _, operator_key, operator_pub = new_pair("operator", tmp_path)
    decide = SigningKey.generate(DECIDE)
    ring = Keyring.of([decide.public(), read_public_key(operator_pub)])
    control = f"{unique_name}.control"
    monkeypatch.setenv("LAGPILOT_PRIVATE_KEY_FILE", str(operator_key))
    base = ["--bootstrap", kafka_bootstrap, "--topic", control]
    config = config_from_mapping(CONFIG)
    broker = {"bootstrap.servers": kafka_bootstrap}

    assert control_main([*base, "halt", "--scope", "workload", "--group", "workers"]) == 0
    acting = PolicyOperator(config, decide, verifier=ring)
    assert acting.adopt_kept_halts(broker, control) == 1
    [spread] = decisions(acting)  # a workload halt leaves the policy deciding
    assert spread["key_id"] == decide.key_id

    assert control_main([*base, "halt", "--scope", "actions", "--group", "workers"]) == 0
    halted = PolicyOperator(config, decide, verifier=ring)
    assert halted.adopt_kept_halts(broker, control) == 2
    assert decisions(halted) == []

    assert control_main([*base, "resume", "--scope", "actions", "--group", "workers"]) == 0
    resumed = PolicyOperator(config, decide, verifier=ring)
    assert resumed.adopt_kept_halts(broker, control) == 1
    assert len(decisions(resumed)) == 1
