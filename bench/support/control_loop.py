"""One run's control loop for the incident scenarios: the shipped policy, the pipeline, and
(lagpilot on) the actuator, started the same way for every scenario.

Every scenario runs ``deploy/policy.default.toml`` as it is (``DEFAULT_POLICY``: the one
file users run; no scenario writes a policy of its own) and the pipeline's and actuator's
shipped defaults: the environment a run passes names its own topics or changes what the
benchmark reads, never what lagpilot decides. ``ControlLoop`` starts the pipeline on the
run's topics with the run's control and outcomes topics (the policy verifies from the
outcomes), and the actuator when on; ``stop`` ends both; ``actions`` and ``reported`` read
back what they published; ``policy_sha256`` says which policy bytes ran.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, TopicPartition

from bench.support.harness import PipelineProcess, free_port
from bench.support.swarm import ensure_topic
from pipeline.decide.policy_config import load_policy_config
from pipeline.decide.policy_types import PolicyConfig
from pipeline.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
#: the policy lagpilot ships, and the only one the incident suite, the war story and the
#: demo run (its allow-lists cover the benchmarks' ``agents.*`` topics and ``agent-*``
#: producers)
DEFAULT_POLICY = ROOT / "deploy" / "policy.default.toml"

#: the key the benchmarks sign with (a bench key: never a deployment's)
DEMO_KEY = "lagpilot-demo-signing-key-0123456789abcdef"


def policy_config(policy: Path = DEFAULT_POLICY) -> PolicyConfig:
    """The policy as the pipeline reads it (no environment overrides): where a benchmark
    needs one of its settings (the hand-off pool's name, the spread's lanes) it reads them
    here, so a change to the file moves the benchmark with it."""
    return load_policy_config(policy, env={})


def policy_sha256(policy: Path = DEFAULT_POLICY) -> str:
    """The sha256 of the policy file's bytes, recorded with every run (which policy ran)."""
    return hashlib.sha256(policy.read_bytes()).hexdigest()


def start_actuator(
    bootstrap: str, control: str, outcomes: str, log: Path, policy: Path
) -> subprocess.Popen[bytes]:
    """``python -m actuators`` on ``control``, reporting on ``outcomes``, Kafka backend."""
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP": bootstrap,
        "LAGPILOT_CONTROL_TOPIC": control,  # the run's own topics
        "LAGPILOT_OUTCOMES_TOPIC": outcomes,
        "LAGPILOT_POLICY_FILE": str(policy),
        "LAGPILOT_ACTUATOR_BACKEND": "kafka",  # the shipped backend for a Kafka cluster
        "LAGPILOT_ACTUATOR_ID": f"bench-{uuid.uuid4().hex[:6]}",  # the run's own name
        "LAGPILOT_ACTUATOR_METRICS_PORT": str(free_port()),  # runs side by side: a free port
    }
    return subprocess.Popen(
        [sys.executable, "-m", "actuators"],
        cwd=ROOT,
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
    policy_sha256: str
    pipe: PipelineProcess
    actuator: subprocess.Popen[bytes] | None = None

    @classmethod
    def start(
        cls,
        bootstrap: str,
        topic: str,
        run: str,
        workdir: Path,
        policy: Path = DEFAULT_POLICY,
        *,
        on: bool,
        **pipeline_env: str,
    ) -> ControlLoop:
        """Create the run's control and outcomes topics, start the pipeline on the topics
        ``f"{topic}$"`` matches (``topic`` may be a regex prefix) and, when ``on``, the
        actuator, both under ``policy`` as it is. ``pipeline_env`` may only name the run's
        own topics or change what the benchmark reads (never a decision)."""
        control, outcomes = f"lagpilot.control.{run}", f"lagpilot.outcomes.{run}"
        ensure_topic(bootstrap, control, 1)  # the workers read it from the start
        ensure_topic(bootstrap, outcomes, 1)
        os.environ.setdefault("LAGPILOT_SIGNING_KEY", DEMO_KEY)
        digest = policy_sha256(policy)  # read before anything runs: the bytes that ran
        env = {
            "LAGPILOT_RUN_POLICY": "true" if on else "false",  # the arm: loop on or off
            "LAGPILOT_POLICY_FILE": str(policy),
            "LAGPILOT_CONTROL_TOPIC": control,  # the run's own topics
            "LAGPILOT_OUTCOMES_TOPIC": outcomes,  # the policy verifies from the run's outcomes
            # partition_lag snapshots feed the benchmark's timelines and plots only (the
            # policy reads group summaries): every 500 ms instead of every 30 s
            "LAGPILOT_PARTITION_SNAPSHOT_INTERVAL_MS": "500",
            # PipelineProcess publishes every OK summary for the tests that read them; the
            # policy counts its exit windows in summaries, so the shipped pace comes back
            "LAGPILOT_OK_SUMMARY_INTERVAL_MS": str(Settings.ok_summary_interval_ms),
            **pipeline_env,
        }
        pipe = PipelineProcess(bootstrap, f"{topic}$", workdir / f"state-{run}", **env).start()
        actuator = None
        if on:
            log = workdir / f"actuator-{run}.log"
            actuator = start_actuator(bootstrap, control, outcomes, log, policy)
        return cls(bootstrap, run, control, outcomes, policy, digest, pipe, actuator)

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
