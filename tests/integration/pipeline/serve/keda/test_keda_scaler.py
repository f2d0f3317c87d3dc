"""The KEDA external scaler against a live pipeline on the real broker, through a real gRPC
client built from the same proto: pushes, agreement with ``lagpilot status``, refusals,
and a restart."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from bench.support.harness import (
    PipelineProcess,
    ScriptedLoad,
    commit,
    create_topic,
    producer,
)
from bench.support.scaler_harness import (
    Client,
    Members,
    Producing,
    PushWatcher,
    ScalerProcess,
    ref,
    scrape,
)
from pipeline.commands.status import read_latest
from tests.support.pipeline import module_pipeline

RUN = uuid.uuid4().hex[:6]
PREFIX = f"lpk-{RUN}-"


pipeline = module_pipeline(f"{PREFIX}.*", LAGPILOT_WINDOW_S="4", LAGPILOT_METADATA_REFRESH_MS="500")


@pytest.fixture(scope="module")
def scaler(
    kafka_bootstrap: str, pipeline: PipelineProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ScalerProcess]:
    s = ScalerProcess(kafka_bootstrap, tmp_path_factory.mktemp("scaler")).start()
    s.wait_ready()
    yield s
    s.kill()


def test_a_stalled_consumer_makes_stream_is_active_push_true_within_a_second(
    kafka_bootstrap: str, scaler: ScalerProcess
) -> None:
    topic, group = f"{PREFIX}stall", f"g-stall-{RUN}"
    create_topic(kafka_bootstrap, topic, 2)
    md = {"group": group, "topic": topic, "targetTimeLagSeconds": "30"}
    client = Client(scaler.port)
    try:
        with ScriptedLoad(kafka_bootstrap, topic, group, rate=100, partitions=2) as load:
            _wait_for_group(kafka_bootstrap, group, partitions=2)
            time.sleep(3)  # the model learns each partition's commit interval
            watcher = PushWatcher(client, ref("stall", **md))
            try:
                latencies = []
                for part in (0, 1):
                    onset_ms = load.stall(part) * 1000
                    pushed_ms = watcher.wait(True, onset_ms, timeout_s=10)
                    latencies.append(pushed_ms - onset_ms)
                    load.resume(part)
                    _wait_for_group(kafka_bootstrap, group, partitions=2, after_ms=onset_ms)
                    time.sleep(1.5)
                assert max(latencies) < 1000, f"pushed {latencies} ms after the stalls"
                assert client.is_active(ref("stall", **md)) is True
            finally:
                watcher.close()
    finally:
        client.close()


def test_get_metrics_agrees_with_lagpilot_status_across_replicas_and_a_restart(
    kafka_bootstrap: str, pipeline: PipelineProcess, tmp_path: Path
) -> None:
    topic, group = f"{PREFIX}agree", f"g-agree-{RUN}"
    create_topic(kafka_bootstrap, topic, 3)
    p = producer(kafka_bootstrap)
    for part, n in enumerate((500, 300, 200)):
        for _ in range(n):
            p.produce(topic, b"x" * 32, partition=part)
    p.flush(10)
    commit(kafka_bootstrap, group, {(topic, 0): 100, (topic, 1): 300, (topic, 2): 50})
    want_lag = 400 + 0 + 150  # frozen: nothing produced or committed from here on
    base = {"group": group, "topic": topic, "targetTimeLagSeconds": "30"}
    offsets = ref("agree-offsets", **base, metric="offsetLag", targetOffsetLag="1000")
    times = ref("agree-time", **base, metric="timeLag")
    capacity = ref("agree-capacity", **base)
    s = ScalerProcess(kafka_bootstrap, tmp_path).start()
    twin = ScalerProcess(kafka_bootstrap, tmp_path).start()  # a second replica
    client, twin_client = Client(s.port), Client(twin.port)
    try:
        s.wait_ready()
        twin.wait_ready()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and client.metric(offsets) != want_lag:
            time.sleep(0.25)
        summaries, _, _ = read_latest(kafka_bootstrap, since_s=5, group=group)
        status = summaries[f"{group}|{topic}"]
        assert status["total_lag_offsets"] == want_lag
        assert client.metric(offsets) == status["total_lag_offsets"]
        t_before = read_latest(kafka_bootstrap, since_s=5, group=group)[0][f"{group}|{topic}"]
        t_metric = client.metric(times)
        t_after = read_latest(kafka_bootstrap, since_s=5, group=group)[0][f"{group}|{topic}"]
        assert t_before["max_time_lag_s"] - 0.5 <= t_metric <= t_after["max_time_lag_s"] + 0.5
        # no member holds the partitions (a scripted committer): one replica to start with
        assert client.metric(capacity) == 1.0
        assert client.is_active(capacity) is True
        before = (client.metric(offsets), client.metric(capacity), client.is_active(capacity))
        assert (
            twin_client.metric(offsets),
            twin_client.metric(capacity),
            twin_client.is_active(capacity),
        ) == before, "two replicas answer alike"

        s.kill()  # SIGKILL: nothing saved on the way out
        restarted = ScalerProcess(kafka_bootstrap, tmp_path, port=s.port).start()
        try:
            t0 = time.monotonic()
            deadline = t0 + 10
            after = None
            while time.monotonic() < deadline:
                try:
                    after = (client.metric(offsets, 1), client.metric(capacity, 1),
                             client.is_active(capacity))  # fmt: skip
                    if after == before:
                        break
                except grpc.RpcError:
                    pass  # not listening yet
                time.sleep(0.1)
            took_s = time.monotonic() - t0
            assert after == before, f"after a restart: {after}, before: {before}"
            print(f"restarted scaler served the same values after {took_s:.2f} s")
            assert took_s < 10
        finally:
            restarted.kill()
    finally:
        client.close()
        twin_client.close()
        s.kill()
        twin.kill()


def test_bad_metadata_is_refused_naming_the_key(scaler: ScalerProcess) -> None:
    client = Client(scaler.port)
    try:
        bad = ref("bad", group="g", topic="t", targetTimeLagSeconds="30", maxReplicas="many")
        with pytest.raises(grpc.RpcError) as err:
            client.metric(bad)
        assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "scalerMetadata.maxReplicas" in err.value.details()
        with pytest.raises(grpc.RpcError) as err:
            client.is_active(ref("bad", topic="t", targetTimeLagSeconds="30"))
        assert "scalerMetadata.group: missing" in err.value.details()
    finally:
        client.close()


def _wait_for_group(
    bootstrap: str, group: str, partitions: int, after_ms: float = 0, timeout_s: float = 60
) -> None:
    """Until lagpilot.lag shows the group OK on all its partitions (after ``after_ms``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        summaries, _, _ = read_latest(bootstrap, since_s=2, group=group, timeout_s=5)
        if any(
            s["partitions"] == partitions and s["status"] == "OK" and s["observed_at_ms"] > after_ms
            for s in summaries.values()
        ):
            return
        time.sleep(0.3)
    raise AssertionError(f"{group} never showed OK on {partitions} partitions")


def test_capacity_from_real_members_measured_rate_and_the_cap_reported(
    kafka_bootstrap: str, scaler: ScalerProcess
) -> None:
    """8 partitions x 50 msgs/s = 400/s; two members consume at most 60/s each: one
    consumer's rate is 60, so about 400 / 60 = 6.7 replicas (plus the backlog over a long
    target) are needed: 7 or 8 of the 8 partitions. With maxReplicas 4 the cap binds."""
    topic, group = f"{PREFIX}cap", f"g-cap-{RUN}"
    create_topic(kafka_bootstrap, topic, 8)
    md = {"group": group, "topic": topic, "targetTimeLagSeconds": "600", "smoothingSeconds": "1"}
    free, capped = ref("cap-free", **md), ref("cap-4", **md, maxReplicas="4")
    client = Client(scaler.port)
    try:
        with (
            Producing(kafka_bootstrap, topic, 8, rate=50),
            Members(kafka_bootstrap, topic, group, n=2, rate=60),
        ):
            client.metric(free), client.metric(capped)  # start serving both now
            # members join, then consume at their rate: wait for three steady readings
            deadline, got, steady, needed = time.monotonic() + 45, 0.0, 0, {}
            free_key = '{scaled_object="agents/cap-free"}'
            while time.monotonic() < deadline and steady < 3:
                time.sleep(0.5)
                got = client.metric(free)
                needed = scrape(scaler.metrics_port, "lagpilot_scaler_needed_replicas")
                steady = steady + 1 if 6 <= needed.get(free_key, 0) <= 7.8 else 0
            assert steady == 3, f"needed {needed}\n{scaler.log_tail()}"
            # the reported count follows the need through its 1 s smoothing: a few summaries
            settle = time.monotonic() + 10
            while not 6 <= got <= 8 and time.monotonic() < settle:
                time.sleep(0.5)
                got = client.metric(free)
            assert 6 <= got <= 8, f"capacity {got}; needed {needed}\n{scaler.log_tail()}"
            assert client.metric(capped) == 4.0
            binds = scrape(scaler.metrics_port, "lagpilot_scaler_cap_binds")
            assert binds['{scaled_object="agents/cap-4"}'] == 1.0
            assert binds[free_key] == 0.0, (needed, got)
    finally:
        client.close()
    assert "agents/cap-4: the partition cap binds" in scaler.log_tail(200)
