"""One run's control loop for the incident scenarios: its policy file, the pipeline, and
(lagpilot on) the actuator, started the same way for every scenario.

``policy_toml`` writes the skeleton every incident shares (act mode, one entry threshold
on time lag, no offset or acceleration trigger, a quick dead band, cooldowns, a budget,
allow-lists, the enabled actions) plus the scenario's own tables. ``ControlLoop`` starts
the pipeline on the run's topic with the run's control and outcomes topics (the policy
verifies from the outcomes), and the actuator when on; ``stop`` ends both; ``actions`` and
``reported`` read back what they published.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, TopicPartition

from bench.support.harness import PipelineProcess, free_port
from bench.support.swarm import ensure_topic

#: the key the benchmarks sign with (also deploy/policy.demo.toml's runs)
DEMO_KEY = "lagpilot-demo-signing-key-0123456789abcdef"


def _strings(values: Iterable[str]) -> str:
    return "[" + ", ".join(f'"{v}"' for v in values) + "]"


def policy_toml(
    *,
    version: str,
    time_lag_s: float,
    enabled: Iterable[str],
    cooldown_s: float = 3,
    actions_per_minute: int = 60,
    ttl_s: float = 30,
    partition_topics: Iterable[str] = (),
    throttle_client_ids: Iterable[str] = (),
    extra: str = "",
) -> str:
    """The policy TOML of one incident run: the shared skeleton and ``extra`` tables."""
    return f"""mode = "act"
policy_version = "{version}"

[thresholds.default]
time_lag_s = {time_lag_s}
offset_lag = 100000000
accel_per_s2 = 100000000.0
exit_ratio = 0.3
enter_windows = 2
exit_windows = 8

[cooldowns]
default_s = {cooldown_s}

[budget]
actions_per_minute = {actions_per_minute}

[allow]
partition_topics = {_strings(partition_topics)}
throttle_client_ids = {_strings(throttle_client_ids)}

[actions]
enabled = {_strings(enabled)}
ttl_s = {ttl_s}

[state]
forget_after_s = 600
{extra}"""


def start_actuator(
    bootstrap: str, control: str, outcomes: str, log: Path, policy: Path
) -> subprocess.Popen[bytes]:
    """``python -m actuators`` on ``control``, reporting on ``outcomes``, Kafka backend."""
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP": bootstrap,
        "LAGPILOT_CONTROL_TOPIC": control,
        "LAGPILOT_OUTCOMES_TOPIC": outcomes,
        "LAGPILOT_POLICY_FILE": str(policy),
        "LAGPILOT_ACTUATOR_BACKEND": "kafka",
        "LAGPILOT_ACTUATOR_ID": f"bench-{uuid.uuid4().hex[:6]}",
        "LAGPILOT_ACTUATOR_METRICS_PORT": str(free_port()),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "actuators"],
        cwd=root,
        env=env,
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
    )


@dataclass
class ControlLoop:
    """The pipeline (policy on or off) and, on, the actuator of one run."""

    bootstrap: str
    run: str
    control: str
    outcomes: str
    policy: Path
    pipe: PipelineProcess
    actuator: subprocess.Popen[bytes] | None = None

    @classmethod
    def start(
        cls,
        bootstrap: str,
        topic: str,
        run: str,
        workdir: Path,
        policy_text: str | Path,
        *,
        on: bool,
        **pipeline_env: str,
    ) -> ControlLoop:
        """Create the run's control and outcomes topics, write the policy file (or use the
        given one), start the pipeline on ``topic`` and, when ``on``, the actuator."""
        control, outcomes = f"lagpilot.control.{run}", f"lagpilot.outcomes.{run}"
        ensure_topic(bootstrap, control, 1)  # the workers read it from the start
        ensure_topic(bootstrap, outcomes, 1)
        os.environ.setdefault("LAGPILOT_SIGNING_KEY", DEMO_KEY)
        if isinstance(policy_text, Path):
            policy = policy_text
        else:
            policy = workdir / f"policy-{run}.toml"
            policy.write_text(policy_text)
        env = {
            "LAGPILOT_RUN_POLICY": "true" if on else "false",
            "LAGPILOT_POLICY_FILE": str(policy),
            "LAGPILOT_CONTROL_TOPIC": control,
            "LAGPILOT_OUTCOMES_TOPIC": outcomes,  # the policy verifies from the run's outcomes
            "LAGPILOT_PARTITION_SNAPSHOT_INTERVAL_MS": "500",
            **pipeline_env,
        }
        pipe = PipelineProcess(bootstrap, f"{topic}$", workdir / f"state-{run}", **env).start()
        actuator = None
        if on:
            log = workdir / f"actuator-{run}.log"
            actuator = start_actuator(bootstrap, control, outcomes, log, policy)
        return cls(bootstrap, run, control, outcomes, policy, pipe, actuator)

    def wait_modelling(self, timeout_s: float = 120) -> None:
        """Until the pipeline's model has consumed a watermark sample (it is caught up)."""
        wait_modelling(self.pipe, timeout_s)

    def stop(self) -> None:
        self.pipe.stop()
        if self.actuator is not None:
            self.actuator.terminate()
            self.actuator.wait(30)
            self.actuator = None

    def actions(self) -> list[dict[str, Any]]:
        """The action events the policy published on the run's control topic."""
        return [a for a in read_topic(self.bootstrap, self.control) if a.get("event") == "action"]

    def reported(self) -> list[dict[str, Any]]:
        """Everything on the run's outcomes topic (outcomes, verifications, workers')."""
        return read_topic(self.bootstrap, self.outcomes)


def read_topic(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """Every event on ``topic`` from its start to its end (JSON values)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rt-{uuid.uuid4().hex[:6]}",
                  "enable.partition.eof": True, "enable.auto.commit": False})  # fmt: skip
    out: list[dict[str, Any]] = []
    try:
        md = c.list_topics(topic, timeout=10).topics.get(topic)
        if md is None or md.error is not None:
            return out
        c.assign([TopicPartition(topic, p, 0) for p in md.partitions])
        eof: set[int] = set()
        deadline = time.monotonic() + 20
        while len(eof) < len(md.partitions) and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                eof.add(msg.partition())
                continue
            out.append(orjson.loads(msg.value()))
    finally:
        c.close()
    return out


def wait_modelling(pipe: PipelineProcess, timeout_s: float = 120) -> None:
    """Until the pipeline's model has consumed a watermark sample (it is caught up)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            url = f"http://127.0.0.1:{pipe.metrics_port}/metrics"
            with urllib.request.urlopen(url, timeout=2) as r:
                text = r.read().decode()
            if re.search(r'lagpilot_model_inputs_total\{event="watermarks"\} [1-9]', text):
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise SystemExit(f"the pipeline never modelled a sample:\n{pipe.log_tail()}")


def both_arms(
    one: Callable[..., dict[str, Any]],
    bootstrap: str,
    shape: Any,
    workdir: Path,
    *,
    parallel: bool = False,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``one(..., on=False)`` then ``one(..., on=True)``; with ``parallel``, both at once.

    Each arm has its own topics, group, control loop and ledger, so the two never see each
    other's messages or actions; at once they share the machine. The test suite's smokes
    run them so (their checks are about the mechanics, and the wall time halves); the
    figures of ``make bench-incidents`` come from arms run one after the other."""
    if not parallel:
        return one(bootstrap, shape, workdir, on=False), one(bootstrap, shape, workdir, on=True)
    with ThreadPoolExecutor(2, thread_name_prefix="arm") as pool:
        off = pool.submit(one, bootstrap, shape, workdir, on=False)
        on = pool.submit(one, bootstrap, shape, workdir, on=True)
        return off.result(), on.result()
