"""The record-time reader on the real broker: where the model could only extrapolate (a
fresh model, groups committed long before), it reads the timestamps of the records at the
committed offsets, and the model's time lag becomes the truth."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from bench.support.harness import LagReader, PipelineProcess, commit, create_topic
from pipeline.model.config import LagConfig
from pipeline.model.history import EXTRAPOLATED, READ
from pipeline.model.lag import TopicModel
from pipeline.model.truth import ReadLimits, RecordTimeReader
from schemas import validate

BASE_MS = int(time.time() * 1000) - 3_600_000  # records written "an hour ago"


def test_reads_the_timestamp_of_the_record_at_each_committed_offset(kafka_bootstrap: str) -> None:
    topic = f"lagpilot-test-record-times-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_bootstrap, topic, 2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for p in range(2):
        for i in range(20):  # offset i of partition p: written at BASE + p s + i min
            producer.produce(topic, b"x", partition=p, timestamp=BASE_MS + p * 1000 + i * 60_000)
    assert producer.flush(10) == 0

    model = TopicModel(topic, LagConfig())
    commits = {("a", 0): 3, ("a", 1): 7, ("b", 0): 3, ("b", 1): 19}  # b/0 shares a's record
    for (g, p), off in commits.items():
        model.commit(g, p, off, BASE_MS + 1)
    counts: Counter[str] = Counter()
    reader = RecordTimeReader(
        {"bootstrap.servers": kafka_bootstrap},
        ReadLimits(per_s=100),
        on_result=lambda result, n: counts.update({result: n}),
    )
    try:
        now = int(time.time() * 1000)
        model.add_sample(now, [20, 20])
        obs = model.observe(now)
        assert (obs.time_lag_source[obs.mask] == EXTRAPOLATED).all()
        reader.want(obs)
        rows: list[list[Any]] = []
        deadline = time.monotonic() + 20
        while len(rows) < len(commits) and time.monotonic() < deadline:
            rows += reader.take(topic)
            time.sleep(0.1)
        got = {(g, p): (off, ts) for g, p, off, ts in rows}
        assert got == {
            (g, p): (off, BASE_MS + p * 1000 + off * 60_000) for (g, p), off in commits.items()
        }
        for row in rows:
            model.record_read(*row)
        now = int(time.time() * 1000)
        model.add_sample(now, [20, 20])
        obs = model.observe(now)
        assert (obs.time_lag_source[obs.mask] == READ).all()
        b = obs.groups.index("b")
        assert obs.time_lag_s[b, 1] == (now - (BASE_MS + 1000 + 19 * 60_000)) / 1000
        # 3 or 4 reads: a/0 and b/0 wait for the same record, read once when in one batch
        assert set(counts) == {"read"} and 3 <= counts["read"] == reader.reads <= 4
    finally:
        reader.close()


def test_a_fresh_pipeline_reports_the_read_truth_for_a_group_an_hour_behind(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The whole path: the group committed before the pipeline existed, so the pipeline's
    history cannot date its offset; the partition_lag events say `read`, with the exact age
    of the record at the committed offset."""
    prefix = f"lpr-{uuid.uuid4().hex[:6]}-"
    topic, group = f"{prefix}t", f"g-read-{uuid.uuid4().hex[:6]}"
    create_topic(kafka_bootstrap, topic, 1)
    written_ms = int(time.time() * 1000) - 3_600_000
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(10):
        producer.produce(topic, b"x", partition=0, timestamp=written_ms + i * 1000)
    assert producer.flush(10) == 0
    commit(kafka_bootstrap, group, {(topic, 0): 3})
    pipe = PipelineProcess(kafka_bootstrap, f"{prefix}.*", tmp_path / "state").start()
    reader = LagReader(kafka_bootstrap, {group}).start()
    try:
        event = reader.wait_for(
            lambda e: e["event"] == "partition_lag" and e.get("time_lag_source") == "read",
            timeout_s=90,
        )
    finally:
        reader.close()
        pipe.stop()
    validate(
        {k: v for k, v in event.items() if not k.startswith("_")}
    )  # the reader adds _received_ms
    assert event["committed_offset"] == 3 and event["lag_offsets"] == 7
    truth_s = (event["observed_at_ms"] - (written_ms + 3_000)) / 1000
    assert event["time_lag_s"] == pytest.approx(truth_s, abs=0.001)
