"""The slow_group scenario's measures (no broker): when the backlog was gone, and the replicas
the KEDA-like baseline asks for."""

from __future__ import annotations

from bench.support.drain import backlog_gone_ms
from bench.support.keda_poll import keda_replicas


def test_the_backlog_is_gone_at_the_end_of_its_first_settled_stretch() -> None:
    on_time = [(1000 + i, 1100 + i) for i in range(0, 9000, 100)]  # 100 ms each
    backlog = [(2000, 9000), (3000, 12_000), (4000, 11_000)]  # waited 7-9 s
    hiccup = [(12_500, 15_000)]  # late again 2.5 s after: the same backlog (under settled_s)
    later = [(40_000, 45_000)]  # late long after it settled: not this backlog
    rows = on_time + backlog + hiccup + later
    assert backlog_gone_ms(rows, 1000, late_s=2.0, settled_s=5.0) == 15_000
    # a record produced before the start is not counted
    assert backlog_gone_ms(rows, 13_000, late_s=2.0, settled_s=5.0) == 45_000
    assert backlog_gone_ms(on_time, 1000, late_s=2.0, settled_s=5.0) == 1000  # no backlog
    # a late record never processed: the backlog never went
    assert backlog_gone_ms([*backlog, (5000, None)], 1000, late_s=2.0, settled_s=5.0) is None


def test_keda_asks_total_lag_over_its_threshold_capped_at_the_partitions() -> None:
    assert keda_replicas(0, 4) == 1  # the group's minimum
    assert keda_replicas(10, 4) == 1 and keda_replicas(11, 4) == 2  # ceil(lag / 10)
    assert keda_replicas(25, 4) == 3
    assert keda_replicas(10_000, 4) == 4  # no idle consumers
    assert keda_replicas(25, 8, lag_threshold=5) == 5
