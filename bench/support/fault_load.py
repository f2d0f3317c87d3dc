"""The load a fault runs under, and its recovery measured: the swarm produces at a moderate
rate, its SDK workers consume, the pipeline runs the shipped policy
(``deploy/policy.default.toml``, act mode) and the actuator (Kafka backend) runs; the fault
(``Fault``: a row of ``bench.faults``: broker, cluster, network, process) runs 10 s in,
and calls ``Scene.cleared`` each time it clears.

Measured from each time the fault clears (row 1: the broker serves again, ``kafka.sh up``
returned):

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
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from actuators.quotas import QuotaClient
from bench.support.actuator_harness import throttle
from bench.support.control_loop import DEFAULT_POLICY, DEMO_KEY, read_topic, wait_modelling
from bench.support.harness import LagReader, PipelineProcess, free_port
from bench.support.swarm import Swarm, SwarmConfig, ensure_topic
from schemas import encode

ROOT = Path(__file__).resolve().parents[2]
#: how long a killed node stays down before its restart (rows 1 and 2)
DOWN_S = 10.0
#: recovery within this many seconds of the fault clearing: the target of every row
RECOVER_TARGET_S = 30.0


def start_actuator(
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


def _send(bootstrap: str, topic: str, event: dict[str, Any], attempts: int = 4) -> None:
    """Produce ``event`` and wait for its acknowledgement. Sent right after a node restart,
    the first try can time out while leadership moves: sent again (the actuator dedupes by
    id), so a probe is never lost by the benchmark itself."""
    failures: list[str] = []
    errors: list[str] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    for _ in range(attempts):
        errors.clear()
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                      "message.timeout.ms": 20_000})  # fmt: skip
        p.produce(topic, key=str(event["target"]).encode(), value=encode(event),
                  on_delivery=delivered)  # fmt: skip
        if p.flush(25) == 0 and not errors:
            return
        failures.append("; ".join(errors) or "not acknowledged in 25 s")
    raise RuntimeError(f"could not send {event['type']} {event['id']} to {topic}: {failures}")


@dataclass
class Scene:
    """What a fault sees: ``cleared(label)`` to call each time a fault clears (recovery is
    measured from there), the running pipeline (``pipe``, the first of ``replicas``: more
    than one when the row runs replicas in one group), the control topic and the swarm's
    group."""

    cleared: Callable[[str], None]
    pipe: PipelineProcess
    control: str
    group: str = ""
    replicas: list[PipelineProcess] = field(default_factory=list)

    def kill_replica(self, victim: PipelineProcess) -> None:
        """SIGKILL one replica (and its sampler); the others carry on without it."""
        victim.kill(signal.SIGKILL)
        self.replicas.remove(victim)
        if self.pipe is victim:
            self.pipe = self.replicas[0]

    def replace_pipeline(self) -> None:
        """SIGKILL the pipeline (and its sampler); start a replacement on the same state
        folder and consumer group, as a supervisor would."""
        old = self.pipe
        old.kill(signal.SIGKILL)
        again = PipelineProcess(old.bootstrap, old.include, old.state_dir, **old.extra_env)
        again.group, again.log_path = old.group, old.log_path
        self.pipe = again.start()
        self.replicas = [again if p is old else p for p in self.replicas]


def _wait_any_modelling(pipes: list[PipelineProcess], timeout_s: float = 120) -> None:
    """Until one of the replicas models the swarm's topic: its samples are keyed by topic,
    so one replica alone holds them (the only one, when there is one)."""
    if len(pipes) == 1:
        wait_modelling(pipes[0], timeout_s)
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for p in pipes:
            try:
                wait_modelling(p, timeout_s=0.5)
                return
            except SystemExit:
                continue
    raise SystemExit(f"no replica modelled a sample:\n{pipes[0].log_tail()}")


#: ``fault(scene)`` runs a fault and calls ``scene.cleared(label)`` each time one clears.
Fault = Callable[[Scene], None]


def _log_lines(log_path: Path, *marks: str, width: int = 400, n: int = 20) -> list[str]:
    """The last ``n`` lines of a process's log that hold one of ``marks`` (cut to ``width``):
    what the process said it rode out during the row."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [ln[:width] for ln in lines if any(m in ln for m in marks)][-n:]


def under_load(
    bootstrap: str,
    workdir: Path,
    fault: Fault,
    *,
    run_s: float = 45.0,
    pipeline_bootstrap: str | None = None,
    workers_bootstrap: str | None = None,
    run_id: str | None = None,
    hot_partition: int | None = None,
    replication: int = 1,
    replicas: int = 1,
    state_dir: Path | None = None,
    pipeline_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The swarm, its workers, the pipeline (act) and the actuator on ``bootstrap``; ``fault``
    runs 10 s in; recovery is measured from each time it clears. The pipeline and the
    workers may reach the broker by other addresses (a cutting proxy, row 3). The swarm's
    group is ``agent-workers-<run_id>``. ``hot_partition``: from 8 s in, heavy documents on
    that partition (an incident: the shipped policy spreads it over lanes). ``replication``: the
    replication factor of the swarm's, the control and the pipeline's topics (3 on a
    3-node cluster, as one is run: a node's restart then moves leaders, not stops them).
    ``replicas``: that many pipelines in one consumer group, each with its own state
    folder; ``state_dir``: the (first) pipeline's state folder instead of one in
    ``workdir``; ``pipeline_env``: more settings for every pipeline."""
    run_id = run_id or uuid.uuid4().hex[:6]
    cfg = SwarmConfig(
        bootstrap=bootstrap,
        workers_bootstrap=workers_bootstrap,
        topic=f"faults-stream-{run_id}",
        group=f"agent-workers-{run_id}",
        partitions=8,
        hot_partitions=() if hot_partition is None else (hot_partition,),
        producers=16,
        rate_per_s=100.0,
        warmup_s=run_s if hot_partition is None else 8.0,
        avalanche_s=0.0 if hot_partition is None else run_s - 8.0,
        control_topic=f"lagpilot.control.faults-{run_id}",
    )
    outcomes = f"lagpilot.outcomes.faults-{run_id}"
    key = DEMO_KEY.encode()
    ensure_topic(bootstrap, cfg.topic, cfg.partitions, replication)
    ensure_topic(bootstrap, cfg.control_topic, 1, replication)
    policy = workdir / f"actuator-{run_id}.toml"
    policy.write_text('mode = "act"\n[allow]\nthrottle_client_ids = ["faults-*"]\n')
    os.environ.setdefault("LAGPILOT_SIGNING_KEY", DEMO_KEY)
    pipes: list[PipelineProcess] = []
    for i in range(replicas):
        p = PipelineProcess(
            pipeline_bootstrap or bootstrap,
            f"{cfg.topic}$",
            (state_dir if i == 0 and state_dir else workdir / f"state-{run_id}-{i}"),
            LAGPILOT_RUN_POLICY="true",
            LAGPILOT_POLICY_FILE=str(DEFAULT_POLICY),
            LAGPILOT_CONTROL_TOPIC=cfg.control_topic,
            LAGPILOT_PARTITION_SNAPSHOT_INTERVAL_MS="500",
            LAGPILOT_REPLICATION_FACTOR=str(replication),
            # static membership, as deploy/k8s and deploy/compose run it (a StatefulSet's pod
            # name): an app rebuilt after UNKNOWN_MEMBER_ID, or a replacement process, takes
            # its partitions back at its join instead of waiting out the old member's session
            LAGPILOT_INSTANCE_ID=f"faults-{run_id}-{i}",
            **(pipeline_env or {}),
        )
        if pipes:
            p.group = pipes[0].group  # replicas of one pipeline: one consumer group
        pipes.append(p.start())
    pipe = pipes[0]
    actuator_log = workdir / f"actuator-{run_id}.log"
    actuator = start_actuator(bootstrap, cfg.control_topic, outcomes, policy, actuator_log)
    reader = LagReader(bootstrap, {cfg.group}).start()
    rundir = workdir / run_id
    rundir.mkdir()
    swarm = Swarm(cfg, rundir)
    result: dict[str, Any] = {}
    actuator_tail = pipeline_tail = ""
    clears: list[dict[str, Any]] = []
    probes: list[dict[str, Any]] = []

    def cleared(label: str) -> None:
        at_ms = int(time.time() * 1000)
        clears.append({"label": label, "at_ms": at_ms})
        probe = throttle(f"faults-probe-{len(probes)}", 2_000_000, key=key, now_ms=at_ms,
                         lease_s=5.0, ttl_ms=600_000)  # fmt: skip
        probes.append(probe)
        _send(bootstrap, cfg.control_topic, probe)

    try:
        _wait_any_modelling(pipes)
        swarm.start_workers()
        swarm.hold_production.set()  # until the fault has cleared and 10 s more
        producing = threading.Thread(target=swarm.run_producers, daemon=True)
        producing.start()
        before = throttle("faults-before", 1_000_000, key=key, now_ms=int(time.time() * 1000),
                          lease_s=12.0, ttl_ms=600_000)  # fmt: skip
        _send(bootstrap, cfg.control_topic, before)
        time.sleep(10.0)
        started_ms = int(time.time() * 1000)
        scene = Scene(cleared, pipe, cfg.control_topic, cfg.group, list(pipes))
        try:
            fault(scene)
        finally:
            pipe, pipes = scene.pipe, scene.replicas
            time.sleep(10.0)  # traffic after the last clear: what recovery is measured on
            swarm.hold_production.clear()
        result["fault_s"] = round((clears[-1]["at_ms"] - started_ms) / 1000, 2) if clears else None
        producing.join(run_s + 120)
        result["drained"] = swarm.wait_drained(120)
        time.sleep(8.0)  # the probe's lease (5 s) ends, and its release is retried within 5 s
        alive = {
            "pipeline": all(p.proc is not None and p.proc.poll() is None for p in pipes),
            "actuator": actuator.poll() is None,
            "workers": all(t.is_alive() for t in swarm._threads),
        }
    finally:
        if pipe.proc is None or pipe.proc.poll() is not None:
            result["pipeline_log_tail"] = pipe.log_tail(25)
        pipeline_tail = pipe.log_tail(60)  # kept below if its recovery misses the target
        # each app rebuild (run_until_stopped), with its clock: what detection waited for
        result["pipeline_rebuilds"] = _log_lines(pipe.log_path, "rebuilding it", "broker not ready")
        result["actuator_warnings"] = _log_lines(
            actuator_log, "WARNING lagpilot.actuator", width=300
        )
        if actuator.poll() is None:  # its threads' stacks into its log: what it waits on
            actuator.send_signal(signal.SIGUSR1)
            time.sleep(1.0)
        if actuator_log.exists():  # the stacks and the lines before them (kept on a miss)
            actuator_tail = "\n".join(actuator_log.read_text(errors="replace").splitlines()[-150:])
        if actuator.poll() is not None:
            result["actuator_log_tail"] = actuator_tail
        swarm.stop()
        reader.close()
        for p in pipes:
            p.stop()
        actuator.terminate()
        try:
            actuator.wait(30)
        except subprocess.TimeoutExpired:  # a finding, not a crash of the benchmark
            actuator.send_signal(signal.SIGUSR1)  # its threads' stacks: what it waits for
            time.sleep(1.0)
            actuator.kill()
            actuator.wait(10)
            lines = actuator_log.read_text(errors="replace").splitlines()[-80:]
            result["actuator_log_tail"] = "\n".join([*lines, "(did not stop 30 s after SIGTERM)"])
            result["actuator_ignored_sigterm"] = True
    res = swarm.results()
    processed_ids = {r[0] for r in swarm.ledger.rows()}
    lag = reader.select(lambda e: e["event"] == "partition_lag")
    effects = [r[4] for r in swarm.ledger.rows()]
    outs = [o for o in read_topic(bootstrap, outcomes) if o.get("event") == "outcome"]
    names = ["faults-before"] + [p["params"]["name"] for p in probes]
    quotas = QuotaClient(bootstrap, client_id="lagpilot-faults-check")
    try:
        left = {n: quotas.producer_rate("client-id", n) for n in names}
    finally:
        quotas.close()
    applied = Counter(  # a worker action's "applied" is its delegation
        o["action_id"]
        for o in outs
        if o["result"] in ("applied", "delegated") and o["action_id"] != "unknown"
    )
    actions = Counter(a["id"] for a in read_topic(bootstrap, cfg.control_topic)
                      if a.get("event") == "action")  # fmt: skip
    ours = {before["id"], *(p["id"] for p in probes)}
    # what the pipeline said of the swarm's group once the fault began: a steady swarm
    # (no hot partition) gives it no cause for a status other than OK, nor for an action
    alarms = [e for e in lag if e.get("status") != "OK" and e["observed_at_ms"] >= started_ms]
    # the same, in the 10 s of load before the fault: what the load alone raises on this host
    baseline = [e for e in lag if e.get("status") != "OK" and e["observed_at_ms"] < started_ms]
    for clear, probe in zip(clears, probes, strict=True):
        up_ms = clear["at_ms"]
        after = [e["_received_ms"] for e in lag if e["observed_at_ms"] > up_ms]
        done = [e for e in effects if e > up_ms]
        probe_applied = [o["at"] for o in outs if o["action_id"] == probe["id"]
                         and o["result"] == "applied"]  # fmt: skip
        clear["detection_s"] = (min(after) - up_ms) / 1000 if after else None
        clear["workers_s"] = (min(done) - up_ms) / 1000 if done else None
        clear["actuator_s"] = (min(probe_applied) - up_ms) / 1000 if probe_applied else None
        late = clear["actuator_s"] is None or clear["actuator_s"] > RECOVER_TARGET_S
        if late:  # alive but slow or never applied the probe: say what it was doing
            result["actuator_log_tail"] = actuator_tail
    waits: dict[str, float | None] = {}
    for k in ("detection_s", "workers_s", "actuator_s"):
        got = [c[k] for c in clears]
        waits[k] = None if not got or None in got else max(got)
    slow = waits["detection_s"]
    if (slow is None or slow > RECOVER_TARGET_S) and "pipeline_log_tail" not in result:
        result["pipeline_log_tail"] = pipeline_tail  # what the pipeline did meanwhile
    return result | {
        "clears": clears,
        "recover_s": waits,
        "alive_at_end": alive,
        "produced": res["produced"],
        "unacknowledged": res["unacknowledged"],
        "produce_errors": res["produce_errors"],
        "processed": res["processed"],
        "lost": res["lost"],
        "lost_by_partition": dict(
            Counter(
                str(swarm.produced.ids[mid])
                for mid in swarm.produced.acked
                if mid not in processed_ids
            )
        ),
        "duplicate_side_effects": res["duplicates"],
        "rebalances": res["rebalances"],
        "duplicate_actions": sum(1 for n in applied.values() if n > 1),
        "actions_published": sum(actions.values()),
        "action_ids": len(actions),
        "published_again": sum(1 for n in actions.values() if n > 1),
        "pipeline_actions": sum(1 for a in actions if a not in ours),
        "not_ok_lag_events": len(alarms),
        "not_ok_statuses": dict(Counter(str(e.get("status")) for e in alarms)),
        "not_ok_before_fault": len(baseline),
        "not_ok_examples": [
            {
                k: e.get(k)
                for k in (
                    "partition",
                    "status",
                    "lag_offsets",
                    "time_lag_s",
                    "last_commit_ms",
                    "committed_offset",
                )
            }
            | {"after_fault_start_s": round((e["observed_at_ms"] - started_ms) / 1000, 2)}
            for e in alarms[:3]
        ],
        "quotas_left": left,
        "stuck_throttles": sum(1 for v in left.values() if v is not None),
        "outcomes": dict(Counter(o["result"] for o in outs)),
    }
