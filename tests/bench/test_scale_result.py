"""The scale benchmark's verdicts and estimate, on hand-made steps (no broker)."""

from __future__ import annotations

from typing import Any

from bench.support.scale_result import estimate, max_held, per_core, pipeline_replicas_needed
from bench.support.scale_steps import false_alarm_events


def step(rate: int, held: bool, cores: float = 0.5, **extra: Any) -> dict[str, Any]:
    return {
        "commits_per_s": rate,
        "sustained": held,
        "cpu_cores": cores,
        "commits_per_core_s": round(rate / cores),
        "group_partition_ticks_per_core_s": round(1_000_000 / cores),
        **extra,
    }


def test_non_ok_events_are_false_alarms() -> None:
    events = {"group_lag/OK": 900.0, "partition_lag/WARN": 3.0, "group_lag/STALL": 0.0}
    assert false_alarm_events(events) == {"partition_lag/WARN": 3.0}


def test_a_lucky_step_above_a_miss_does_not_count() -> None:
    steps = [step(50_000, True), step(100_000, False), step(75_000, True), step(120_000, True)]
    assert max_held(steps) == 75_000


def test_per_core_figures_come_from_held_steps_only() -> None:
    steps = [step(50_000, True, cores=0.5), step(100_000, False, cores=1.0)]
    assert per_core(steps, 50_000) == {
        "per_core_commits_per_s": 100_000,
        "group_partition_ticks_per_core_s": 2_000_000,
    }
    assert per_core([step(50_000, False)], 50_000) == {
        "per_core_commits_per_s": None,
        "group_partition_ticks_per_core_s": None,
    }


def test_the_binding_limit_decides() -> None:
    # 1,000,000 group-partitions: by CPU 1e6 / (500k x 1 core x 0.7) = 2.9 -> 3
    assert pipeline_replicas_needed(500_000, 100_000, 10_000, 100, 5.0) == 3
    # commits: 200,000/s / (40,000 x 0.7) = 7.1 -> 8
    assert pipeline_replicas_needed(500_000, 40_000, 10_000, 100, 5.0) == 8


def test_estimate_from_one_replica_that_held_the_shape() -> None:
    # 250,000 group-partitions on 0.5 core: 500,000 per core; 100,000 commits/s held
    one = [step(50_000, True, cores=0.5), step(100_000, True, cores=0.9), step(200_000, False)]
    two = [step(100_000, True), step(200_000, True), step(400_000, False)]
    e = estimate(one, two, 50_000, 250_000, 5.0)
    assert e["replicas_basis"] == "one replica held the shape"
    assert e["replicas_inputs"]["group_partitions_per_core"] == 500_000
    assert e["replicas_inputs"]["commits_per_replica"] == 100_000  # one alone
    assert e["replicas_for_10k_x_100"] == 3
    # two replicas that went less far together (the shared host gave out first) do not
    # make one replica count for less than it held alone
    host_bound = [step(50_000, True), step(87_500, True), step(100_000, False)]
    assert (
        estimate(one, host_bound, 50_000, 250_000, 5.0)["replicas_inputs"]["commits_per_replica"]
        == 100_000
    )


def test_no_estimate_when_no_replica_set_held_the_shape() -> None:
    e = estimate([step(50_000, False)], [step(50_000, False)], 50_000, 250_000, 5.0)
    assert e["replicas_for_10k_x_100"] is None


def test_a_step_the_generator_could_not_write_is_no_miss_of_the_pipeline() -> None:
    from bench.support.scale_result import max_held

    steps = [
        {"commits_per_s": 50_000, "sustained": True, "generator_on_rate": True},
        {"commits_per_s": 100_000, "sustained": False, "generator_on_rate": False},
        {"commits_per_s": 75_000, "sustained": True, "generator_on_rate": True},
    ]
    assert max_held(steps) == 75_000
    steps[1]["generator_on_rate"] = True  # the pipeline missed it: 75,000 above a miss? no
    assert max_held(steps) == 75_000
    steps[2]["sustained"] = False
    assert max_held(steps) == 50_000


def test_how_two_replicas_split_the_work_is_one_over_the_busier() -> None:
    from bench.support.scale_result import scaling_by_cpu

    one = [step(50_000, True, cores=0.6)]
    # even: 0.32 and 0.30 cores against 0.6 -> 1.88; the busier replica binds
    two = [
        step(
            50_000, True, cores=0.62, cpu_cores_by_replica=[0.32, 0.30], topics_by_replica=[26, 24]
        )
    ]
    assert scaling_by_cpu(one, two, 50_000) == {
        "one_replica_cores": 0.6,
        "two_replicas_cores": [0.32, 0.30],
        "topics_by_replica": [26, 24],
        "ratio": 1.88,
        "ratio_if_even": 1.94,
    }
    # uneven: one of the two did most of the work; split evenly, the same total would
    # have scaled by 0.6 / 0.325
    two[0]["cpu_cores_by_replica"] = [0.55, 0.1]
    assert scaling_by_cpu(one, two, 50_000)["ratio"] == 1.09
    assert scaling_by_cpu(one, two, 50_000)["ratio_if_even"] == 1.85
    # not held by both at the shape: no figure
    assert (
        scaling_by_cpu(one, [step(50_000, False, cpu_cores_by_replica=[0.3, 0.3])], 50_000) is None
    )
    assert scaling_by_cpu([step(50_000, False)], two, 50_000) is None
