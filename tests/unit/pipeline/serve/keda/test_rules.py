"""The desired-scale rules and the activity state machine, on plain values (no broker)."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import replace

from pipeline.serve.keda.metadata import ScalerSpec
from pipeline.serve.keda.rules import (
    Activity,
    Decision,
    PartitionRates,
    ScaleState,
    capacity,
    metric_value,
    smooth,
    step,
    step_activity,
    stuck_partitions,
)
from schemas import GroupLag, LagStatus, WorstPartition

OK, WARN, STOP = LagStatus.OK, LagStatus.WARN, LagStatus.STOP
SPEC = ScalerSpec("g", "t", target_time_lag_s=10.0, smoothing_s=0.0, scale_down_window_s=0.0)


def summary(lag: int = 0, time_lag: float = 0.0, status: LagStatus = OK, parts: int = 8,
            at: int = 1_000, worst: tuple[WorstPartition, ...] = ()) -> GroupLag:  # fmt: skip
    return GroupLag("g", "t", at, status, lag, time_lag, 0.0, parts, parts, worst)


def rates(
    n: int, produce: float, consume: float, lag: int = 0, status: LagStatus = OK
) -> dict[int, PartitionRates]:
    return {p: PartitionRates(p, lag, produce, consume, status) for p in range(n)}


def test_capacity_is_produce_rate_plus_drain_over_one_consumers_measured_rate() -> None:
    # 4 partitions x 100/s produced; 2 consumers consume 50/s each (saturated); 2,000 waiting
    parts = rates(4, produce=100, consume=25, lag=500)
    cap = capacity(summary(lag=2000, parts=16), parts, SPEC, consumers=2)
    assert cap.rate_per_consumer == 50.0
    # (400/s produced + 2000 / 10 s) / 50 per consumer = 12
    assert math.isclose(cap.raw, 12.0) and cap.wanted == 12.0 and not cap.cap_binds


def test_a_group_that_keeps_up_stays_where_it_is() -> None:
    parts = rates(8, produce=100, consume=100, lag=2)
    cap = capacity(summary(lag=16), parts, SPEC, consumers=3)
    assert 3.0 <= cap.raw < 3.1


def test_the_partition_count_caps_the_scale_and_says_so() -> None:
    parts = rates(4, produce=100, consume=10, lag=1000)
    cap = capacity(summary(lag=4000, parts=4), parts, SPEC, consumers=1)
    assert cap.raw > 4 and cap.cap == 4 and cap.wanted == 4.0 and cap.cap_binds
    spec = ScalerSpec("g", "t", 10.0, max_replicas=3)
    assert capacity(summary(lag=4000, parts=4), parts, spec, consumers=1).cap == 3


def test_a_share_group_scales_past_the_partition_count_up_to_max_replicas() -> None:
    """KIP-932: a share group's consumers share every partition, so more consumers than
    partitions still drain it; only maxReplicas (else KEDA's default, 100) caps it, and a
    stuck share-partition holds no one consumer, so it is not set aside."""
    parts = rates(4, produce=100, consume=10, lag=1000)
    parts[2] = PartitionRates(2, 1000, 100, 0, STOP)
    share = replace(summary(lag=4000, parts=4), group_type="share")
    cap = capacity(share, parts, SPEC, consumers=1)
    assert cap.stuck == () and cap.cap == 100 and cap.raw > 4 and cap.wanted == cap.raw
    spec = ScalerSpec("g", "t", 10.0, max_replicas=12)
    capped = capacity(share, parts, spec, consumers=1)
    assert capped.cap == 12 and capped.wanted == 12.0 and capped.cap_binds
    consumer = capacity(summary(lag=4000, parts=4), parts, SPEC, consumers=1)
    assert consumer.cap == 4 and consumer.stuck == (2,)


def test_never_zero_while_lag_waits_even_with_nothing_measured() -> None:
    cap = capacity(summary(lag=5), {}, SPEC, consumers=0)
    assert cap.wanted == 1.0 and cap.floor == 1
    idle = capacity(summary(lag=0), rates(2, 0, 0), SPEC, consumers=0)
    assert idle.wanted == 0.0


def test_a_group_scaled_to_zero_uses_the_last_measured_rate() -> None:
    parts = rates(4, produce=100, consume=0, lag=300)
    cap = capacity(summary(lag=1200), parts, SPEC, consumers=0, remembered_rate=50.0)
    assert math.isclose(cap.raw, (400 + 120) / 50)


def test_one_stuck_partition_is_set_aside_and_reported_not_followed() -> None:
    parts = rates(4, produce=100, consume=100, lag=5)
    parts[2] = PartitionRates(2, 90_000, 100, 0, STOP)  # one consumer stuck on a poison record
    cap = capacity(summary(lag=90_015, parts=8), parts, SPEC, consumers=4)
    assert cap.stuck == (2,)
    # 3 healthy partitions kept up by 3 consumers (+1 for the stuck one): 4, not the cap
    # that 90,000 waiting offsets would ask for
    assert 4.0 <= cap.raw < 4.1 and not cap.cap_binds
    assert stuck_partitions(rates(3, 100, 0, lag=50, status=STOP).values()) == ()


def test_the_summarys_worst_partitions_override_older_snapshots() -> None:
    parts = rates(2, produce=100, consume=100, lag=0)
    worst = (WorstPartition(1, 800, 4.0, 100.0, 0.0, 100.0, 0.0, STOP),)
    cap = capacity(summary(lag=800, status=STOP, parts=2, at=5_000, worst=worst), parts, SPEC, 2)
    assert cap.stuck == (1,)


def test_smoothing_holds_the_count_through_noise_and_rises_at_once_on_a_real_rise() -> None:
    spec = ScalerSpec("g", "t", 10.0, smoothing_s=5.0, scale_down_window_s=30.0)
    rnd = random.Random(7)
    state, seen = ScaleState(), []
    for i in range(240):  # a minute of 250 ms summaries whose need wobbles around 3
        raw = 3.0 + rnd.uniform(-0.9, 0.9)
        cap = capacity(summary(lag=100), {}, spec, None)
        cap = type(cap)(raw, raw, 8, False, 1, (), 0.0, None, None)
        state = smooth(state, cap, spec, i * 250)
        seen.append(state.replicas)
    changes = sum(a != b for a, b in itertools.pairwise(seen))
    assert changes <= 1, f"flapped {changes} times: {seen}"  # at most one step, never back
    unsmoothed = [math.ceil(3.0 + rnd.uniform(-0.9, 0.9)) for _ in range(240)]
    flaps = sum(a != b for a, b in itertools.pairwise(unsmoothed))
    assert flaps > 50  # what KEDA's ceil(lag / threshold) of the same noise reports
    # a real rise to 7 is followed within a few time constants, and not overshot
    for i in range(240, 320):
        cap = type(cap)(7.0, 7.0, 8, False, 1, (), 0.0, None, None)
        state = smooth(state, cap, spec, i * 250)
    assert state.replicas == 7


def test_scale_down_waits_for_the_whole_window() -> None:
    spec = ScalerSpec("g", "t", 10.0, smoothing_s=0.0, scale_down_window_s=30.0)
    hi = capacity(summary(lag=100), {}, spec, None)
    hi = type(hi)(6.0, 6.0, 8, False, 1, (), 0.0, None, None)
    lo = type(hi)(2.0, 2.0, 8, False, 1, (), 0.0, None, None)
    s = smooth(ScaleState(), hi, spec, 0)
    s = smooth(s, lo, spec, 10_000)
    assert s.replicas == 6
    s = smooth(s, lo, spec, 30_001)
    assert s.replicas == 2


def test_activity_never_starts_inactive_while_lag_waits() -> None:
    a, push = step_activity(Activity(), summary(lag=3, time_lag=0.1), SPEC, 0)
    assert a.active is True and push is None
    a, _ = step_activity(Activity(), summary(lag=0), SPEC, 0)
    assert a.active is False


def test_an_incident_onset_pushes_true_even_when_already_active() -> None:
    spec = ScalerSpec("g", "t", 10.0, exit_window_s=5.0)
    a, _ = step_activity(Activity(), summary(lag=3, time_lag=0.1), spec, 0)
    a, push = step_activity(a, summary(lag=3, time_lag=0.1), spec, 250)
    assert push is None
    a, push = step_activity(a, summary(lag=80, time_lag=0.4, status=STOP), spec, 500)
    assert push is True and a.onset_ms == 500
    a, push = step_activity(a, summary(lag=120, time_lag=0.6, status=STOP), spec, 750)
    assert push is None  # the same incident


def test_false_only_after_zero_lag_and_ok_for_the_exit_window() -> None:
    spec = ScalerSpec("g", "t", 10.0, exit_window_s=5.0)
    a, _ = step_activity(Activity(), summary(lag=50, status=WARN), spec, 0)
    a, push = step_activity(a, summary(lag=0), spec, 1_000)  # closed: the window starts
    assert a.active and push is None
    a, push = step_activity(a, summary(lag=2), spec, 3_000)  # lag again: the window restarts
    a, push = step_activity(a, summary(lag=0), spec, 4_000)
    a, push = step_activity(a, summary(lag=0), spec, 8_999)
    assert a.active and push is None
    a, push = step_activity(a, summary(lag=0), spec, 9_000)
    assert a.active is False and push is False


def test_activation_from_zero_waits_for_the_activation_time_lag_or_a_not_ok_group() -> None:
    spec = ScalerSpec("g", "t", 10.0, activation_time_lag_s=2.0)
    a = Activity(active=False)
    a, push = step_activity(a, summary(lag=5, time_lag=1.0), spec, 0)
    assert not a.active and push is None
    a, push = step_activity(a, summary(lag=9, time_lag=2.5), spec, 1_000)
    assert a.active and push is True
    b, push = step_activity(
        Activity(active=False), summary(lag=5, time_lag=0.3, status=STOP), spec, 0
    )
    assert b.active and push is True


def test_metrics_for_the_hpa_keep_the_cap() -> None:
    d = Decision(ScalerSpec("g", "t", 10.0, metric="timeLag", max_replicas=3))
    step(d, summary(lag=500, time_lag=95.0, parts=8), {}, None, 1_000)
    assert metric_value(d) == 30.0  # ceil(30 / 10) = 3 replicas, the cap
    d = Decision(ScalerSpec("g", "t", 10.0, metric="offsetLag", target_offset_lag=100))
    step(d, summary(lag=450, parts=8), {}, None, 1_000)
    assert metric_value(d) == 450.0
    d = Decision(SPEC)
    step(d, summary(lag=2000, parts=16), rates(4, 100, 25, 500), 2, 1_000)
    assert metric_value(d) == 12.0


def test_the_view_reads_events_with_fields_it_does_not_know_and_counts_bad_ones() -> None:
    from pipeline.serve.keda.view import LagView

    view = LagView()
    ev = {"event": "group_lag", "v": 1, "group": "g", "topic": "t", "observed_at_ms": 5,
          "status": "WARN", "total_lag_offsets": 9, "max_time_lag_s": 1.5, "lag_rate_per_s": 2.0,
          "partitions": 2, "topic_partitions": 2, "owner_client_id": "w-1",
          "worst": [{"partition": 1, "lag_offsets": 9, "time_lag_s": 1.5, "lag_rate_per_s": 2.0,
                     "lag_accel_per_s2": 0.0, "produce_rate_per_s": 4.0,
                     "consume_rate_per_s": 2.0, "status": "WARN", "leader": 1,
                     "owner_host": "10.0.0.7"}]}  # fmt: skip
    s = view.apply(ev)
    assert s is not None and s.worst[0].status is WARN and s.total_lag_offsets == 9
    assert s.group_type == "consumer"  # v1: no group_type, a consumer group's
    assert view.apply(ev) is None  # the same summary again (a replay) changes nothing
    share = view.apply({**ev, "v": 2, "group": "tasks", "group_type": "share"})
    assert share is not None and share.group_type == "share"
    part = {"event": "partition_lag", "group": "g", "topic": "t", "partition": 1,
            "observed_at_ms": 6, "lag_offsets": 9, "produce_rate_per_s": 4.0,
            "consume_rate_per_s": 2.0, "status": "WARN", "time_lag_s": 1.5,
            "time_lag_source": "interpolated"}  # fmt: skip
    view.apply(part)
    assert view.partition_rates(("g", "t"))[1].consume_rate_per_s == 2.0
    for bad in ({**ev, "status": "MAYBE", "observed_at_ms": 7}, {"event": "group_lag"},
                {**part, "lag_offsets": "many"}, {"event": "action"}):  # fmt: skip
        assert view.apply(bad) is None
    assert view.bad_events == 4
