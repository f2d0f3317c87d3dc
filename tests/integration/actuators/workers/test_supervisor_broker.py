"""``lagpilot workers`` as a user runs it, against the broker: a signed ``scale_consumers``
scales real SDK workers (a forged one does not), the step is reported on the outcomes topic
(``worker_outcome`` and the ``applied`` outcome that starts the policy's watch), and a
SIGTERM stops every worker cleanly."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from schemas import decode, encode, validate
from tests.integration.actuators.workers.workers_broker import (
    KEY,
    control_event,
    create_topics,
    publish,
    wait_until,
)
from tests.support.cli import LAGPILOT, clean_env

WORKER = """
import os, pathlib, signal
from actuators.workers import MemoryDedupeStore, Worker

marks = pathlib.Path(os.environ["MARKS"])
index = os.environ["LAGPILOT_WORKER_INDEX"]
worker = Worker(
    bootstrap=os.environ["KAFKA_BOOTSTRAP"],
    group=os.environ["LAGPILOT_WORKER_GROUP"],
    topics=[os.environ["WORKER_TOPIC"]],
    handler=lambda msg, ctx: None,
    dedupe=MemoryDedupeStore(),
    control_topic=os.environ["LAGPILOT_CONTROL_TOPIC"],
    outcomes_topic=None,
    progress_interval_ms=0,
    consumer_config={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000},
)
signal.signal(signal.SIGTERM, lambda *_: worker.stop())
(marks / f"started-{index}").write_text(str(os.getpid()))
worker.run()
(marks / f"stopped-{index}").write_text(str(os.getpid()))
"""


def children(pid: int) -> list[int]:
    """The live (not zombie) child processes of ``pid``, from /proc."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            state, ppid = (d / "stat").read_text().rsplit(")", 1)[1].split()[:2]
        except (OSError, ValueError):
            continue
        if int(ppid) == pid and state != "Z":
            out.append(int(d.name))
    return out


def members(bootstrap: str, group: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        (future,) = admin.describe_consumer_groups([group], request_timeout=10).values()
        return len(future.result(timeout=15).members)
    except Exception:
        return -1


def outcomes_of(bootstrap: str, topic: str, action_id: str, timeout_s: float) -> dict[str, Any]:
    """The worker_outcome and outcome of ``action_id``, validated, with their keys."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader"})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    found: dict[str, Any] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and len(found) < 2:
            msg = consumer.poll(0.3)
            if msg is None or msg.error():
                continue
            event = decode(msg.value())
            validate(event)
            if event["action_id"] == action_id:
                found[event["event"]] = (msg.key(), event)
    finally:
        consumer.close()
    return found


def test_a_signed_hint_scales_real_workers_is_reported_and_sigterm_stops_them(
    kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    topic, group = unique_name, f"{unique_name}-g"
    control, outcomes = f"{unique_name}.control", f"{unique_name}.outcomes"
    create_topics(kafka_bootstrap, (topic, 2), (control, 1), (outcomes, 1))
    script, marks = tmp_path / "worker.py", tmp_path / "marks"
    script.write_text(WORKER)
    marks.mkdir()
    # the supervisor and its workers read the same settings from the same environment
    env = clean_env(KAFKA_BOOTSTRAP=kafka_bootstrap, LAGPILOT_SIGNING_KEY=KEY.decode(),
                    LAGPILOT_CONTROL_TOPIC=control, LAGPILOT_CONNECT_TIMEOUT_S="15",
                    LAGPILOT_WORKER_INSTANCE_ID=unique_name, WORKER_TOPIC=topic,
                    MARKS=str(marks))  # fmt: skip
    cmd = [LAGPILOT, "workers", "--group", group, "--min", "1", "--max", "3",
           "--outcomes-topic", outcomes, "--stop-grace-s", "20",
           "--", sys.executable, str(script)]  # fmt: skip
    log = (tmp_path / "supervisor.log").open("wb")
    sup = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)

    def said() -> str:
        return (tmp_path / "supervisor.log").read_text()

    def wait(pred: Any, timeout_s: float, what: str, step_s: float = 0.1) -> None:
        try:
            wait_until(pred, timeout_s, what, step_s=step_s)
        except BaseException:
            print(f"lagpilot workers said:\n{said()}")  # shown with the failure
            raise

    try:
        wait(lambda: (marks / "started-0").exists() or sup.poll() is not None, 30,
             "the --min worker to start")  # fmt: skip
        assert sup.poll() is None and "exited with" not in said(), said()
        # the supervisor assigned the control topic at its end before it started a child
        forged = control_event("scale_consumers", {"group": group, "replicas": 3, "partitions": 2})
        forged["signature"] = "0" * 64
        hint = control_event("scale_consumers", {"group": group, "replicas": 2, "partitions": 2})
        publish(kafka_bootstrap, control, encode(forged), hint)
        wait(lambda: len(children(sup.pid)) == 2 and (marks / "started-1").exists(), 30,
             "two worker processes")  # fmt: skip

        found = outcomes_of(kafka_bootstrap, outcomes, hint["id"], timeout_s=20)
        key, report = found["worker_outcome"]
        assert (report["did"], report["replicas"], report["group"]) == ("scaled", 2, group)
        assert key == f"{hint['id']}|{report['instance']}".encode()
        key, applied = found["outcome"]
        assert (applied["result"], applied["action_type"], key) == (
            "applied", "scale_consumers", hint["id"].encode())  # fmt: skip
        assert len(children(sup.pid)) == 2, said()  # the forged one (3) was read first: ignored
        assert "bad_signature" in said()
        # two real members of the group: each process has its own static membership id
        wait(lambda: members(kafka_bootstrap, group) == 2, 45, "two group members", step_s=0.5)

        pids = [int((marks / f"started-{i}").read_text()) for i in (0, 1)]
        sup.send_signal(signal.SIGTERM)
        assert sup.wait(60) == 0, said()
        assert all((marks / f"stopped-{i}").exists() for i in (0, 1)), said()  # run() returned
        assert not any(Path(f"/proc/{p}").exists() for p in pids)
        assert "scaled 1 -> 2 worker processes" in said()
    finally:
        if sup.poll() is None:
            sup.kill()
            sup.wait(10)
