"""The commits coalescer: latest per group-partition per topic, deletions, re-sends."""

from __future__ import annotations

from pipeline.read.coalesce import Coalescer, commit_rows
from schemas import OffsetCommit, OffsetDeleted


def c(group: str, topic: str, p: int, off: int, ts: int) -> OffsetCommit:
    return OffsetCommit(group, topic, p, off, ts)


def test_latest_commit_per_group_partition_one_batch_per_topic() -> None:
    b = Coalescer()
    b.add(c("g", "t", 0, 10, 1), 100)
    b.add(c("g", "t", 0, 20, 2), 101)
    b.add(c("g", "t", 1, 5, 2), 102)
    b.add(c("h", "u", 0, 7, 3), 103)
    b.add(c("g", "t", 1, 6, 1), 104)  # the last in the log wins, as compaction keeps it
    assert b.pending == 5 and b.first_ms == 100
    out = {e["topic"]: e for e in b.drain()}
    assert sorted(commit_rows(out["t"])) == [["g", 0, 20, 2], ["g", 1, 6, 1]]
    assert commit_rows(out["u"]) == [["h", 0, 7, 3]]
    assert out["t"]["groups"] == ["g"] and out["t"]["group"] == [0, 0]  # names once
    assert b.pending == 0 and b.drain() == []


def test_a_deletion_replaces_a_pending_commit_and_a_later_commit_replaces_it() -> None:
    b = Coalescer()
    b.add(c("g", "t", 0, 10, 1), 100)
    b.add(OffsetDeleted("g", "t", 0), 101)
    (e,) = b.drain()
    assert commit_rows(e) == [] and e["deleted"] == [["g", 0]]
    b.add(OffsetDeleted("g", "t", 1), 102)
    b.add(c("g", "t", 1, 3, 5), 103)
    (e,) = b.drain()
    assert commit_rows(e) == [["g", 1, 3, 5]] and e["deleted"] == []


def test_resend_known_queues_every_live_commit_again_but_not_deleted_ones() -> None:
    b = Coalescer()
    b.add(c("g", "t", 0, 10, 1), 100)
    b.add(c("g", "t", 1, 11, 1), 100)
    b.add(OffsetDeleted("g", "t", 1), 100)
    b.drain()
    b.resend_known(200)
    (e,) = b.drain()
    assert commit_rows(e) == [["g", 0, 10, 1]]


def test_batches_validate_against_their_schema() -> None:
    from schemas import validate

    b = Coalescer()
    b.add(c("g", "t", 0, 10, 1), 100)
    b.add(OffsetDeleted("g", "t", 1), 100)
    (event,) = b.drain()  # one batch for the topic, holding the commit and the deletion
    assert commit_rows(event) == [["g", 0, 10, 1]] and event["deleted"] == [["g", 1]]
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
    assert commit_rows(by_topic["t"]) == [["g", 3, 40, 1900]]
    # the messages the worker holds ride along: data waits, whatever the last sample saw
    assert by_topic["t"]["progress"] == [["g", 3, 75, 2245, 2250, 250, "w-1", "node-a", 2]]
    assert by_topic["u"]["progress"] == [["g", 1, -1, 0, 2250, 250, "w-1", "node-a", 0]]
    assert commit_rows(by_topic["u"]) == []
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


# --------------------------------------------------------------------------- the fast path

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from bench.support import layout_codec  # noqa: E402
from pipeline.read.coalesce import commit_key  # noqa: E402
from pipeline.read.offsets import decode_record  # noqa: E402


def _value(version: int, offset: int, ts: int, metadata: str = "") -> bytes:
    return layout_codec.encode(
        "OffsetCommitValue", version, offset=offset, leader_epoch=3, metadata=metadata,
        commit_timestamp=ts, expire_timestamp=-1,
    )  # fmt: skip


def test_commit_key_is_the_layout_of_an_offset_commit_key() -> None:
    key = layout_codec.encode("OffsetCommitKey", 1, group="g1", topic="t", partition=7)
    assert commit_key("g1", "t", 7) == key


def test_take_keeps_a_plain_commit_and_leaves_the_rest_to_the_careful_way() -> None:
    b = Coalescer()
    key = commit_key("g", "t", 2)
    assert b.take(key, _value(3, 40, 1000), 5) and b.take(key, _value(1, 41, 1001), 6)
    assert not b.take(key, None, 7)  # a tombstone: a deletion, decoded the careful way
    assert not b.take(key, _value(3, 42, 1002, metadata="m"), 8)  # metadata: careful way
    assert not b.take(key, _value(4, 42, 1002), 8)  # v4 (flexible): careful way
    assert not b.take(b"\x00\x00" + key[2:], _value(3, 1, 1), 9)  # type 0 key: careful way
    assert not b.take(key[:-1], _value(3, 1, 1), 9)  # malformed key: careful way explains
    assert not b.take(None, _value(3, 1, 1), 9)
    assert b.take_counts() == (2, 0) and b.take_counts() == (0, 0)
    assert b.first_ms == 5
    (e,) = b.drain()
    assert commit_rows(e) == [["g", 2, 41, 1001]]


def test_own_groups_commits_are_counted_and_dropped() -> None:
    b = Coalescer(own_prefix="lagpilot")
    assert b.take(commit_key("lagpilot.x", "t", 0), _value(3, 1, 1), 1)
    assert b.take(commit_key("lagpilot.x", "t", 0), _value(3, 2, 2), 1)  # cached as own
    assert b.take_counts() == (0, 2) and b.pending == 0 and b.drain() == []


def test_commits_of_tracked_groups_are_handed_on_in_read_order() -> None:
    b = Coalescer()
    b.tracked = {"g": object()}
    b.take(commit_key("g", "t", 0), _value(3, 5, 10), 1)
    b.take(commit_key("h", "t", 0), _value(3, 6, 11), 1)
    b.take(commit_key("g", "t", 0), _value(3, 7, 12), 1)
    assert b.take_tracked() == [(("t", "g", 0), 5, 10), (("t", "g", 0), 7, 12)]
    assert b.take_tracked() == []


def test_a_commit_taken_after_a_deletion_undoes_it() -> None:
    from schemas import OffsetDeleted

    b = Coalescer()
    b.add(OffsetDeleted("g", "t", 0), 1)
    b.take(commit_key("g", "t", 0), _value(3, 9, 2), 2)
    (e,) = b.drain()
    assert commit_rows(e) == [["g", 0, 9, 2]] and e["deleted"] == []


records = st.lists(
    st.tuples(
        st.sampled_from(["g", "h", "lagpilot.me", "ünï"]),
        st.sampled_from(["t", "u"]),
        st.integers(0, 3),
        st.one_of(
            st.none(),
            st.tuples(
                st.sampled_from([1, 3, 4]),
                st.integers(0, 2**40),
                st.integers(0, 2**42),
                st.sampled_from(["", "", "meta"]),
            ),
        ),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(records)
def test_the_fast_path_drains_exactly_what_the_careful_decoder_gives(rows: list) -> None:
    """Every stream of records: taking the plain commits fast (and decoding the rest the
    careful way) drains the same events as decoding every record the careful way."""
    from schemas import OffsetCommit, OffsetDeleted

    fast, careful = Coalescer(own_prefix="lagpilot"), Coalescer(own_prefix="lagpilot")
    own_careful = 0
    for group, topic, partition, v in rows:
        key = commit_key(group, topic, partition)
        value = None if v is None else _value(v[0], v[1], v[2], v[3])
        record = decode_record(key, value)
        assert isinstance(record, OffsetCommit | OffsetDeleted)
        if group.startswith("lagpilot"):
            own_careful += isinstance(record, OffsetCommit)
        else:
            careful.add(record, 0)
        if not fast.take(key, value, 0) and not group.startswith("lagpilot"):
            fast.add(record, 0)
    taken, own = fast.take_counts()
    assert own <= own_careful and taken <= len(rows)

    def canon(events: list) -> list:
        return sorted((e["topic"], sorted(commit_rows(e)), e["deleted"]) for e in events)

    assert canon(fast.drain()) == canon(careful.drain())
    assert fast.known == careful.known
