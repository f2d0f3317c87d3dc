"""The sampler's pure core: topic selection, building samples, the beat, backoff, errors."""

from __future__ import annotations

import pickle

import kafka.errors as kp_errors
import pytest
from confluent_kafka import KafkaError, KafkaException
from hypothesis import given
from hypothesis import strategies as st
from quixstreams.kafka.exceptions import KafkaProducerDeliveryError

from pipeline.read.sampling import (
    SamplerStats,
    backoff_ms,
    build_watermarks,
    error_code_kind,
    error_kind,
    hwms_by_topic,
    is_retriable,
    keep_vanished,
    make_selector,
    next_deadline_ns,
    select_watched,
    wall_grid_anchor_ns,
)
from pipeline.read.watermarks import HighWatermarkSource
from schemas import ConfigError, Watermarks, decode, encode, to_dict, topics, validate

MS = 1_000_000


# -- topic selection


@pytest.mark.parametrize(
    "topic",
    [
        "__consumer_offsets",
        "__transaction_state",
        topics.WATERMARKS,
        topics.CONTROL,
        "repartition__lagpilot--commits--by-topic",
        "changelog__lagpilot--lag--state",
    ],
)
def test_internal_topics_are_excluded_by_default(topic: str) -> None:
    assert not make_selector().watches(topic)
    assert make_selector(exclude_internal=False).watches(topic)


def test_include_and_exclude_match_whole_names() -> None:
    sel = make_selector(include="orders.*", exclude=r"orders\.dlq")
    assert sel.watches("orders")
    assert sel.watches("orders.eu")
    assert not sel.watches("orders.dlq")
    assert not sel.watches("old-orders")  # fullmatch, not search
    assert make_selector(include="orders").watches("orders")
    assert not make_selector(include="orders").watches("orders2")


def test_user_pattern_cannot_reinclude_internal_topics_unless_asked() -> None:
    assert not make_selector(include="__.*").watches("__consumer_offsets")
    assert make_selector(include="__.*", exclude_internal=False).watches("__consumer_offsets")


@pytest.mark.parametrize("key", ["include", "exclude"])
def test_bad_regex_is_a_config_error_naming_the_key(key: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{key}='\(' is not a valid regular expression"):
        make_selector(include="(") if key == "include" else make_selector(exclude="(")


def test_select_watched_indexes_leaders_by_partition() -> None:
    cluster = {
        "a": {1: 2, 0: 1, 2: 3},
        "b": {},  # being created: no partitions yet
        "c": {0: 1, 2: 1},  # partition 1 missing from this snapshot
        "__consumer_offsets": {0: 1},
        "skip-me": {0: 1},
    }
    watched = select_watched(cluster, make_selector(exclude="skip-.*"))
    assert watched == {"a": (1, 2, 3), "c": (1, -1, 1)}


def test_a_topic_one_snapshot_left_out_is_kept_until_its_grace_ends() -> None:
    """bench-faults row 2: a node just restarted answered metadata without a live topic,
    the sampler dropped it for 8-9 s, and detection paused. Kept for the grace instead."""
    before = {"a": (1, 2), "b": (3,)}
    fresh = {"b": (1,)}  # "a" missing from this snapshot; b's leader moved
    watched, since = keep_vanished(fresh, before, {}, now_ms=10_000, grace_ms=15_000)
    assert watched == {"a": (1, 2), "b": (1,)} and since == {"a": 10_000}
    # still missing 14 s later: kept; back in the next snapshot: the missing clock is reset
    watched, since = keep_vanished(fresh, watched, since, now_ms=24_000, grace_ms=15_000)
    assert "a" in watched and since == {"a": 10_000}
    watched, since = keep_vanished(before, watched, since, now_ms=25_000, grace_ms=15_000)
    assert watched == before and since == {}
    # deleted for good: dropped once missing for the whole grace
    watched, since = keep_vanished(fresh, before, {"a": 10_000}, now_ms=25_000, grace_ms=15_000)
    assert watched == {"b": (1,)} and since == {}


def test_a_topic_metadata_leaves_out_but_that_answers_list_offsets_is_kept() -> None:
    """bench-faults row 2 again: metadata left a live topic out for 47 s around a node's
    restart while its partitions answered ListOffsets; dropped at the end of the grace, the
    topic went unsampled for 32 s. A topic that answers is there, whatever metadata says."""
    before = {"a": (1, 2), "b": (3,)}
    fresh = {"b": (3,)}
    # missing since 10 s, past the 15 s grace, but a partition answered 2 s ago: kept
    watched, since = keep_vanished(
        fresh, before, {"a": 10_000}, now_ms=40_000, grace_ms=15_000, answered_ms={"a": 38_000}
    )
    assert watched == before and since == {"a": 10_000}
    # no answer for the grace either (deleted, or its nodes gone for good): dropped
    watched, since = keep_vanished(
        fresh, before, {"a": 10_000}, now_ms=54_000, grace_ms=15_000, answered_ms={"a": 38_000}
    )
    assert watched == {"b": (3,)} and since == {}


# -- building samples


def test_build_watermarks_one_per_topic_failed_partitions_are_minus_one() -> None:
    watched = {"a": (1, 1, 2), "b": (3,), "gone": (1, 1)}
    offsets = {("a", 0): 10, ("a", 2): 30, ("b", 0): 0}
    hwms = hwms_by_topic(watched, offsets)
    assert hwms == {"a": [10, -1, 30], "b": [0], "gone": [-1, -1]}
    got = build_watermarks(watched, hwms, sampled_at_ms=1_700_000_000_123)
    assert got == [
        Watermarks("a", 1_700_000_000_123, (10, -1, 30), (1, 1, 2)),
        Watermarks("b", 1_700_000_000_123, (0,), (3,)),
    ]  # "gone" had no partition answer: no message rather than all -1


def test_build_watermarks_ignores_offsets_of_unwatched_partitions() -> None:
    watched = {"a": (1,)}
    hwms = hwms_by_topic(watched, {("a", 0): 5, ("a", 1): 9, ("x", 0): 1})
    assert build_watermarks(watched, hwms, 7) == [Watermarks("a", 7, (5,), (1,))]
    # lists longer or shorter than the watched topic (the partitions grew meanwhile)
    assert build_watermarks(watched, {"a": [5, 9], "x": [1]}, 7) == [Watermarks("a", 7, (5,), (1,))]
    got = build_watermarks({"a": (1, 2, 2)}, {"a": [5]}, 7)
    assert got == [Watermarks("a", 7, (5, -1, -1), (1, 2, 2))]


@given(
    st.dictionaries(
        st.text("abc.-_", min_size=1, max_size=8),
        st.lists(st.integers(-1, 5), min_size=1, max_size=6),
        max_size=5,
    ),
    st.integers(0, 2**41),
    st.data(),
)
def test_every_built_sample_validates_and_round_trips(watched_lists, sampled_at_ms, data) -> None:
    watched = {t: tuple(leaders) for t, leaders in watched_lists.items()}
    offsets = {
        (t, p): data.draw(st.integers(0, 2**62))
        for t, leaders in watched.items()
        for p in range(len(leaders))
        if data.draw(st.booleans())
    }
    for wm in build_watermarks(watched, hwms_by_topic(watched, offsets), sampled_at_ms):
        event = decode(encode(wm))
        validate(event)
        assert event == to_dict(wm)
        assert len(event["high_watermarks"]) == len(watched[wm.topic])


def test_schema_rejects_what_the_model_could_not_use() -> None:
    good = to_dict(Watermarks("a", 1, (5, -1), (1, 1)))
    validate(good)
    for bad in (
        {**good, "high_watermarks": []},
        {**good, "high_watermarks": [-2]},
        {**good, "sampled_at_ms": 1.5},
        {**good, "topic": ""},
        {**good, "extra": 1},
        {k: v for k, v in good.items() if k != "leaders"},
    ):
        with pytest.raises(Exception, match="watermarks v1"):
            validate(bad)


# -- the beat


def test_ticks_stay_on_the_grid_whatever_each_sample_took() -> None:
    anchor, interval = 1_000 * MS, 250 * MS
    deadline = anchor
    seen = []
    for took_ms in (3, 40, 0, 249, 17):
        deadline, skipped = next_deadline_ns(anchor, interval, deadline, deadline + took_ms * MS)
        seen.append((deadline, skipped))
    assert seen == [(anchor + k * interval, 0) for k in range(1, 6)]


def test_a_slow_sample_skips_ticks_instead_of_bursting() -> None:
    anchor, interval = 0, 250 * MS
    deadline, skipped = next_deadline_ns(anchor, interval, 0, now_ns=760 * MS)
    assert (deadline, skipped) == (1000 * MS, 3)  # 250, 500, 750 passed while sampling


def test_a_sample_finishing_exactly_on_a_tick_runs_that_tick() -> None:
    assert next_deadline_ns(0, 250 * MS, 0, now_ns=250 * MS) == (250 * MS, 0)


def test_backoff_delays_to_the_first_tick_after_it() -> None:
    deadline, _ = next_deadline_ns(0, 250 * MS, 0, now_ns=10 * MS, delay_ns=600 * MS)
    assert deadline == 750 * MS


@given(
    st.integers(0, 10**12),
    st.integers(1, 10**10),
    st.integers(0, 10**12),
    st.integers(0, 10**11),
    st.integers(0, 10**11),
)
def test_next_deadline_properties(anchor, interval, last_k, took, delay) -> None:
    last = anchor + (last_k % 10**4) * interval
    now = last + took
    deadline, skipped = next_deadline_ns(anchor, interval, last, now, delay)
    assert (deadline - anchor) % interval == 0
    assert deadline > last
    assert deadline >= now + delay
    assert deadline - interval < max(last + 1, now + delay)  # the earliest such tick
    assert skipped == (deadline - last) // interval - 1


def test_backoff_doubles_and_is_capped() -> None:
    assert [backoff_ms(n, 250, 5000) for n in range(8)] == [
        0, 250, 500, 1000, 2000, 4000, 5000, 5000,
    ]  # fmt: skip
    assert backoff_ms(10_000, 250, 5000) == 5000  # no overflow after a long outage


# -- errors


def test_error_kinds_are_short_stable_words() -> None:
    assert error_kind(KafkaException(KafkaError(KafkaError._TIMED_OUT))) == "_timed_out"
    assert (
        error_kind(KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)))
        == "unknown_topic_or_part"
    )
    assert error_kind(KafkaProducerDeliveryError(KafkaError(KafkaError._MSG_TIMED_OUT))) == (
        "_msg_timed_out"
    )
    assert error_kind(BufferError("full")) == "queue_full"
    assert error_kind(TimeoutError()) == "timed_out"
    assert error_kind(RuntimeError("x")) == "runtimeerror"


def test_retriable_tells_transient_from_needs_a_person() -> None:
    assert is_retriable(KafkaException(KafkaError(KafkaError._TRANSPORT)))
    assert is_retriable(KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE)))
    assert not is_retriable(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)))
    assert not is_retriable(KafkaException(KafkaError(KafkaError.SASL_AUTHENTICATION_FAILED)))


def test_kafka_python_errors_get_the_words_librdkafka_uses() -> None:
    # the per-broker way (kafka-python) and the AdminClient's way count under one kind
    assert error_kind(kp_errors.UnknownTopicOrPartitionError()) == "unknown_topic_or_part"
    assert error_kind(kp_errors.NotLeaderForPartitionError()) == "not_leader_for_partition"
    assert error_kind(kp_errors.RequestTimedOutError()) == "request_timed_out"
    assert error_kind(kp_errors.KafkaTimeoutError()) == "timed_out"
    assert error_kind(kp_errors.KafkaConnectionError("refused")) == "_transport"
    assert error_kind(kp_errors.NodeNotReadyError(1)) == "_transport"
    assert error_kind(kp_errors.UnknownBrokerIdError(7)) == "_unknown_broker"
    assert error_code_kind(3) == "unknown_topic_or_part"
    assert error_code_kind(99_999) == "error_99999"  # a code newer than librdkafka


def test_kafka_python_errors_are_retriable_as_librdkafka_says() -> None:
    assert is_retriable(kp_errors.KafkaConnectionError("refused"))
    assert is_retriable(kp_errors.NotLeaderForPartitionError())
    assert not is_retriable(kp_errors.SaslAuthenticationFailedError())
    assert not is_retriable(kp_errors.TopicAuthorizationFailedError())


def test_stats_count_errors_by_kind_and_fit_a_header() -> None:
    stats = SamplerStats()
    stats.count_error("partition", "unknown_topic_or_part", 3)
    stats.count_error("metadata", "_transport")
    stats.count_error("partition", "unknown_topic_or_part")
    stats.ticks = 12
    assert stats.errors == {"partition:unknown_topic_or_part": 4, "metadata:_transport": 1}
    assert stats.as_dict()["errors_total"] == 5
    assert decode(stats.header()) == {
        "tick": 12,
        "errors": 5,
        "by_kind": {"partition:unknown_topic_or_part": 4, "metadata:_transport": 1},
        "sample_ms": 0.0,
    }


# -- configuration (no I/O in the constructor: Quix pickles it into a spawned process)


def test_source_holds_plain_data_and_survives_the_spawn_pickle() -> None:
    src = HighWatermarkSource("wm", {"bootstrap.servers": "h:9092"}, include="a.*", exclude="b")
    clone = pickle.loads(pickle.dumps(src))
    assert (clone.name, clone.include, clone.exclude) == ("wm", "a.*", "b")
    assert clone.broker_config == {"bootstrap.servers": "h:9092"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"broker_config": {}}, r"broker_config\['bootstrap.servers'\] is missing"),
        ({"include": "[a-"}, r"^include='\[a-' is not a valid regular expression"),
        ({"sample_interval_ms": 0}, r"^sample_interval_ms=0: set it to a positive integer"),
        ({"metadata_refresh_ms": -5}, r"^metadata_refresh_ms=-5: set it"),
    ],
)
def test_config_errors_name_the_key_and_the_fix(kwargs, message) -> None:
    args = {"name": "wm", "broker_config": {"bootstrap.servers": "h:9092"}, **kwargs}
    with pytest.raises(ConfigError, match=message) as info:
        HighWatermarkSource(**args)
    assert info.value.retriable is False


def test_unknown_client_setting_is_a_config_error_at_setup() -> None:
    src = HighWatermarkSource("wm", {"bootstrap.servers": "h:9092", "no.such.setting": "1"})
    with pytest.raises(ConfigError, match=r"no\.such\.setting"):
        src.setup()


def test_the_tick_grid_falls_on_wall_clock_multiples_of_the_interval():
    interval = 250 * MS
    mono, wall = 7_000_123 * MS, 1_795_000_000_040 * MS  # 40 ms past a wall-clock tick
    anchor = wall_grid_anchor_ns(mono, wall, interval)
    deadline, _ = next_deadline_ns(anchor, interval, anchor, mono)
    # the next tick is 210 ms away: on the wall clock, at ...000_250 ms
    assert deadline - mono == 210 * MS
    assert (wall + deadline - mono) % interval == 0
