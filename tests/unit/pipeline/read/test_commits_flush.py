"""When the commits source sends its buffer on (pipeline.read.commits.flush_due): a small
buffer soon, a busy one at the batching cadence, reports and a full buffer at once."""

from __future__ import annotations

import orjson

from pipeline.read.commits import (
    QUICK_FLUSH_BELOW,
    QUICK_FLUSH_MS,
    flush_due,
    riders,
    with_commits,
)

CADENCE = dict(flush_ms=250, max_pending=20_000)


def test_an_empty_buffer_never_goes() -> None:
    assert not flush_due(0, 10_000, reports=True, **CADENCE)


def test_a_small_buffer_goes_after_the_quick_delay_not_the_cadence() -> None:
    # a consumer committing every 100 ms that stalls: its commits reach the model in 50 ms
    assert not flush_due(40, QUICK_FLUSH_MS - 1, reports=False, **CADENCE)
    assert flush_due(40, QUICK_FLUSH_MS, reports=False, **CADENCE)


def test_a_busy_buffer_waits_for_the_cadence() -> None:
    # 50,000 commits/s: 2,500 pending after 50 ms, batched as before
    busy = QUICK_FLUSH_BELOW
    assert not flush_due(busy, 200, reports=False, **CADENCE)
    assert flush_due(busy, 250, reports=False, **CADENCE)


def test_reports_and_a_full_buffer_go_at_once() -> None:
    assert flush_due(5, 0, reports=True, **CADENCE)
    assert flush_due(20_000, 0, reports=False, **CADENCE)


def test_a_cadence_shorter_than_the_quick_delay_is_kept() -> None:
    assert flush_due(3, 10, reports=False, flush_ms=10, max_pending=20_000)
    assert not flush_due(3, 9, reports=False, flush_ms=10, max_pending=20_000)


def _batch(topic: str) -> dict[str, object]:
    return {"event": "commits", "v": 2, "topic": topic, "groups": ["g"], "group": [0],
            "partition": [1], "offset": [7], "commit_ts_ms": [5], "deleted": []}  # fmt: skip


def test_a_batch_rides_the_first_sample_of_its_topic_the_others_go_alone() -> None:
    ticks = [
        (1_000, [("a", b"{}"), ("b", b"{}")], {}),
        (1_250, [("a", b"{}")], {}),
    ]
    riding, alone = riders([_batch("a"), _batch("c")], ticks)
    assert list(riding) == ["a"] and [b["topic"] for b in alone] == ["c"]
    assert riders([_batch("a")], []) == ({}, [_batch("a")])  # no sample: all alone


def test_with_commits_splices_the_batch_into_the_sample() -> None:
    sample = orjson.dumps({"event": "watermarks", "v": 1, "topic": "a", "sampled_at_ms": 9,
                           "high_watermarks": [3], "leaders": []})  # fmt: skip
    spliced = with_commits(sample, _batch("a"))
    assert spliced is not None
    assert orjson.loads(spliced) == orjson.loads(sample) | {"commits": _batch("a")}
    from schemas import validate

    validate(orjson.loads(spliced))  # the sample's schema allows it
    for not_an_object in (b"{}", b"[1]", b"", b'"x"'):
        assert with_commits(not_an_object, _batch("a")) is None
