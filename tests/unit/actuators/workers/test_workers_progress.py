"""Progress reports: the processed prefix and when it moved, on the sampler's grid."""

from __future__ import annotations

import threading
import time
from typing import Any

import orjson
import pytest

from actuators.workers import PartitionProgress, ProgressReporter, progress_event
from actuators.workers.lanes import LaneExecutor
from actuators.workers.progress import next_report_s
from schemas import ConfigError, topics, validate
from tests.support.workers import Msg
from tests.unit.actuators.workers.test_workers_lanes import wait_for


class FakeProducer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes]] = []

    def produce(self, topic: str, value: bytes, key: bytes, on_delivery: Any = None) -> None:
        self.sent.append((topic, key, value))

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        return 0


def test_the_event_validates_against_its_schema() -> None:
    event = progress_event(
        group="g",
        member="w-1",
        host="node-a",
        sent_at_ms=1_795_000_000_230,
        interval_ms=250,
        partitions=[PartitionProgress("t", 3, 120, 1_795_000_000_200, 4, 1)],
        released=[("t", 5)],
    )
    validate(event)
    assert event["partitions"][0]["processed_offset"] == 120
    assert event["released"] == [["t", 5]]


@pytest.mark.parametrize(
    ("now_s", "due_s"),
    [(100.000, 100.230), (100.229, 100.230), (100.230, 100.480), (100.240, 100.480)],
)
def test_reports_go_out_just_before_each_wall_clock_tick(now_s: float, due_s: float) -> None:
    assert next_report_s(now_s, 0.25, 0.02) == pytest.approx(due_s)


def test_a_report_carries_the_snapshot_and_the_released_partitions_once() -> None:
    producer = FakeProducer()
    parts = [PartitionProgress("t", 0, 10, 5_000, 2, 1)]
    r = ProgressReporter(
        group="g", member="w-1", host="h", snapshot=lambda: parts, producer=producer
    )
    r.release([("t", 1)])
    r.report(now_ms=6_000)
    r.report(now_ms=6_250)
    assert [(t, k) for t, k, _ in producer.sent] == [(topics.PROGRESS, b"g")] * 2
    first, second = (orjson.loads(v) for _, _, v in producer.sent)
    assert first["released"] == [["t", 1]] and second["released"] == []
    assert first["partitions"][0]["progress_ms"] == 5_000
    assert second["sent_at_ms"] == 6_250
    validate(first)


def test_a_hand_off_is_said_apart_from_a_release() -> None:
    producer = FakeProducer()
    r = ProgressReporter(group="g", member="w-1", host="h", snapshot=list, producer=producer)
    r.release([("t", 2)], handed_off=True)
    r.release([("t", 3)])
    r.report(now_ms=6_000)
    r.report(now_ms=6_250)  # nothing left to say: not sent
    (event,) = (orjson.loads(v) for _, _, v in producer.sent)
    assert (event["handed_off"], event["released"]) == ([["t", 2]], [["t", 3]])
    validate(event)


def test_nothing_to_say_sends_nothing_and_a_failing_producer_is_counted() -> None:
    producer = FakeProducer()
    r = ProgressReporter(group="g", member="w", host="h", snapshot=list, producer=producer)
    r.report()
    assert producer.sent == []

    class Full(FakeProducer):
        def produce(self, *a: Any, **k: Any) -> None:
            raise BufferError("queue full")

    parts = [PartitionProgress("t", 0, 1, 1)]
    r = ProgressReporter(group="g", member="w", host="h", snapshot=lambda: parts, producer=Full())
    r.report()
    assert r.errors == 1


@pytest.mark.parametrize("interval", [5, 2.5, "250"])
def test_a_bad_interval_names_the_setting(interval: Any) -> None:
    with pytest.raises(ConfigError, match="progress_interval_ms"):
        ProgressReporter(
            group="g", member="w", snapshot=list, producer=FakeProducer(), interval_ms=interval
        )


def test_the_thread_reports_on_the_grid_until_stopped() -> None:
    producer = FakeProducer()
    parts = [PartitionProgress("t", 0, 1, 1)]
    r = ProgressReporter(
        group="g",
        member="w",
        host="h",
        snapshot=lambda: parts,
        producer=producer,
        interval_ms=50,
        lead_ms=20,
    )
    r.start()
    wait_for(lambda: len(producer.sent) >= 3, timeout_s=2)
    r.stop()
    n = len(producer.sent)
    times = [orjson.loads(v)["sent_at_ms"] for _, _, v in producer.sent]
    # 20 ms before each multiple of 50 ms (a thread may wake late on a busy host: the median)
    offsets = sorted((t + 20) % 50 for t in times)
    assert offsets[len(offsets) // 2] < 15, offsets
    time.sleep(0.12)
    assert len(producer.sent) == n


def test_the_dispatcher_stamps_when_the_processed_prefix_advances() -> None:
    gate = threading.Event()
    slow = Msg(0)
    d = LaneExecutor(lambda m: gate.wait(5) if m is slow else None, max_workers=1, default_lanes=1)
    before = int(time.time() * 1000)
    d.submit(slow)
    for o in range(1, 10):
        d.submit(Msg(o))
    wait_for(lambda: d.progress()[("t", 0)][3] == 1)
    pos, at_ms, in_flight, running = d.progress()[("t", 0)]
    assert (pos, in_flight, running) == (0, 10, 1)  # 0 runs, 1..9 queued behind it
    assert before <= at_ms  # first delivery
    time.sleep(0.05)
    gate.set()
    wait_for(lambda: d.progress()[("t", 0)][0] == 10)
    pos, advanced_ms, in_flight, _ = d.progress()[("t", 0)]
    assert advanced_ms >= at_ms + 50 and in_flight == 0
    d.shutdown()


def test_work_after_idleness_restarts_the_no_progress_clock() -> None:
    """A partition idle for a while that gets a message: "no progress" counts from its
    arrival, not from the last message (else the first report would look stalled)."""
    gate = threading.Event()
    d = LaneExecutor(
        lambda m: gate.wait(5) if m.offset() == 1 else None, max_workers=1, default_lanes=1
    )
    d.submit(Msg(0))
    wait_for(lambda: d.progress()[("t", 0)][0] == 1)
    idle_since = d.progress()[("t", 0)][1]
    time.sleep(0.1)  # idle: nothing held
    arrived = int(time.time() * 1000)
    d.submit(Msg(1))  # held by the handler
    wait_for(lambda: d.progress()[("t", 0)][3] == 1)
    pos, at_ms, in_flight, _ = d.progress()[("t", 0)]
    assert (pos, in_flight) == (1, 1)
    assert at_ms >= arrived >= idle_since + 100
    gate.set()
    d.shutdown()


def test_the_cadence_comes_from_the_argument_the_environment_or_the_default() -> None:
    from actuators.workers.progress import progress_timing

    assert progress_timing(env={}) == (125, 40)
    env = {"LAGPILOT_PROGRESS_INTERVAL_MS": "250", "LAGPILOT_PROGRESS_LEAD_MS": "30"}
    assert progress_timing(env=env) == (250, 30)
    assert progress_timing(100, 20, env=env) == (100, 20)  # the argument wins
    assert progress_timing(env={"LAGPILOT_PROGRESS_INTERVAL_MS": "0"}) == (0, 0)  # off
    with pytest.raises(ConfigError, match="LAGPILOT_PROGRESS_INTERVAL_MS='fast'"):
        progress_timing(env={"LAGPILOT_PROGRESS_INTERVAL_MS": "fast"})
    with pytest.raises(ConfigError, match="LAGPILOT_PROGRESS_LEAD_MS=125: must be >= 0 and below"):
        progress_timing(env={"LAGPILOT_PROGRESS_LEAD_MS": "125"})
