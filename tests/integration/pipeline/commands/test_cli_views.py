"""The views for people and scripts on a real broker: ``control tail`` with ``--since``,
``--group``, ``--type`` and ``--json``; ``status --json`` and ``--watch``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from pipeline.commands.control import main as control
from pipeline.commands.status import main as status

KEY = "integration-signing-key-0123456789"
LAGPILOT = str(Path(sys.executable).parent / "lagpilot")


def test_tail_filters_by_time_group_and_type(
    kafka_bootstrap: str, unique_name: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("LAGPILOT_SIGNING_KEY", KEY)
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka_bootstrap)
    topic = f"{unique_name}.control"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for fut in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        fut.result(timeout=30)
    old = ["--topic", topic, "halt", "--scope", "old-group", "--reason", "before --since"]
    assert control(old) == 0
    time.sleep(1.5)
    between = time.time()  # --since reaches back to here: after the old halt
    time.sleep(1.5)
    assert control(["--topic", topic, "halt", "--scope", "parsers"]) == 0
    assert control(["--topic", topic, "resume", "--scope", "parsers"]) == 0
    assert control(["--topic", topic, "halt", "--scope", "crawlers"]) == 0
    capsys.readouterr()

    def tail(*extra: str) -> list[dict[str, object]]:
        args = ["--topic", topic, "tail", "--outcomes-topic", topic, "--json",
                "--idle-exit", "2", *extra]  # fmt: skip
        assert control(args) == 0
        return [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]

    everything = tail("--from-beginning")
    assert len(everything) == 4 and all(e["topic"] == topic for e in everything)
    recent = tail("--since", f"{time.time() - between:.2f}")
    # the older --scope <group> is read as --scope actions --group <group>
    assert {e["params"]["scope"] for e in recent} == {"actions"}
    assert sorted(e["params"]["group"] for e in recent) == ["crawlers", "parsers", "parsers"]
    parsers = tail("--since", "1h", "--group", "parsers")
    assert sorted(e["type"] for e in parsers) == ["halt", "resume"]
    halts = tail("--since", "1h", "--type", "halt", "--group", "crawlers", "--group", "old-group")
    assert sorted(e["params"]["group"] for e in halts) == ["crawlers", "old-group"]
    assert tail("--since", "1h", "--type", "throttle_producer") == []


def test_status_json_is_one_document(
    kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert status(["--bootstrap", kafka_bootstrap, "--json", "--since-s", "1"]) in (0, 66)
    out = capsys.readouterr()
    if out.out:
        doc = orjson.loads(out.out)
        assert set(doc) == {"groups", "partitions", "group_health", "inputs"}
    else:  # no pipeline ever ran on this broker: the topic is missing, said in one line
        assert "topic lagpilot.lag not found" in out.err


def test_status_watch_redraws_until_stopped(kafka_bootstrap: str) -> None:
    env = {**os.environ, "KAFKA_BOOTSTRAP": kafka_bootstrap}
    proc = subprocess.Popen([LAGPILOT, "status", "--watch", "0.2", "--since-s", "1"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        frames = 0
        deadline = time.monotonic() + 30
        while frames < 2 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, proc.stderr.read() if proc.stderr else ""
            frames += "lagpilot status (every 0.2 s)" in line
        assert frames == 2 and proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(timeout=30)
