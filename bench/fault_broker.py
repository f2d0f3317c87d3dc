"""Fault row 1: the single broker killed (-9) mid-run and restarted 10 s later, while the
swarm produces at a moderate rate, its SDK workers consume, the pipeline runs in ``act`` mode
(``deploy/policy.demo.toml``) and the actuator (Kafka backend) runs. No lagpilot process and
no worker is restarted.

The broker is this benchmark's own (:class:`OwnBroker`: ``deploy/local/kafka.sh`` with its
own port and run folder); only the PID that ``kafka.sh`` recorded for it is killed.

Measured after the broker serves again (``kafka.sh up`` returned):

- detection: the first ``partition_lag`` event of the swarm's group observed after it;
- workers: the first side effect recorded after it;
- actuator: a leased throttle sent then, until its ``applied`` outcome;
- lost / duplicate side effects: the swarm's ledger (every produced id once);
- duplicate actions: ids with more than one ``applied`` outcome;
- stuck throttles: a throttle applied before the kill whose lease ends while the broker is
  down, and the probe's: both quotas must be gone from the broker at the end;
- needed a person: any lagpilot process or the workers' thread dead at the end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from actuators.quotas import QuotaClient
from bench.support.actuator_harness import throttle
from bench.support.harness import LagReader, PipelineProcess, free_port
from bench.support.swarm import Swarm, SwarmConfig, ensure_topic
from bench.war_story import DEMO_KEY, DEMO_POLICY, read_topic, wait_modelling
from schemas import encode

ROOT = Path(__file__).resolve().parents[1]
KAFKA_SH = ROOT / "deploy" / "local" / "kafka.sh"
DOWN_S = 10.0


@dataclass
class OwnBroker:
    """A broker of the benchmark's own: its port, its run folder, its recorded PIDs."""

    port: int
    run_dir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="lagpilot-faults-run-"))
    bootstrap: str = ""

    @property
    def env(self) -> dict[str, str]:
        return os.environ | {
            "LAGPILOT_BROKER_PORT": str(self.port),
            "LAGPILOT_BROKER_RUN_DIR": self.run_dir,
        }

    def up(self) -> str:
        done = subprocess.run([str(KAFKA_SH), "up"], env=self.env, stdout=subprocess.PIPE,
                              text=True)  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"could not start a broker on port {self.port} (see above)")
        self.bootstrap = done.stdout.strip().splitlines()[-1]
        return self.bootstrap

    def restart(self) -> None:
        """The killed node again, on its own data (``kafka.sh up`` would format a new one)."""
        done = subprocess.run([str(KAFKA_SH), "restart"], env=self.env, stdout=subprocess.PIPE)
        if done.returncode != 0:
            raise RuntimeError("kafka.sh restart failed (see above)")

    def kill9(self) -> list[int]:
        pids = [int(p.read_text()) for p in Path(self.run_dir).glob("node-*.pid")]
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        return pids

    def down(self) -> None:
        subprocess.run([str(KAFKA_SH), "down"], env=self.env, capture_output=True)


def _start_actuator(
    bootstrap: str, control: str, outcomes: str, policy: Path, log: Path
) -> subprocess.Popen[bytes]:
    env = os.environ | {
        "KAFKA_BOOTSTRAP": bootstrap,
        "LAGPILOT_SIGNING_KEY": DEMO_KEY,
        "LAGPILOT_CONTROL_TOPIC": control,
        "LAGPILOT_OUTCOMES_TOPIC": outcomes,
        "LAGPILOT_POLICY_FILE": str(policy),
        "LAGPILOT_ACTUATOR_BACKEND": "kafka",
        "LAGPILOT_ACTUATOR_ID": f"faults-{uuid.uuid4().hex[:6]}",
        "LAGPILOT_ACTUATOR_METRICS_PORT": str(free_port()),
    }
    with log.open("ab") as sink:
        cmd = [sys.executable, "-m", "actuators"]
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT)


def _send(bootstrap: str, topic: str, event: dict[str, Any]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    p.produce(topic, key=str(event["target"]).encode(), value=encode(event))
    p.flush(30)


def broker_kill(broker: OwnBroker, workdir: Path, *, run_s: float = 45.0) -> dict[str, Any]:
    bootstrap = broker.bootstrap
    run_id = uuid.uuid4().hex[:6]
    cfg = SwarmConfig(
        bootstrap=bootstrap,
        topic=f"faults-stream-{run_id}",
        group=f"agent-workers-{run_id}",
        partitions=8,
        hot_partitions=(),
        producers=16,
        rate_per_s=100.0,
        warmup_s=run_s,
        avalanche_s=0.0,
        control_topic=f"lagpilot.control.faults-{run_id}",
    )
    outcomes = f"lagpilot.outcomes.faults-{run_id}"
    key = DEMO_KEY.encode()
    ensure_topic(bootstrap, cfg.topic, cfg.partitions)
    ensure_topic(bootstrap, cfg.control_topic, 1)
    policy = workdir / f"actuator-{run_id}.toml"
    policy.write_text('mode = "act"\n[allow]\nthrottle_client_ids = ["faults-*"]\n')
    os.environ.setdefault("LAGPILOT_SIGNING_KEY", DEMO_KEY)
    pipe = PipelineProcess(
        bootstrap,
        f"{cfg.topic}$",
        workdir / f"state-{run_id}",
        LAGPILOT_RUN_POLICY="true",
        LAGPILOT_POLICY_FILE=str(DEMO_POLICY),
        LAGPILOT_CONTROL_TOPIC=cfg.control_topic,
        LAGPILOT_PARTITION_SNAPSHOT_INTERVAL_MS="500",
    ).start()
    actuator = _start_actuator(bootstrap, cfg.control_topic, outcomes, policy,
                               workdir / f"actuator-{run_id}.log")  # fmt: skip
    reader = LagReader(bootstrap, {cfg.group}).start()
    rundir = workdir / run_id
    rundir.mkdir()
    swarm = Swarm(cfg, rundir)
    result: dict[str, Any] = {}
    try:
        wait_modelling(pipe)
        swarm.start_workers()
        producing = threading.Thread(target=swarm.run_producers, daemon=True)
        producing.start()
        before = throttle("faults-before", 1_000_000, key=key, now_ms=int(time.time() * 1000),
                          lease_s=12.0, ttl_ms=600_000)  # fmt: skip
        _send(bootstrap, cfg.control_topic, before)
        time.sleep(10.0)
        killed_ms = int(time.time() * 1000)
        broker.kill9()
        time.sleep(DOWN_S)
        restart = time.monotonic()
        broker.restart()
        up_ms = int(time.time() * 1000)
        result["broker_restart_s"] = round(time.monotonic() - restart, 2)
        result["down_s"] = round((up_ms - killed_ms) / 1000, 2)
        probe = throttle("faults-probe", 2_000_000, key=key, now_ms=up_ms, lease_s=5.0,
                         ttl_ms=600_000)  # fmt: skip
        _send(bootstrap, cfg.control_topic, probe)
        producing.join(run_s + 120)
        result["drained"] = swarm.wait_drained(120)
        time.sleep(8.0)  # the probe's lease (5 s) ends, and its release is retried within 5 s
        alive = {
            "pipeline": pipe.proc is not None and pipe.proc.poll() is None,
            "actuator": actuator.poll() is None,
            "workers": all(t.is_alive() for t in swarm._threads),
        }
    finally:
        swarm.stop()
        reader.close()
        pipe.stop()
        actuator.terminate()
        actuator.wait(30)
    res = swarm.results()
    lag_after = [e for e in reader.select(lambda e: e["event"] == "partition_lag")
                 if e["observed_at_ms"] > up_ms]  # fmt: skip
    effects_after = [r[4] for r in swarm.ledger.rows() if r[4] > up_ms]
    outs = [o for o in read_topic(bootstrap, outcomes) if o.get("event") == "outcome"]
    probe_applied = [o["at"] for o in outs if o["action_id"] == probe["id"]
                     and o["result"] == "applied"]  # fmt: skip
    quotas = QuotaClient(bootstrap, client_id="lagpilot-faults-check")
    try:
        left = {n: quotas.producer_rate("client-id", n) for n in ("faults-before", "faults-probe")}
    finally:
        quotas.close()
    applied = Counter(
        o["action_id"] for o in outs if o["result"] == "applied" and o["action_id"] != "unknown"
    )
    waits = {
        "detection_s": (min(e["_received_ms"] for e in lag_after) - up_ms) / 1000
        if lag_after
        else None,
        "workers_s": (min(effects_after) - up_ms) / 1000 if effects_after else None,
        "actuator_s": (min(probe_applied) - up_ms) / 1000 if probe_applied else None,
    }
    return result | {
        "recover_s": waits,
        "alive_at_end": alive,
        "produced": res["produced"],
        "processed": res["processed"],
        "lost": res["lost"],
        "duplicate_side_effects": res["duplicates"],
        "duplicate_actions": sum(1 for n in applied.values() if n > 1),
        "quotas_left": left,
        "stuck_throttles": sum(1 for v in left.values() if v is not None),
        "outcomes": dict(Counter(o["result"] for o in outs)),
    }
