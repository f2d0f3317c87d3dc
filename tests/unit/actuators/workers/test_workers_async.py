"""``async def`` handlers: their lanes are tasks on one event loop thread (``LoopLanes``), with
the same per-key order, prefix commits, retries, failure path and cap as threaded lanes."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from actuators.workers import EffectGuard, MemoryDedupeStore
from actuators.workers.handling import is_async_handler
from actuators.workers.lanes import LaneExecutor
from actuators.workers.threads import LoopLanes
from tests.support.workers import Msg, Plain, plain, wait_until, wire


class AsyncRecorder:
    """An async handler that records order per key, the threads it ran on, and catches two
    messages of one key running at once."""

    def __init__(self, delay_s: float = 0.002) -> None:
        self.delay_s = delay_s
        self.running: set[bytes | None] = set()
        self.overlaps = 0
        self.max_parallel = 0
        self.order: dict[bytes | None, list[int]] = defaultdict(list)
        self.threads: set[int] = set()

    async def __call__(self, m: Msg) -> None:
        self.threads.add(threading.get_ident())
        if m.key() in self.running:
            self.overlaps += 1
        self.running.add(m.key())
        self.max_parallel = max(self.max_parallel, len(self.running))
        await asyncio.sleep(self.delay_s)
        self.running.discard(m.key())
        self.order[m.key()].append(m.offset())

    def done(self) -> int:
        return sum(len(v) for v in self.order.values())


def test_async_lanes_keep_key_order_run_keys_side_by_side_on_one_thread() -> None:
    rec = AsyncRecorder()
    d = LaneExecutor(rec, max_workers=64, default_lanes=4, asynchronous=True)
    keys = [f"k{i}".encode() for i in range(6)]
    d.submit_many([Msg(o, _key=keys[o % 6]) for o in range(300)])
    wait_until(lambda: rec.done() == 300)
    assert rec.overlaps == 0
    assert all(rec.order[k] == sorted(rec.order[k]) for k in keys)
    assert rec.max_parallel == 4  # four lanes' messages awaited at once
    assert len(rec.threads) == 1  # ... all of them on the loop's one thread
    wait_until(lambda: d.positions() == {("t", 0): 300})
    d.shutdown()


def test_a_slow_async_message_holds_the_commit_position_and_close_waits_for_it() -> None:
    gate = asyncio.Event()
    lanes = LaneExecutor(_gated(gate), max_workers=8, default_lanes=4, asynchronous=True)
    lanes.submit_many([Msg(0, _key=b"slow"), *[Msg(o, _key=f"k{o}".encode()) for o in (1, 2, 3)]])
    wait_until(lambda: lanes.running(("t", 0)) == 1)  # 1-3 done, 0 still awaiting its gate
    assert lanes.positions() == {("t", 0): 0}
    loop = lanes._pool._loop  # type: ignore[union-attr]
    threading.Timer(0.2, lambda: loop.call_soon_threadsafe(gate.set)).start()
    assert lanes.close([("t", 0)], timeout_s=5) == {("t", 0): 4}
    lanes.shutdown()


def _gated(gate: asyncio.Event) -> Any:
    async def process(m: Msg) -> None:
        if m.key() == b"slow":
            await gate.wait()

    return process


def test_loop_lanes_run_at_most_their_cap_and_the_rest_when_one_ends() -> None:
    pool = LoopLanes(3, "test")
    now: list[int] = [0]
    peak: list[int] = [0]
    finished: list[int] = []

    async def job(i: int) -> None:
        now[0] += 1
        peak[0] = max(peak[0], now[0])
        await asyncio.sleep(0.01)
        now[0] -= 1
        finished.append(i)

    for i in range(10):
        pool.submit(job, i)
    wait_until(lambda: len(finished) == 10)
    assert peak[0] == 3
    pool.shutdown()
    pool.submit(job, 99)  # after shutdown: dropped, no error
    assert 99 not in finished and not pool._thread.is_alive()


def test_shutdown_cancels_what_runs() -> None:
    pool = LoopLanes(4, "test")
    cancelled = threading.Event()

    async def forever() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    pool.submit(forever)
    wait_until(lambda: pool.running == 1)
    pool.shutdown()
    assert cancelled.is_set()


def test_which_handlers_are_async() -> None:
    async def f(msg: Any, ctx: Any) -> None: ...

    class Obj:
        async def __call__(self, msg: Any, ctx: Any) -> None: ...

    assert (
        is_async_handler(f) and is_async_handler(Obj()) and is_async_handler(functools.partial(f))
    )
    assert not is_async_handler(lambda msg, ctx: None)


@pytest.fixture
def seen() -> list[int]:
    return []


@pytest.fixture
def async_engine(seen: list[int]) -> Iterator[Plain]:
    attempts: dict[int, int] = defaultdict(int)

    async def handle(msg: Msg, ctx: EffectGuard) -> None:
        attempts[msg.offset()] += 1
        if msg.offset() == 6 and attempts[6] < 2:  # fails once, then runs
            raise RuntimeError("transient")
        if msg.offset() == 7:  # fails every attempt: counted failed, skipped
            raise RuntimeError("bad message")
        assert await ctx.once_async(lambda: seen.append(msg.offset()))

    e = plain(handle, max_attempts=3, retry_backoff_s=0.01)
    yield e
    e._shutdown()


def test_an_async_engine_retries_skips_the_bad_message_and_commits_the_prefix(
    async_engine: Plain, seen: list[int]
) -> None:
    fakes = wire(async_engine, assigned=[("t", 0)])
    fakes.consumer.batches = [[Msg(5), Msg(6), Msg(7), Msg(8)]]
    async_engine._poll_once()
    wait_until(lambda: async_engine._dispatcher.positions() == {("t", 0): 9})
    assert sorted(seen) == [5, 6, 8]
    stats = async_engine.stats()
    assert (stats["processed"], stats["retried"], stats["failed"]) == (3, 3, 1)
    async_engine._poll_once()
    assert fakes.consumer.commits[-1] == ({("t", 0): (9, "")}, True)


def test_once_async_does_an_effect_once_across_attempts() -> None:
    store = MemoryDedupeStore()
    effects: list[str] = []

    async def twice() -> list[bool]:
        ctx = EffectGuard("g/t/0/1", "g", "t", 0, 1, 1, store)
        again = EffectGuard("g/t/0/1", "g", "t", 0, 1, 2, store)
        return [await ctx.once_async(lambda: effects.append("x")),
                await again.once_async(lambda: effects.append("x"))]  # fmt: skip

    assert asyncio.run(twice()) == [True, False]
    assert effects == ["x"]
