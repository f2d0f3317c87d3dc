"""Lanes: per-key order, parallelism across keys, barriers on lane changes, prefix commits."""

from __future__ import annotations

import itertools
import threading
import time
import zlib
from collections import defaultdict

from hypothesis import given
from hypothesis import strategies as st

from actuators.workers import lane_for
from actuators.workers.lanes import LaneExecutor
from tests.support.workers import Msg


class Recorder:
    """A handler that records order and catches two messages of one key running at once."""

    def __init__(self, delay_s: float = 0.0, gate: threading.Event | None = None) -> None:
        self.delay_s = delay_s
        self.gate = gate
        self.lock = threading.Lock()
        self.running_keys: set[bytes | None] = set()
        self.overlaps = 0
        self.order: dict[bytes | None, list[int]] = defaultdict(list)
        self.max_parallel = 0

    def __call__(self, m: Msg) -> None:
        with self.lock:
            if m.key() in self.running_keys:
                self.overlaps += 1
            self.running_keys.add(m.key())
            self.max_parallel = max(self.max_parallel, len(self.running_keys))
        if self.gate is not None:
            self.gate.wait(5)
        time.sleep(self.delay_s)
        with self.lock:
            self.running_keys.discard(m.key())
            self.order[m.key()].append(m.offset())


def wait_for(pred, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


@given(st.binary(max_size=16), st.integers(0, 10**9), st.integers(1, 64))
def test_lane_for_is_stable_and_in_range(key: bytes, offset: int, lanes: int) -> None:
    lane = lane_for(key, offset, lanes)
    assert 0 <= lane < lanes
    assert lane == lane_for(key, offset + 1, lanes)  # a key's lane does not depend on offset


def test_one_partitions_keys_use_every_lane_under_librdkafkas_partitioner() -> None:
    """librdkafka's default partitioner is crc32(key) % partitions: the keys it puts on one
    of 8 partitions must still fill all 16 lanes (crc32 % 16 gave them 2)."""
    keys = [f"k{i}".encode() for i in range(1000)]
    partition0 = [k for k in keys if zlib.crc32(k) % 8 == 0]
    assert {lane_for(k, 0, 16) for k in partition0} == set(range(16))


def test_keyless_messages_spread_by_offset() -> None:
    assert {lane_for(None, o, 4) for o in range(8)} == {0, 1, 2, 3}
    assert lane_for(b"k", 5, 1) == 0


def test_per_key_order_with_parallel_keys() -> None:
    rec = Recorder(delay_s=0.002)
    d = LaneExecutor(rec, max_workers=8, default_lanes=4)
    keys = [f"k{i}".encode() for i in range(6)]
    for o in range(300):
        d.submit(Msg(o, _key=keys[o % 6]))
    wait_for(lambda: sum(len(v) for v in rec.order.values()) == 300)
    assert rec.overlaps == 0
    for key in keys:
        assert rec.order[key] == sorted(rec.order[key])
    assert rec.max_parallel > 1  # keys did run side by side
    assert d.positions() == {("t", 0): 300}
    d.shutdown()


def test_distinct_keys_never_wait_behind_each_other_while_a_lane_is_free() -> None:
    """Four documents whose keys all hash to one lane run at once on four lanes (hashing
    alone queued them one behind the other), and a key with work pending keeps its lane."""
    keys = [k for i in range(400) if lane_for(k := f"doc-{i}".encode(), 0, 4) == 0][:4]
    gate = threading.Event()
    rec = Recorder(gate=gate)
    d = LaneExecutor(rec, max_workers=8, default_lanes=4)
    for o, key in enumerate(keys):
        d.submit(Msg(o, _key=key))
    d.submit(Msg(4, _key=keys[0]))  # the first document's next page: after it, on its lane
    wait_for(lambda: rec.max_parallel == 4)
    gate.set()
    wait_for(lambda: sum(len(v) for v in rec.order.values()) == 5)
    assert rec.overlaps == 0
    assert rec.order[keys[0]] == [0, 4]
    assert d.positions() == {("t", 0): 5}
    d.shutdown()


@given(st.lists(st.integers(0, 5), min_size=1, max_size=60), st.integers(1, 6))
def test_key_order_holds_whatever_lane_each_key_takes(key_ids: list[int], lanes: int) -> None:
    rec = Recorder()
    d = LaneExecutor(rec, max_workers=4, default_lanes=lanes)
    for o, k in enumerate(key_ids):
        d.submit(Msg(o, _key=f"k{k}".encode()))
    wait_for(lambda: sum(len(v) for v in rec.order.values()) == len(key_ids))
    assert rec.overlaps == 0
    assert all(v == sorted(v) for v in rec.order.values())
    d.shutdown()


def test_a_slow_message_holds_the_commit_position() -> None:
    gate = threading.Event()
    slow = Msg(0, _key=b"slow")
    d = LaneExecutor(lambda m: gate.wait(5) if m is slow else None, max_workers=4, default_lanes=4)
    d.submit(slow)
    others = [Msg(o, _key=f"x{o}".encode()) for o in range(1, 40)]
    for m in others:
        d.submit(m)
    time.sleep(0.2)
    assert d.positions() == {("t", 0): 0}  # 0 is unfinished: nothing past it is committed
    gate.set()
    wait_for(lambda: d.position(("t", 0)) == 40)
    d.shutdown()


def test_lane_change_waits_for_running_work_and_keeps_key_order() -> None:
    rec = Recorder(delay_s=0.001)
    d = LaneExecutor(rec, max_workers=8, default_lanes=1)
    keys = [f"k{i}".encode() for i in range(10)]
    for o in range(200):
        d.submit(Msg(o, _key=keys[o % 10]))
        if o == 50:
            d.set_lanes(("t", 0), 6)
        if o == 150:
            d.set_lanes(("t", 0), 2)
    wait_for(lambda: sum(len(v) for v in rec.order.values()) == 200)
    assert rec.overlaps == 0
    assert all(v == sorted(v) for v in rec.order.values())
    assert d.lanes(("t", 0)) == 2
    d.shutdown()


def test_halt_starts_nothing_until_resume() -> None:
    rec = Recorder()
    d = LaneExecutor(rec, max_workers=2, default_lanes=2)
    d.halt()
    for o in range(10):
        d.submit(Msg(o, _key=b"a"))
    time.sleep(0.1)
    assert not rec.order
    assert d.buffered() == {("t", 0): 10}
    d.resume()
    wait_for(lambda: len(rec.order[b"a"]) == 10)
    d.shutdown()


def test_fewer_threads_than_busy_partitions_take_turns() -> None:
    """One thread, three partitions that always have work: the partitions take turns of
    ``TURN_S`` (50 ms: three 20 ms messages at most), never one partition's whole queue while
    the others wait (a worker with one handler thread and four partitions served one of them
    and let three fall behind)."""
    done: list[int] = []
    d = LaneExecutor(lambda m: (time.sleep(0.02), done.append(m.partition())), max_workers=1,
                     default_lanes=1)  # fmt: skip
    d.submit_many([Msg(o, _partition=p) for o in range(10) for p in range(3)])
    wait_for(lambda: len(done) == 30)
    runs = [len(list(g)) for _, g in itertools.groupby(done)]
    assert max(runs) <= 3 and set(done[:9]) == {0, 1, 2}, done
    d.shutdown()


def test_close_abandons_queued_work_below_which_it_commits() -> None:
    gate = threading.Event()
    rec = Recorder(gate=gate)
    d = LaneExecutor(rec, max_workers=4, default_lanes=1)
    for o in range(5):
        d.submit(Msg(o, _key=b"a"))  # one lane: 0 runs, 1..4 queue
    wait_for(lambda: b"a" in rec.running_keys)
    d.begin_close(("t", 0))
    assert not d.submit(Msg(5, _key=b"a"))  # a closing partition accepts nothing
    gate.set()
    wait_for(lambda: d.running(("t", 0)) == 0)
    assert d.finish_close(("t", 0)) == 1  # 0 done; 1..4 will be redelivered
    assert rec.order[b"a"] == [0]
    d.shutdown()


def test_a_lanes_batch_counts_each_finished_message_and_a_close_stops_it() -> None:
    """A lane takes its queued messages as one batch: each one that finished counts at once
    (the commit position, the buffered count), and a close lets the running one finish and
    starts none of the rest, which stay above the position (redelivered, not skipped)."""
    gate, ran = threading.Event(), []

    def process(m: Msg) -> None:
        if m.offset() == 3:
            gate.wait(5)
        ran.append(m.offset())

    d = LaneExecutor(process, max_workers=2, default_lanes=1)
    d.submit_many([Msg(o, _key=b"a") for o in range(10)])  # one lane: one batch of 10
    wait_for(lambda: ran == [0, 1, 2])
    assert d.positions() == {("t", 0): 3} and d.buffered() == {("t", 0): 7}
    d.begin_close(("t", 0))
    gate.set()
    wait_for(lambda: d.running(("t", 0)) == 0)
    assert d.finish_close(("t", 0)) == 4 and ran == [0, 1, 2, 3]
    d.shutdown()


def test_close_with_timeout_abandons_running_work() -> None:
    gate = threading.Event()
    d = LaneExecutor(lambda m: gate.wait(5), max_workers=2, default_lanes=2)
    d.submit(Msg(7, _key=b"a"))
    positions = d.close([("t", 0)], timeout_s=0.05)
    assert positions == {("t", 0): 7}  # still running: stays above the committed position
    gate.set()
    d.shutdown()


def test_a_raising_process_does_not_wedge_the_partition() -> None:
    def boom(m: Msg) -> None:
        raise RuntimeError("handler wrapper bug")

    d = LaneExecutor(boom, max_workers=1, default_lanes=1)
    for o in range(3):
        d.submit(Msg(o, _key=b"a"))
    wait_for(lambda: d.position(("t", 0)) == 3)
    d.shutdown()


def test_a_repeated_offset_is_not_run_twice() -> None:
    rec = Recorder(gate=threading.Event())
    d = LaneExecutor(rec, max_workers=1, default_lanes=1)
    assert d.submit(Msg(3, _key=b"a"))
    assert not d.submit(Msg(3, _key=b"a"))
    assert d.buffered() == {("t", 0): 1}
    assert rec.gate is not None
    rec.gate.set()
    d.shutdown()


def test_a_batch_is_queued_in_order_and_counts_what_it_drops() -> None:
    """One batch over two partitions: repeats and a closing partition's messages are dropped
    and counted; the rest run in key order and every partition's position reaches its end."""
    rec = Recorder()
    d = LaneExecutor(rec, max_workers=8, default_lanes=4)
    d.submit(Msg(0, _key=b"x", _partition=1))
    d.begin_close(("t", 1))
    batch = [Msg(o, _key=bytes([97 + o % 3])) for o in range(30)]
    batch += [Msg(29, _key=b"a"), Msg(5, _key=b"z", _partition=1)]  # a repeat; a closing partition
    assert d.submit_many(batch) == 2
    wait_for(lambda: d.position(("t", 0)) == 30)
    assert rec.overlaps == 0
    assert rec.order[b"a"] == list(range(0, 30, 3))
    assert d.submit_many([Msg(3, _key=b"a")]) == 1  # below the done position: an old fetch
    d.shutdown()
