"""The lag operator without Quix: which events a tick publishes, and a restart from state."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

from pipeline.model.config import LagConfig
from pipeline.model.model_op import LagOperator
from schemas import validate
from tests.support.state import MemoryState

TICK_MS = 250
T0 = 1_800_000_000_000


def sample(t: int, hw: list[int]) -> dict[str, Any]:
    return {"event": "watermarks", "sampled_at_ms": t, "high_watermarks": hw}


def commits(rows: list[tuple[str, int, int, int]], v: int = 2) -> dict[str, Any]:
    """A ``commits`` event: v2 (columns), as the commits source writes it; v1 (rows), as
    a source of an earlier release did."""
    if v == 1:
        return {"event": "commits", "v": 1, "commits": [list(r) for r in rows]}
    groups = list(dict.fromkeys(r[0] for r in rows))
    return {
        "event": "commits",
        "v": 2,
        "groups": groups,
        "group": [groups.index(r[0]) for r in rows],
        "partition": [r[1] for r in rows],
        "offset": [r[2] for r in rows],
        "commit_ts_ms": [r[3] for r in rows],
        "deleted": [],
    }


def run(op: LagOperator, state: MemoryState, ticks: range, groups: int, partitions: int,
        stalled: frozenset[str] = frozenset()) -> list[list[dict[str, Any]]]:  # fmt: skip
    """Groups that keep up (commit every 500 ms) except ``stalled`` (stop committing at
    tick 40): the events of each tick."""
    out = []
    for i in ticks:
        t = T0 + i * TICK_MS
        hw = [i * 10 + p for p in range(partitions)]
        if i % 2 == 0:
            rows = [
                (f"g{g}", p, hw[p], t - 5)
                for g in range(groups)
                for p in range(partitions)
                if not (f"g{g}" in stalled and i >= 40)
            ]
            op(commits(rows), "t", t, None, state)
        out.append(op(sample(t, hw), "t", t, None, state))
    return out


def test_ok_groups_publish_a_summary_each_second_and_each_partition_each_interval():
    op = LagOperator(LagConfig(), snapshot_interval_ms=5_000, ok_summary_interval_ms=1_000)
    ticks = run(op, MemoryState(), range(1, 121), groups=6, partitions=8)  # 30 s
    steady = [e for tick in ticks[40:] for e in tick]  # the last 20 s
    kinds = Counter(e["event"] for e in steady)
    assert kinds["group_lag"] == 6 * 20  # one a second per group
    per_partition = Counter(
        (e["group"], e["partition"]) for e in steady if e["event"] == "partition_lag"
    )
    assert len(per_partition) == 6 * 8 and set(per_partition.values()) == {4}  # every 5 s
    # the groups publish their snapshots on different ticks, not all on one
    ticks_with_snapshots = sum(
        1 for tick in ticks[40:] if any(e["event"] == "partition_lag" for e in tick)
    )
    assert ticks_with_snapshots >= 5
    for e in steady[:50]:
        validate(e)


def test_a_stalled_group_is_published_at_once_then_each_alert_interval():
    op = LagOperator(LagConfig(), snapshot_interval_ms=30_000, alert_interval_ms=1_000)
    ticks = run(op, MemoryState(), range(1, 101), groups=3, partitions=4, stalled=frozenset({"g1"}))
    # g1's partitions turn non-OK soon after tick 40 and are published on the change
    changed = next(
        i
        for i, tick in enumerate(ticks)
        for e in tick
        if e["event"] == "partition_lag" and e["group"] == "g1" and e["status"] != "OK"
    )
    assert 40 <= changed + 1 <= 44
    later = [e for tick in ticks[changed + 1 : changed + 41] for e in tick]  # 10 s after
    g1 = Counter(
        e["partition"] for e in later if e["event"] == "partition_lag" and e["group"] == "g1"
    )
    assert set(g1) == {0, 1, 2, 3} and all(9 <= n <= 14 for n in g1.values())  # ~1/s (+ changes)
    assert not any(e["event"] == "partition_lag" and e["group"] != "g1" for e in later)
    g1_summaries = [e for e in later if e["event"] == "group_lag" and e["group"] == "g1"]
    assert len(g1_summaries) == 40 and all(e["status"] != "OK" for e in g1_summaries)


def test_a_restarted_operator_publishes_what_the_running_one_would():
    state = MemoryState()
    first = LagOperator(
        LagConfig(), snapshot_interval_ms=1_000, persist_interval_ms=0, window_persist_interval_ms=0
    )
    run(first, state, range(1, 61), groups=2, partitions=3, stalled=frozenset({"g0"}))
    assert {"hw", "win", "groups", "c:g0", "c:g1", "gen"} <= set(state.data)
    copy = MemoryState()
    copy.data = dict(state.data)
    again = LagOperator(
        LagConfig(), snapshot_interval_ms=1_000, persist_interval_ms=0, window_persist_interval_ms=0
    )
    t = T0 + 61 * TICK_MS
    hw = [610 + p for p in range(3)]
    restored = again(sample(t, hw), "t", t, None, copy)
    running = first(sample(t, hw), "t", t, None, state)
    summary = {e["group"]: e for e in restored if e["event"] == "group_lag"}
    assert summary["g0"]["status"] == "STOP"  # remembered: g0 stopped 5 s ago
    assert summary["g1"]["status"] == "OK"
    # the same numbers and the same snapshots; a new process also re-announces the OK group
    announced = [e for e in restored if e["event"] == "group_lag" and e["group"] == "g1"]
    assert len(announced) == 1
    assert [e for e in restored if e not in announced] == running


def test_commits_as_rows_v1_and_as_columns_v2_model_the_same() -> None:
    """A source of an earlier release wrote rows (v1); replayed after an upgrade, they
    are modelled as the columns (v2) the source writes now, and counted the same."""
    counted: list[list[int]] = [[], []]
    outs = []
    for v in (1, 2):
        op = LagOperator(LagConfig(), on_commits=counted[v - 1].append)
        state = MemoryState()
        events = []
        for i in range(1, 40):
            t = T0 + i * TICK_MS
            rows = [("a", p, i * 10, t - 5) for p in range(3)] + [("b", 1, i * 7, t - 9)]
            events += op(commits(rows, v=v), "t", t, None, state)
            events += op(sample(t, [i * 10 + 3] * 3), "t", t, None, state)
        outs.append((events, state.data["c:a"], state.data["c:b"]))
    assert outs[0] == outs[1] and counted[0] == counted[1] == [4] * 39


def test_commits_riding_a_sample_model_what_the_batch_ahead_of_it_did() -> None:
    """The commits source attaches a topic's batch to the sample it releases with it: the
    model applies it before the sample, with the same events, state and counts as the
    batch sent on its own just ahead (and counts it as a ``commits`` input too)."""
    outs = []
    for ride in (False, True):
        seen: list[str] = []  # the input kinds, as counted
        counted: list[int] = []
        op = LagOperator(LagConfig(), on_input=seen.append, on_commits=counted.append)
        state = MemoryState()
        events = []
        for i in range(1, 60):
            t = T0 + i * TICK_MS
            # group b stalls at tick 30 with data waiting: the tick's events show it
            rows = [("a", p, i * 10, t - 5) for p in range(3)]
            rows += [("b", 1, min(i, 30) * 7, t - 9)] if i % 3 else []
            tick = sample(t, [i * 10 + 3] * 3)
            if ride:
                events.append(op(tick | {"commits": commits(rows)}, "t", t, None, state))
            else:
                events.append(
                    op(commits(rows), "t", t, None, state) + op(tick, "t", t, None, state)
                )
        outs.append((events, state.data["c:a"], state.data["c:b"], counted))
        assert Counter(seen) == Counter({"commits": 59, "watermarks": 59})
    assert outs[0] == outs[1]
    assert any(e["status"] != "OK" for tick in outs[1][0] for e in tick if e.get("group") == "b")


def test_a_replayed_sample_still_applies_the_commits_riding_it() -> None:
    op, state = LagOperator(LagConfig()), MemoryState()
    op(sample(T0, [10]), "t", T0, None, state)
    late = sample(T0 - TICK_MS, [9]) | {"commits": commits([("a", 0, 9, T0 - 1)])}
    assert op(late, "t", T0, None, state) == []  # the sample is older: not modelled
    (model, _, _) = op._models["t"]
    assert model.committed[model._index["a"], 0] == 9


def test_topics_another_deployment_samples_are_not_modelled() -> None:
    """Two lagpilot deployments on one cluster share the input topic: each models only the
    topics its include/exclude watches (one once issued spreads for the other's groups)."""
    from pipeline.read.sampling import make_selector

    op = LagOperator(LagConfig(), watches=make_selector("mine\\..*").watches)
    state = MemoryState()
    for name in ("mine.orders", "theirs.orders"):
        for i in range(8):
            t = T0 + i * TICK_MS
            op(commits([("g", 0, i * 10, t - 5)]), name, t, None, state)
            op({"event": "owners", "owners": [["g", 0, "m", "c", "h"]]}, name, t, None, state)
            events = op(sample(t, [i * 10 + 50]), name, t, None, state)
            assert (len(events) > 0) == (name == "mine.orders") or i == 0, (name, i, events)
    assert op.topics == 1
    assert set(op._owners) == {"mine.orders"}


def test_a_stalled_workers_report_is_published_as_it_lands_and_not_repeated() -> None:
    """A report that shows a stalled worker is judged on arrival (not at the next sample):
    one partition_lag event naming the worker, which the next sample does not repeat.
    Healthy reports are not judged between samples at all."""
    op, state = LagOperator(LagConfig(), alert_interval_ms=60_000), MemoryState()
    stall_ms = T0 + 40 * TICK_MS + 30  # between two samples

    def produced(t: int) -> int:
        return (t - T0) * 160 // 1000  # 160 msgs/s

    published: list[tuple[str, dict[str, Any]]] = []
    for i in range(1, 60):
        t = T0 + i * TICK_MS
        for at in (t - 165, t - 40):  # every 125 ms, 40 ms before the samples (the SDK's)
            done = produced(min(at, stall_ms))
            batch = {
                "event": "commits",
                "commits": [["sdk", 0, done, at]] if i % 20 == 0 and at < stall_ms else [],
                "progress": [
                    [
                        "sdk",
                        0,
                        done,
                        min(at, stall_ms),
                        at,
                        125,
                        "w-1",
                        "host-a",
                        produced(at) - done,
                    ]
                ],
            }
            published += [("report", e) for e in op(batch, "t", at, None, state)]
        published += [
            ("sample", e)
            for e in op(sample(t, [produced(t)]), "t", t, None, state)
            if e["event"] == "partition_lag"
        ]
    assert all(e["observed_at_ms"] >= stall_ms for _, e in published)  # nothing before it
    (how, first), *rest = published
    assert how == "report" and first["status"] == "WARN"
    # 0.17 s without progress, then the next report (every 125 ms) as it lands
    assert 170 < first["observed_at_ms"] - stall_ms <= 170 + 125
    assert first["worker"]["member"] == "w-1" and first["worker"]["host"] == "host-a"
    validate(first)
    # then STALL (the worker reports, its prefix does not move), also on arrival; the
    # samples agree and publish nothing more (the alert interval is a minute here)
    assert [(h, e["status"]) for h, e in rest] == [("report", "STALL")]
    assert rest[0][1]["observed_at_ms"] - stall_ms <= 520 + 125


def test_the_rate_window_is_written_at_its_own_slower_interval() -> None:
    """The HWM history goes to the store every persist interval, the (large) rate window
    every window persist interval."""

    class Counting(MemoryState):
        def __init__(self) -> None:
            super().__init__()
            self.writes: dict[str, list[int]] = {}
            self.now = 0

        def set(self, key: str, value: Any) -> None:
            self.writes.setdefault(key, []).append(self.now)
            super().set(key, value)

    op = LagOperator(LagConfig(), persist_interval_ms=1_000, window_persist_interval_ms=5_000)
    state = Counting()
    for i in range(1, 50):  # 12 s of ticks
        state.now = t = T0 + i * TICK_MS
        op(commits([("g", 0, i * 10, t - 5)]), "t", t, None, state)
        op(sample(t, [i * 10 + 1]), "t", t, None, state)
    hw, win = state.writes["hw"], state.writes["win"]
    assert len(hw) >= 11 and all(b - a >= 1_000 for a, b in itertools.pairwise(hw))
    assert len(win) == 3 and all(b - a >= 5_000 for a, b in itertools.pairwise(win))


def test_periodic_events_of_healthy_groups_are_bounded_however_large_the_estate() -> None:
    """Past ``max_ok_summaries_per_s`` and ``max_snapshots_per_s`` the OK summaries and the
    snapshots come less often (the interval stretches with what the replica models); a
    group that turns bad is published at once all the same."""
    from pipeline.model.model_op import stretched_ms

    assert stretched_ms(1_000, 500, 1_000) == 1_000  # under the bound: as configured
    assert stretched_ms(1_000, 5_000, 1_000) == 5_000
    assert stretched_ms(30_000, 250_000, 2_000) == 125_000
    assert stretched_ms(1_000, 5_000, 0) == 1_000  # 0: no bound

    def events_per_s(op: LagOperator, stalled: frozenset[str] = frozenset()) -> Counter:
        out = run(op, MemoryState(), range(1, 81), groups=8, partitions=4, stalled=stalled)
        seen = Counter((e["event"], e["status"]) for tick in out[60:] for e in tick)
        return Counter({k: v / 5 for k, v in seen.items()})  # ticks 60..80: 5 s

    free = events_per_s(LagOperator(LagConfig(), snapshot_interval_ms=2_000))
    bounded = LagOperator(
        LagConfig(), snapshot_interval_ms=2_000, max_ok_summaries_per_s=2, max_snapshots_per_s=8
    )
    capped = events_per_s(bounded)
    assert free[("group_lag", "OK")] == 8 and capped[("group_lag", "OK")] <= 2
    assert free[("partition_lag", "OK")] >= 14 and capped[("partition_lag", "OK")] <= 8  # 16/s
    # g0 stops committing at tick 40: its summaries and alerts are not held
    stalled = events_per_s(
        LagOperator(
            LagConfig(), snapshot_interval_ms=2_000, max_ok_summaries_per_s=2, max_snapshots_per_s=8
        ),
        stalled=frozenset({"g0"}),
    )
    bad = sum(
        v for (event, status), v in stalled.items() if event == "group_lag" and status != "OK"
    )
    assert bad == 4  # every sample (4 a second) while not OK


def test_a_share_group_named_by_the_source_is_published_as_one() -> None:
    """The commits source names the share groups of a batch (``share_groups``): their
    summaries and partition snapshots say ``group_type: share`` (v2), the others
    ``consumer``; both validate against their schemas."""
    op = LagOperator(LagConfig())
    state = MemoryState()
    events: list[dict[str, Any]] = []
    for i in range(1, 12):
        t = T0 + i * TICK_MS
        batch = commits([("tasks", 0, i * 5, t - 5), ("billing", 0, i * 5, t - 5)])
        batch["share_groups"] = ["tasks"]
        validate(batch | {"topic": "t"})
        events += op(batch, "t", t, None, state)
        events += op(sample(t, [i * 10]), "t", t, None, state)
    kinds = {(e["event"], e["group"], e["group_type"], e["v"]) for e in events}
    assert kinds == {
        ("group_lag", "tasks", "share", 2),
        ("group_lag", "billing", "consumer", 2),
        ("partition_lag", "tasks", "share", 2),
        ("partition_lag", "billing", "consumer", 2),
    }
    for e in events:
        validate(e)
