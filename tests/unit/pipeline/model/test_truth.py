"""Reading the truth: which group-partitions are read, how often, and what the operator
does with a timestamp read (no broker: the reader is a stand-in)."""

from __future__ import annotations

from typing import Any

from pipeline.model.config import LagConfig
from pipeline.model.events import TopicObservation
from pipeline.model.lag import TopicModel
from pipeline.model.model_op import LagOperator
from pipeline.model.truth import ReadLimits, ReadPlanner
from schemas import validate

T0 = 1_800_000_000_000


def fresh_model(groups: int, partitions: int) -> TopicModel:
    """A pipeline that just started: the groups committed long before its first sample,
    so their time lags can only be extrapolated; g0 has caught up on partition 0."""
    m = TopicModel("t", LagConfig())
    for g in range(groups):
        for p in range(partitions):
            m.commit(f"g{g}", p, 1_000 if (g, p) == (0, 0) else 10 * (g + 1) + p, T0 - 50)
    m.add_sample(T0, [1_000] * partitions)
    m.add_sample(T0 + 250, [1_000] * partitions)
    return m


def keys(reqs: list[Any]) -> list[tuple[str, int, int]]:
    return [(r.group, r.partition, r.offset) for r in reqs]


def test_only_extrapolated_time_lags_are_read_longest_first() -> None:
    m = fresh_model(2, 2)
    planner = ReadPlanner(ReadLimits())
    reqs = planner.plan(m.observe(T0 + 250), T0 + 250)
    # g0 p0 is caught up: nothing to read there; the oldest offset (longest lag) first
    assert keys(reqs) == [("g0", 1, 11), ("g1", 0, 20), ("g1", 1, 21)]
    assert {r.topic for r in reqs} == {"t"}


def test_each_group_partition_is_read_at_most_once_per_interval() -> None:
    m = fresh_model(1, 2)
    planner = ReadPlanner(ReadLimits(per_partition_s=30.0))
    assert len(planner.plan(m.observe(T0 + 250), T0 + 250)) == 1
    m.add_sample(T0 + 500, [1_000, 1_000])
    assert planner.plan(m.observe(T0 + 500), T0 + 500) == []  # still extrapolated: waits
    m.add_sample(T0 + 30_300, [1_000, 1_000])
    assert len(planner.plan(m.observe(T0 + 30_300), T0 + 30_300)) == 1  # asked again


def test_reads_a_second_are_bounded_by_a_token_bucket() -> None:
    m = fresh_model(10, 10)  # 99 extrapolated group-partitions
    planner = ReadPlanner(ReadLimits(per_s=4.0, burst=10))
    first = planner.plan(m.observe(T0 + 250), T0 + 250)
    assert len(first) == 10 and planner.dropped == 89
    m.add_sample(T0 + 1_250, [1_000] * 10)
    assert len(planner.plan(m.observe(T0 + 1_250), T0 + 1_250)) == 4  # one second: 4 more
    assert ReadPlanner(ReadLimits(per_s=0)).plan(m.observe(T0 + 1_250), T0 + 1_250) == []


class StandIn:
    """A reader that 'reads' a fixed timestamp for every request (no broker)."""

    def __init__(self, record_ms: int) -> None:
        self.record_ms = record_ms
        self.rows: dict[str, list[list[Any]]] = {}
        self.seen = 0

    def want(self, obs: TopicObservation) -> None:
        self.seen += 1
        for g in obs:
            for i, p in enumerate(g.partitions.tolist()):
                if g.time_lag_source[i] == 3:  # extrapolated
                    row = [g.group, p, int(g.committed[i]), self.record_ms]
                    self.rows.setdefault(obs.topic, []).append(row)

    def take(self, topic: str) -> list[list[Any]]:
        return self.rows.pop(topic, [])


class State(dict[str, Any]):
    def set(self, key: str, value: Any) -> None:
        self[key] = value

    def delete(self, key: str) -> None:
        self.pop(key, None)


def test_the_operator_feeds_what_was_read_to_the_model_and_says_so() -> None:
    reader = StandIn(record_ms=T0 - 600_000)  # written ten minutes before the first sample
    sources: list[int] = []
    op = LagOperator(
        LagConfig(),
        record_times=reader,
        on_observations=lambda obs: sources.append(int(obs.time_lag_source[0, 0])),
    )
    state = State()
    op({"event": "commits", "commits": [["g", 0, 5, T0 - 50]]}, "t", T0, None, state)
    events = []
    for i in range(4):
        t = T0 + i * 250
        sample = {"event": "watermarks", "sampled_at_ms": t, "high_watermarks": [900]}
        events += [e for e in op(sample, "t", t, None, state) if e["event"] == "partition_lag"]
    assert reader.seen == 4
    assert sources == [3, 2, 2, 2]  # extrapolated until the read arrived, then read
    last = events[-1]
    validate(last)
    assert last["time_lag_source"] == "read"
    assert last["time_lag_s"] == (last["observed_at_ms"] - (T0 - 600_000)) / 1000
