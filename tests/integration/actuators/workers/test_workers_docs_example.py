"""The minimal worker in docs/workers.md, its async handler twin and its process-mode twin,
run as written: they process, commit, and stop on SIGTERM, each message's effect written once."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.integration.actuators.workers.workers_broker import (
    KEY,
    committed,
    create_topics,
    end_offsets,
    wait_until,
)

DOC = Path(__file__).resolve().parents[4] / "docs" / "workers.md"


def example(n: int) -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 3, "docs/workers.md lost its examples (minimal, async, processes)"
    return blocks[n]


@pytest.mark.parametrize("n", [0, 1, 2], ids=["minimal", "async", "processes"])
def test_the_documented_worker_runs(
    kafka_bootstrap: str, unique_name: str, tmp_path: Path, n: int
) -> None:
    topic, control, group = unique_name, f"{unique_name}.control", f"{unique_name}-docs"
    create_topics(kafka_bootstrap, (topic, 2), (control, 1))
    script = tmp_path / "worker.py"
    script.write_text(example(n))
    if n == 1:
        assert "async def handle" in example(n)  # the async example, not another copy
    if n == 2:
        assert 'executor="processes"' in example(n)
    dedupe = tmp_path / "dedupe.sqlite"
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP": kafka_bootstrap,
        "WORKER_GROUP": group,
        "WORKER_TOPIC": topic,
        "LAGPILOT_CONTROL_TOPIC": control,
        "LAGPILOT_SIGNING_KEY": KEY.decode(),
        "LAGPILOT_DEDUPE_PATH": str(dedupe),
        "LAGPILOT_WORKER_INSTANCE_ID": f"{unique_name}-1",
    }
    log = (tmp_path / "worker.log").open("wb")
    proc = subprocess.Popen([sys.executable, str(script)], env=env, stderr=log, cwd=tmp_path)
    try:
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        for i in range(20):
            producer.produce(topic, key=f"doc-{i}".encode(), value=b"%PDF" * (i + 1))
        producer.flush(10)
        end = end_offsets(kafka_bootstrap, topic, 2)
        wait_until(
            lambda: committed(kafka_bootstrap, group, topic, 2) == end or proc.poll() is not None,
            30,
            "the example worker to commit everything",
            step_s=0.3,
        )
        assert proc.poll() is None, (tmp_path / "worker.log").read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    rows = sqlite3.connect(dedupe).execute("SELECT count(*), count(DISTINCT key) FROM summaries")
    assert rows.fetchone() == (20, 20)
