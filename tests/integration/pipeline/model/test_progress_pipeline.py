"""Worker progress through the real pipeline: a stall seen from the reports long before a
commit is due, and a worker that goes silent named in the lag events, on /metrics and in
``lagpilot status``."""

from __future__ import annotations

import time
import urllib.request
import uuid
from pathlib import Path

import orjson
import pytest

from bench.support.harness import (
    LagReader,
    PipelineProcess,
    ScriptedLoad,
    create_topic,
)
from pipeline.commands.status import main as status
from schemas import validate


def test_a_stall_and_a_silent_worker_are_seen_from_the_reports(
    kafka_bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = f"lpp-{uuid.uuid4().hex[:6]}"
    group = f"{topic}-g"
    create_topic(kafka_bootstrap, topic, 2)
    pipe = PipelineProcess(kafka_bootstrap, f"{topic}.*", tmp_path / "state").start()
    reader = LagReader(kafka_bootstrap, {group}).start()
    try:
        # commits every 5 s (Kafka's default): commits alone would see a stall after 7.5 s
        with ScriptedLoad(
            kafka_bootstrap, topic, group, 100, partitions=2, commit_every_s=5.0, progress=True
        ) as load:
            reader.wait_for(
                lambda e: e["event"] == "group_lag" and e["partitions"] == 2, timeout_s=90
            )
            time.sleep(1.0)
            onset_ms = load.stall(0) * 1000

            def first(status: str, **worker: object) -> dict:
                return reader.wait_for(
                    lambda e: (
                        e["event"] == "partition_lag"
                        and e["partition"] == 0
                        and e["observed_at_ms"] >= onset_ms
                        and e["status"] == status
                        and all((e.get("worker") or {}).get(k) == v for k, v in worker.items())
                    ),
                    timeout_s=10,
                )

            warn = first("WARN")
            # generous for a loaded CI host; python -m bench.perf.detection measures the figure
            assert warn["_received_ms"] - onset_ms < 2000
            assert warn["worker"]["member"] == f"scripted-{group}"
            assert warn["worker"]["silent"] is False
            validate({k: v for k, v in warn.items() if k != "_received_ms"})
            stall = first("STALL")  # it keeps reporting: its prefix does not move
            assert stall["_received_ms"] - onset_ms < 3000

            # the worker goes silent (hung or dead) while its partitions fill up
            assert load.reporter is not None
            load.reporter.stop()
            load.stall(1)
            onset_ms = time.time() * 1000
            stop = first("STOP", silent=True)
            assert stop["worker"]["member"] == f"scripted-{group}"
            assert stop["worker"]["host"] == load.reporter.host
            assert stop["worker"]["report_age_s"] > 0.5
            validate({k: v for k, v in stop.items() if k != "_received_ms"})

            url = f"http://127.0.0.1:{pipe.metrics_port}/metrics"
            deadline = time.monotonic() + 10
            line = f'lagpilot_silent_worker_partitions{{group="{group}"'
            while True:
                with urllib.request.urlopen(url, timeout=5) as resp:
                    text = resp.read().decode()
                found = [x for x in text.splitlines() if x.startswith(line)]
                if (found and found[0].endswith(" 2.0")) or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            assert found and f'member="scripted-{group}"' in found[0], found
            assert found[0].endswith(" 2.0"), found  # both partitions

            assert status(["--bootstrap", kafka_bootstrap, "--group", group, "--since-s", "5"]) == 0
            out = capsys.readouterr().out
            assert f"scripted-{group}@{load.reporter.host} SILENT" in out, out
            _status_hides_its_own_groups_and_prints_no_impossible_value(
                kafka_bootstrap, group, capsys
            )
    finally:
        reader.close()
        pipe.stop()


def _status_hides_its_own_groups_and_prints_no_impossible_value(
    bootstrap: str, group: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The whole table, as a user first runs it: lagpilot's own groups (its pipeline's, the
    broker's readiness probe's) appear only with --all; the stopped partitions have no drain
    ETA; no value prints as -0.0."""

    def groups(*extra: str) -> tuple[set[str], dict]:
        assert status(["--bootstrap", bootstrap, "--since-s", "5", "--json", *extra]) == 0
        doc = orjson.loads(capsys.readouterr().out)
        named = {e["group"] for key in ("groups", "partitions", "group_health") for e in doc[key]}
        return named, doc

    everything, _ = groups("--all")
    assert any(g.startswith(("lagpilot-", "__lagpilot")) for g in everything), everything
    named, doc = groups()
    assert group in named and not any(g.startswith(("lagpilot-", "__lagpilot")) for g in named)
    mine = [p for p in doc["partitions"] if p["group"] == group]
    assert {p["status"] for p in mine} == {"STOP"} and all(p["eta_drain_s"] is None for p in mine)
    assert status(["--bootstrap", bootstrap, "--since-s", "5", "--partitions"]) == 0
    table = capsys.readouterr().out
    assert " -0.0" not in table and "groups hidden" in table, table
