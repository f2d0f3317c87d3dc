"""The record-time reader on the real broker: where the model could only extrapolate (a
fresh model, groups committed long before), it reads the timestamps of the records at the
committed offsets, and the model's time lag becomes the truth."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from typing import Any

from confluent_kafka import Producer

from pipeline.history import EXTRAPOLATED, READ
from pipeline.lag import LagConfig, TopicModel
from pipeline.truth import ReadLimits, RecordTimeReader
from tests.integration.pipeline.harness import create_topic

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
