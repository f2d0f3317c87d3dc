"""A share group (KIP-932) through a live pipeline on the real broker, consumed by Kafka's
own console share consumer: modelled per share-partition, published as ``group_type:
share``, stalled and seen, and shown the same way by ``lagpilot status``, ``/metrics``, the
KEDA scaler and MCP's ``lag_status``. (That its lag equals what Kafka's own
``kafka-share-groups.sh`` prints is tests/integration/pipeline/model/test_lag_kafka_tools.py.)"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.support.harness import LagReader, PipelineProcess, create_topic
from bench.support.scaler_harness import Client, Producing, ScalerProcess, ref, scrape
from bench.support.share_consumer import ShareConsumer
from pipeline.commands.status import read_latest
from pipeline.serve.mcp.reading import lag_status
from schemas import validate
from tests.support.pipeline import module_pipeline

RUN = uuid.uuid4().hex[:6]
PREFIX = f"lps-{RUN}-"

pipeline = module_pipeline(f"{PREFIX}.*", LAGPILOT_WINDOW_S="4")


@pytest.fixture
def share_events(
    kafka_bootstrap: str, share_group_lag: None, pipeline: PipelineProcess
) -> Iterator[tuple[str, str, LagReader]]:
    topic, group = f"{PREFIX}tasks", f"share-{RUN}"
    create_topic(kafka_bootstrap, topic, 2)
    reader = LagReader(kafka_bootstrap, {group}).start()
    yield topic, group, reader
    reader.close()


def test_a_share_group_is_modelled_stalls_are_seen_and_every_surface_shows_it(
    kafka_bootstrap: str,
    pipeline: PipelineProcess,
    share_events: tuple[str, str, LagReader],
    tmp_path: Path,
) -> None:
    topic, group, reader = share_events
    with (
        Producing(kafka_bootstrap, topic, 2, rate=100) as producing,
        ShareConsumer(kafka_bootstrap, topic, group) as consumer,
    ):
        consumer.wait_consumed(100)
        for part in (0, 1):  # both share-partitions modelled, as a share group's
            ev = reader.wait_for(
                lambda e, p=part: e["event"] == "partition_lag" and e["partition"] == p,
                timeout_s=30,
            )
            assert ev["group_type"] == "share" and ev["v"] == 2
            validate({k: v for k, v in ev.items() if not k.startswith("_")})
        reader.wait_for(lambda e: e["event"] == "partition_lag" and e["status"] == "OK")
        # a hung consumer (SIGSTOP: it neither fetches nor acknowledges) while records
        # keep coming: its share-partitions stop moving and the model says so
        time.sleep(3)
        onset_ms = time.time() * 1000
        consumer.stall()
        seen = reader.wait_for(
            lambda e: (
                e["event"] == "partition_lag"
                and e["status"] != "OK"
                and e["_received_ms"] > onset_ms
            ),
            timeout_s=15,
        )
        assert seen["group_type"] == "share"
        consumer.resume()
        reader.wait_for(
            lambda e: (
                e["event"] == "partition_lag"
                and e["status"] == "OK"
                and e["_received_ms"] > seen["_received_ms"]
            ),
            timeout_s=30,
        )
        consumer.stall()  # nothing acknowledged from here on
        time.sleep(1)
        producing.stop()  # and nothing produced: the lag is frozen
        frozen = _settled_lag(kafka_bootstrap, group, after_ms=time.time() * 1000)
        assert frozen > 0

        # lagpilot status: TYPE share, the table and the JSON
        summaries, partitions, _ = read_latest(kafka_bootstrap, since_s=5, group=group)
        summary = summaries[f"{group}|{topic}"]
        assert summary["group_type"] == "share"
        assert {p["group_type"] for p in partitions.values()} == {"share"}
        # MCP's lag_status: the same events and table
        doc = lag_status(kafka_bootstrap, {}, group=group, topic=None, since_s=5, timeout_s=10)
        row = next(line for line in doc["table"].splitlines() if line.startswith(group))
        assert row.split()[1:3] == ["share", topic]  # the summary table comes first
        assert {g["group_type"] for g in doc["groups"]} == {"share"}
        # /metrics: the share group's lag series, and the series that says it is one
        marked = scrape(pipeline.metrics_port, "lagpilot_share_group")
        assert any(group in labels and topic in labels for labels in marked), marked
        lag_series = scrape(pipeline.metrics_port, "lagpilot_group_lag_offsets")
        assert sum(v for k, v in lag_series.items() if group in k) == frozen
        # the KEDA scaler: its offset lag metric is the same lag
        scaler = ScalerProcess(kafka_bootstrap, tmp_path).start()
        client = Client(scaler.port)
        try:
            scaler.wait_ready()
            offsets = ref("share", group=group, topic=topic, metric="offsetLag",
                          targetOffsetLag="1000", targetTimeLagSeconds="30")  # fmt: skip
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and client.metric(offsets) != frozen:
                time.sleep(0.25)
            assert client.metric(offsets) == frozen
        finally:
            client.close()
            scaler.kill()


def _settled_lag(bootstrap: str, group: str, after_ms: float, timeout_s: float = 30.0) -> int:
    """The group's total lag once two summaries observed after ``after_ms`` + 1 s, a second
    or more apart, agree (nothing moves)."""
    deadline = time.monotonic() + timeout_s
    last: tuple[int, int] | None = None  # (observed_at_ms, lag)
    while time.monotonic() < deadline:
        summaries, _, _ = read_latest(bootstrap, since_s=3, group=group)
        fresh = [s for s in summaries.values() if s["observed_at_ms"] > after_ms + 1000]
        if fresh:
            at = min(s["observed_at_ms"] for s in fresh)
            lag = sum(s["total_lag_offsets"] for s in fresh)
            if last is not None and at - last[0] >= 1000 and lag == last[1]:
                return lag
            if last is None or at - last[0] >= 1000:
                last = (at, lag)
        time.sleep(0.5)
    raise AssertionError(f"the share group's lag did not settle: last {last}")
