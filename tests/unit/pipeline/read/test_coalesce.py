"""The commits coalescer: latest per group-partition per topic, deletions, re-sends."""

from __future__ import annotations

from pipeline.read.coalesce import Coalescer
from schemas import OffsetCommit, OffsetDeleted


def c(group: str, topic: str, p: int, off: int, ts: int) -> OffsetCommit:
    return OffsetCommit(group, topic, p, off, ts)


def test_latest_commit_per_group_partition_one_batch_per_topic() -> None:
    b = Coalescer()
    b.add(c("g", "t", 0, 10, 1), 100)
    b.add(c("g", "t", 0, 20, 2), 101)
    b.add(c("g", "t", 1, 5, 2), 102)
    b.add(c("h", "u", 0, 7, 3), 103)
    b.add(c("g", "t", 0, 15, 1), 104)  # an older record (replay) does not win
    assert b.pending == 5 and b.first_ms == 100
    out = {e["topic"]: e for e in b.drain()}
    assert sorted(out["t"]["commits"]) == [["g", 0, 20, 2], ["g", 1, 5, 2]]
    assert out["u"]["commits"] == [["h", 0, 7, 3]]
    assert b.pending == 0 and b.drain() == []


def test_a_deletion_replaces_a_pending_commit_and_a_later_commit_replaces_it() -> None:
    b = Coalescer()
    b.add(c("g", "t", 0, 10, 1), 100)
    b.add(OffsetDeleted("g", "t", 0), 101)
    (e,) = b.drain()
    assert e["commits"] == [] and e["deleted"] == [["g", 0]]
    b.add(OffsetDeleted("g", "t", 1), 102)
    b.add(c("g", "t", 1, 3, 5), 103)
    (e,) = b.drain()
    assert e["commits"] == [["g", 1, 3, 5]] and e["deleted"] == []


def test_resend_known_queues_every_live_commit_again_but_not_deleted_ones() -> None:
    b = Coalescer()
    b.add(c("g", "t", 0, 10, 1), 100)
    b.add(c("g", "t", 1, 11, 1), 100)
    b.add(OffsetDeleted("g", "t", 1), 100)
    b.drain()
    b.resend_known(200)
    (e,) = b.drain()
    assert e["commits"] == [["g", 0, 10, 1]]


def test_batches_validate_against_their_schema() -> None:
    from schemas import validate

    b = Coalescer()
    b.add(c("g", "t", 0, 10, 1), 100)
    b.add(OffsetDeleted("g", "t", 1), 100)
    (event,) = b.drain()  # one batch for the topic, holding the commit and the deletion
    assert event["commits"] == [["g", 0, 10, 1]] and event["deleted"] == [["g", 1]]
    validate(event)


def test_every_topic_has_exactly_one_sampling_replica() -> None:
    from pipeline.read.coalesce import owns_topic

    topics = [f"topic-{i}" for i in range(200)]
    replicas = [frozenset(range(0, 6)), frozenset(range(6, 11)), frozenset(range(11, 16))]
    for t in topics:
        assert sum(owns_topic(t, 16, r) for r in replicas) == 1
    assert all(owns_topic(t, 16, frozenset(range(16))) for t in topics)  # one replica: all
    assert not owns_topic("t", 16, frozenset())  # before its first assignment: none


def _report(sent_at_ms: int, processed: int, released: list[list[object]] | None = None) -> dict:
    return {
        "event": "progress",
        "v": 1,
        "group": "g",
        "member": "w-1",
        "host": "node-a",
        "sent_at_ms": sent_at_ms,
        "interval_ms": 250,
        "partitions": [
            {
                "topic": "t",
                "partition": 3,
                "processed_offset": processed,
                "progress_ms": sent_at_ms - 5,
                "in_flight": 2,
                "running": 1,
            }
        ],
        "released": released or [],
    }


def test_progress_reports_ride_with_the_commits_latest_per_group_partition() -> None:
    from schemas import validate

    validate(_report(2000, 50))
    b = Coalescer()
    b.add(OffsetCommit("g", "t", 3, 40, 1900), now_ms=1)
    assert b.add_progress(_report(2000, 50), now_ms=2) == 1
    assert b.add_progress(_report(2250, 75, released=[["u", 1]]), now_ms=3) == 2
    b.add_progress(_report(2100, 60), now_ms=4)  # older than the one held: ignored
    by_topic = {e["topic"]: e for e in b.drain()}
    assert by_topic["t"]["commits"] == [["g", 3, 40, 1900]]
    # the messages the worker holds ride along: data waits, whatever the last sample saw
    assert by_topic["t"]["progress"] == [["g", 3, 75, 2245, 2250, 250, "w-1", "node-a", 2]]
    assert by_topic["u"]["progress"] == [["g", 1, -1, 0, 2250, 250, "w-1", "node-a", 0]]
    assert by_topic["u"]["commits"] == []
    assert set(by_topic) == {"t", "u"}
    for event in by_topic.values():
        validate(event)
    assert b.drain() == []


def test_a_malformed_progress_report_raises_for_the_caller_to_count() -> None:
    import pytest

    b = Coalescer()
    for bad in ({"event": "commits"}, {"event": "progress", "group": "g"}, [1, 2]):
        with pytest.raises((KeyError, TypeError, ValueError, AttributeError)):
            b.add_progress(bad, now_ms=1)
    assert b.drain() == []
