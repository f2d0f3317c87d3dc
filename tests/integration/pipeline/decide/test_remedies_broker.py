"""Diagnose, act, verify on the real broker: the pipeline (policy on) beside a real actuator
(Kafka backend: client quotas) writing its outcomes to ``lagpilot.outcomes``.

- inflow burst: two producers write a topic, the test publishes their ``producer_rates``
  (as the SDK's producer wrapper does); one floods. Exactly that client id is throttled,
  the actuator applies the quota, the step is verified once the group catches up, and the
  throttle is released after (the quota is gone);
- hotspot: one partition's work slows to a fifth of its inflow (it moves, and falls
  behind; a partition nobody consumes is no hotspot). It is spread; the actuator records
  the spread (a worker action; the scripted consumer obeys none) and, with no effect by
  the deadline, it is handed off to the pool.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from actuators.backends import KafkaBackend
from bench.support.actuator_harness import KEY, Harness
from bench.support.control_loop import read_topic
from bench.support.harness import PipelineProcess, ScriptedLoad, create_topic
from schemas import encode, topics, validate, verify
from tests.support.pipeline import wait_ready

POLICY = """
mode = "act"
policy_version = "e2e-remedies"
[thresholds.default]
time_lag_s = 1.5
offset_lag = 100000000
accel_per_s2 = 100000000.0
exit_ratio = 0.5
enter_windows = 2
exit_windows = 8
[allow]
throttle_client_ids = ["lp-*"]
partition_topics = []
[cooldowns]
default_s = 5
[budget]
actions_per_minute = 100
[throttle]
start_bytes_per_s = 1048576
floor_bytes_per_s = 4096
lease_s = 30
[hotspot]
ratio = 3.0
lanes = 4
pool = "dedicated"
[ladders.default]
hotspot = ["spread_partition:6", "handoff_partition:30"]
inflow_burst = ["throttle_producer:20"]
"""


class SharedOutcomes(Harness):
    """The actuator writes to ``lagpilot.outcomes``, where the pipeline reads outcomes."""

    @property
    def outcomes(self) -> str:
        return topics.OUTCOMES


def _wait(what: str, found: Any, timeout_s: float, pipe: PipelineProcess) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = found()
        if got:
            return got
        time.sleep(1)
    raise AssertionError(f"no {what} in {timeout_s} s:\n{pipe.log_tail(60)}")


def test_burst_throttles_the_flooder_verified_released_and_hotspot_spread_then_handed_off(
    kafka_bootstrap: str, tmp_path: Path, unique_name: str
) -> None:
    run = uuid.uuid4().hex[:6]
    burst_topic, hot_topic = f"lpr-{run}-burst", f"lpr-{run}-hot"
    burst_group, hot_group = f"g-burst-{run}", f"g-hot-{run}"
    flooder, steady = f"lp-{run}-flood", f"lp-{run}-steady"
    for t in (burst_topic, hot_topic):
        create_topic(kafka_bootstrap, t, 4)
    harness = SharedOutcomes(kafka_bootstrap, unique_name)
    backend = KafkaBackend(kafka_bootstrap, client_id="lagpilot-test")
    harness.start(backend)
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    pipe = PipelineProcess(
        kafka_bootstrap, f"lpr-{run}-.*", tmp_path / "state",
        LAGPILOT_RUN_POLICY="true", LAGPILOT_POLICY_FILE=str(policy),
        LAGPILOT_CONTROL_TOPIC=harness.control, LAGPILOT_SIGNING_KEY=KEY.decode(),
    ).start()  # fmt: skip

    flooding = threading.Event()
    stop = threading.Event()

    def rates() -> None:  # what the SDK's producer wrapper publishes, once every 0.5 s
        p = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0})
        while not stop.is_set():
            now = int(time.time() * 1000)
            for cid, bps in ((flooder, 200_000.0 if flooding.is_set() else 10_000.0),
                             (steady, 10_000.0)):  # fmt: skip
                e = {"event": "producer_rates", "v": 1, "client_id": cid, "topic": burst_topic,
                     "records_per_s": bps / 64, "bytes_per_s": bps, "window_s": 0.5,
                     "at_ms": now, "host": "test", "instance": "1"}  # fmt: skip
                validate(e)
                p.produce(topics.PRODUCERS, key=f"{cid}|{burst_topic}".encode(), value=encode(e))
            p.flush(5)
            time.sleep(0.5)

    def actions() -> list[dict[str, Any]]:
        """Ours only: the shared lagpilot.watermarks topic shows this pipeline other groups
        of the shared broker too."""
        return [a for a in read_topic(kafka_bootstrap, harness.control)
                if a.get("event") == "action" and run in a["target"]]  # fmt: skip

    def outcomes(ids: set[str]) -> list[dict[str, Any]]:
        return [o for o in read_topic(kafka_bootstrap, topics.OUTCOMES)
                if o.get("action_id") in ids and o.get("event") != "intent"]  # fmt: skip

    publisher = threading.Thread(target=rates)
    burst = ScriptedLoad(kafka_bootstrap, burst_topic, burst_group, rate=20, partitions=4)
    hot = ScriptedLoad(kafka_bootstrap, hot_topic, hot_group, rate=20, partitions=4)
    try:
        wait_ready(pipe)
        publisher.start()
        with burst, hot:
            time.sleep(8)  # modelled, calm: the usual rates are learnt
            assert actions() == []
            # -- the flood: one client's rate jumps, consumers hold their 20 msgs/s
            burst.consume_rate = 20.0
            burst.rate = 120.0
            flooding.set()
            hot.slow(2, 4.0)  # and, on the other topic, one partition's work slows: hot

            throttles = _wait("throttle", lambda: [
                a for a in actions() if a["type"] == "throttle_producer"], 90, pipe)  # fmt: skip
            for a in throttles:
                validate(a)
                verify(a, KEY)
            assert {a["target"] for a in throttles} == {f"client-id:{flooder}"}
            first = throttles[0]
            assert first["reason"]["cause"] == "inflow_burst"
            assert first["reason"]["evidence"]["culprits"] == [flooder]
            assert first["params"]["producer_byte_rate"] == 10_000  # its usual rate
            _wait("applied throttle", lambda: [o for o in outcomes({first["id"]})
                                               if o["result"] == "applied"], 60, pipe)  # fmt: skip
            assert backend.quotas.producer_rate("client-id", flooder) == 10_000
            assert backend.quotas.producer_rate("client-id", steady) is None

            # -- the flood ends and the group catches up: verified, then released
            flooding.clear()
            burst.consume_rate = None
            verdicts = _wait("verification", lambda: [
                o for o in outcomes({first["id"]}) if o["event"] == "verification"
            ], 90, pipe)  # fmt: skip
            validate(verdicts[0])
            assert verdicts[0]["result"] == "verified" and verdicts[0]["cause"] == "inflow_burst"
            released = _wait("release", lambda: [
                a for a in actions() if a["type"] == "release_producer"], 90, pipe)  # fmt: skip
            assert [a["target"] for a in released] == [f"client-id:{flooder}"]
            _wait("applied release", lambda: [o for o in outcomes({released[0]["id"]})
                                              if o["result"] == "applied"], 60, pipe)  # fmt: skip
            assert backend.quotas.producer_rate("client-id", flooder) is None

            # -- the hotspot: spread, recorded by the actuator, no effect, handed off
            spreads = _wait("hand-off", lambda: [
                a for a in actions() if a["type"] == "spread_partition"
                and a["params"]["pool"] == "dedicated"], 120, pipe)  # fmt: skip
            every = [a for a in actions() if a["type"] == "spread_partition"]
            assert [a["params"]["pool"] for a in every] == [None, "dedicated"]
            assert {a["params"]["partition"] for a in every} == {2}
            assert every[0]["reason"]["cause"] == "hotspot"
            no_effect = [o for o in outcomes({every[0]["id"]}) if o["event"] == "verification"]
            assert [v["result"] for v in no_effect] == ["no_effect"]
            assert spreads[0]["params"]["group"] == hot_group
    finally:
        stop.set()
        if publisher.is_alive():
            publisher.join()
        pipe.stop()
        for runner, _, _ in list(harness.runners):
            harness.stop(runner)
