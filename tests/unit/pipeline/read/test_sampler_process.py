"""Samples held until the commits before them are read (``PendingSamples``, pure)."""

from __future__ import annotations

from pipeline.read.sampler_process import PendingSamples
from pipeline.read.watermarks import Tick


def tick(ms: int) -> Tick:
    return (ms, [("orders", b"{}")], {"tick": ms, "errors": 0, "by_kind": {}, "sample_ms": 1.0})


def test_a_sample_waits_until_the_commits_are_read_through_its_time() -> None:
    p = PendingSamples(timeout_s=1.0)
    p.add(tick(1_000), now_s=0.0)
    p.add(tick(1_250), now_s=0.25)
    assert p.wanted_ms == 1_250
    assert p.due(read_through_ms=999, now_s=0.3) == []
    assert [t[0] for t in p.due(read_through_ms=1_100, now_s=0.3)] == [1_000]
    assert [t[0] for t in p.due(read_through_ms=1_250, now_s=0.3)] == [1_250]
    assert p.wanted_ms == 0 and p.dropped == 0


def test_samples_keep_their_order_and_a_stale_one_is_dropped_and_counted() -> None:
    p = PendingSamples(timeout_s=1.0)
    p.add(tick(1_000), now_s=0.0)
    p.add(tick(1_250), now_s=0.9)
    # the reader fell behind: the first waited too long, the second still may go out
    assert p.due(read_through_ms=0, now_s=1.2) == []
    assert p.dropped == 1
    assert [t[0] for t in p.due(read_through_ms=1_300, now_s=1.3)] == [1_250]
