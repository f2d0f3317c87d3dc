"""The incident scenarios' agents (bench/support/agents.py), without a broker: records fall
due on their schedule, a full client queue blocks the agent on the same record (its intent
kept, nothing dropped), and the tally counts latency from intent, lost and duplicates."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from actuators.workers import RateProducer
from bench.support.agents import Agent, Agents, Records, Schedule, Stream, tally


def _dues(schedule: Schedule) -> list[float]:
    out, due = [], schedule.first_due(0.0)
    while not math.isinf(due):
        out.append(due)
        due = schedule.next_due(due)
    return out


def test_a_surge_sends_factor_times_the_rate_within_its_window_only() -> None:
    dues = _dues(Schedule.surge(10.0, 6.0, 2.0, 4.0, 5.0))
    assert sum(1 for d in dues if d < 2.0) == 20
    assert sum(1 for d in dues if 2.0 <= d < 4.0) == 100
    assert sum(1 for d in dues if d >= 4.0) == 20
    assert all(d < 6.0 for d in dues)


def test_a_window_sends_nothing_outside_it() -> None:
    dues = _dues(Schedule.window(4.0, 1.0, 3.0))
    assert dues[0] == 1.0 and len(dues) == 8 and dues[-1] < 3.0


def test_records_are_heavy_tailed_and_capped() -> None:
    rng = np.random.default_rng(1)
    recs = Records(work_median_ms=5, work_sigma=1.2, work_cap_ms=100, heavy_share=0.1)
    draws = [recs.draw(rng) for _ in range(2000)]
    works = sorted(w for _, w, heavy in draws if not heavy)
    assert works[len(works) // 2] < 8 < 30 < works[int(len(works) * 0.97)] <= 100
    assert 120 < sum(1 for *_, heavy in draws if heavy) < 280


class _FullQueue:
    """A client whose queue is full for the first ``full`` produce calls."""

    def __init__(self, full: int) -> None:
        self.full, self.calls = full, 0
        self.sent: list[bytes] = []
        self.polls = 0

    def produce(self, topic: str, value: Any = None, key: Any = None, **kw: Any) -> None:
        self.calls += 1
        if self.calls <= self.full:
            raise BufferError("Local: Queue full")
        self.sent.append(value)
        if "on_delivery" in kw:
            kw["on_delivery"](None, None)

    def poll(self, timeout: float = 0) -> int:
        self.polls += 1
        time.sleep(min(timeout, 0.001))
        return 0

    def flush(self, timeout: float = -1) -> int:
        return 0

    def purge(self) -> None:
        raise AssertionError("nothing is left to purge")

    def __len__(self) -> int:
        return 0


def test_a_full_queue_blocks_the_agent_on_the_same_record_and_keeps_its_intent() -> None:
    fake = _FullQueue(full=5)
    client = RateProducer({"client.id": "agent-t-0"}, producer=fake, reporter=_FullQueue(0))
    agent = Agent(
        "unused:9092",
        "agent-t-0",
        "agents.t",
        [Stream(Schedule.steady(50.0, 0.1), Records())],
        rates_topic="r",
        seed=0,
        producer=client,
    )
    agents = Agents([agent])
    start_ms = agents.start(give_up_after_s=10)
    agents.wait_scheduled()
    agents.stop()
    counts = agent.counts()
    assert counts["intended"] == counts["handed"] == counts["acked"] == 5
    assert counts["dropped"] == 0 and agent.blocked_s > 0 and fake.calls == 10
    # the first record was refused five times and sent once, with the time it fell due
    heads = [v.split(b"\n", 1)[0] for v in fake.sent]
    assert heads[0].startswith(b'{"id":"agent-t-0-0"')
    intended = agent.snapshot()
    assert intended["agent-t-0-0"] - start_ms < 25  # due in the first 20 ms (50/s)
    assert sorted(intended.values()) == list(intended.values())


def test_the_tally_counts_from_intent_and_a_record_never_processed_as_lost() -> None:
    intended = {"a": 1000, "b": 1100, "c": 1200}
    rows = [
        ("a", "t", 0, 0, 1000, 1050),
        ("a", "t", 0, 0, 1000, 1400),
        ("b", "t", 1, 0, 1100, 1300),
    ]
    t = tally(intended, rows, end_ms=5000)
    assert t["processed"] == 2 and t["lost"] == 1 and t["duplicates"] == 1
    assert t["max_ms"] == 3800  # c waited from its intent until the end, at least
    assert tally({"b": 1100}, rows, end_ms=5000)["p99_ms"] == 200
