"""End to end through the real pipeline: a lagging partition -> exactly one explained,
signed, schema-valid action on the control topic; a halt stops further actions."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer

from bench.support.harness import (
    PipelineProcess,
    ScriptedCommitter,
    create_topic,
    producer,
)
from pipeline.decide.control import control_action, publish_actions
from schemas import ActionType, validate, verify
from tests.support.pipeline import wait_ready

KEY = b"policy-e2e-signing-key-0123456789"
POLICY = """
mode = "act"
policy_version = "e2e-1"
[thresholds.default]
time_lag_s = 1.0
offset_lag = 1000000
accel_per_s2 = 1000000.0
enter_windows = 2
exit_windows = 40
[allow]
partition_topics = []
throttle_client_ids = []
[actions]
enabled = ["spread_partition", "restore_partition"]
ttl_s = 30
[hotspot]
ratio = 3.0
lanes = 6
[cooldowns]
default_s = 30
"""


def _actions(bootstrap: str, topic: str) -> list[dict]:
    from bench.support.control_loop import read_topic

    return [a for a in read_topic(bootstrap, topic) if a.get("event") == "action"]


def test_a_lagging_partition_gets_one_signed_explained_action_and_halt_stops_more(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:6]
    topic, group, control = f"lpp-{run}", f"g-pol-{run}", f"lagpilot.control.e2e-{run}"
    create_topic(kafka_bootstrap, topic, 4)
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    pipe = PipelineProcess(
        kafka_bootstrap, f"{topic}$", tmp_path / "state",
        LAGPILOT_RUN_POLICY="true", LAGPILOT_POLICY_FILE=str(policy),
        LAGPILOT_CONTROL_TOPIC=control, LAGPILOT_SIGNING_KEY=KEY.decode(),
    ).start()  # fmt: skip
    stop = threading.Event()
    stalled: set[int] = set()

    def load() -> None:
        p = producer(kafka_bootstrap)
        c = ScriptedCommitter(kafka_bootstrap, group)
        produced = [0] * 4
        while not stop.is_set():
            for part in range(4):
                for _ in range(5):
                    p.produce(topic, b"x", partition=part)
                produced[part] += 5
            p.flush(5)
            for part in range(4):
                if part not in stalled:
                    c.commit(topic, part, produced[part])
            time.sleep(0.1)
        c.close()

    t = threading.Thread(target=load)
    try:
        wait_ready(pipe)
        t.start()
        time.sleep(4)  # every partition committed and modelled, all OK
        assert _actions(kafka_bootstrap, control) == []
        stalled.add(2)  # its consumer stalls; the others keep up
        deadline = time.monotonic() + 60
        actions: list[dict] = []
        while time.monotonic() < deadline and not actions:
            time.sleep(1)
            actions = _actions(kafka_bootstrap, control)
        time.sleep(3)  # anything else it would send for this incident
        actions = _actions(kafka_bootstrap, control)
        assert len(actions) == 1, actions
        (a,) = actions
        validate(a)
        verify(a, KEY)
        assert a["type"] == "spread_partition" and a["mode"] == "act"
        assert a["params"]["partition"] == 2 and a["params"]["group"] == group
        assert a["reason"]["partition_time_lag_s"] >= 1.0  # the numbers that triggered it

        # the kill switch: after a halt, a second hot partition gets nothing
        halt = control_action(ActionType.HALT, "all", now_ms=int(time.time() * 1000),
                              reason="e2e test")  # fmt: skip
        publish_actions(Producer({"bootstrap.servers": kafka_bootstrap}), [halt], KEY,
                        topic=control)  # fmt: skip
        time.sleep(1)
        stalled.add(0)
        time.sleep(8)
        after = [x for x in _actions(kafka_bootstrap, control) if x["type"] not in ("halt",)]
        assert after == actions, after
    finally:
        stop.set()
        if t.is_alive():
            t.join()
        pipe.stop()
