"""What ``bench/perf/scale.py`` writes: per-core figures, false alarms, and the replicas a
10,000-partition x 100-group cluster needs, from the measured steps (pure: steps in, the
result's figures out)."""

from __future__ import annotations

import math
from typing import Any

#: Each replica is planned at this share of what it was measured to hold.
HEADROOM = 0.7
#: The CPU a replica is planned on (the target: under one core a replica).
CORES_PER_REPLICA = 1.0


def max_held(steps: list[dict[str, Any]]) -> int:
    """The highest rate held, below every rate missed (a lucky step above a miss
    does not count). A step whose generator did not write its rate (the host gave out:
    ``generator_on_rate`` false) is no miss of the pipeline's."""
    missed = min(
        (
            s["commits_per_s"]
            for s in steps
            if not s["sustained"] and s.get("generator_on_rate", True)
        ),
        default=math.inf,
    )
    held = [s["commits_per_s"] for s in steps if s["sustained"] and s["commits_per_s"] < missed]
    return max(held, default=0)


def pipeline_replicas_needed(
    group_partitions_per_core: float,
    commits_per_replica: float,
    partitions: int,
    groups: int,
    commit_s: float,
    cores_per_replica: float = CORES_PER_REPLICA,
    headroom: float = HEADROOM,
) -> int:
    """Replicas for ``partitions`` x ``groups`` committing every ``commit_s``, whichever binds:

    - by CPU: the group-partitions (sampled, modelled, each committing every ``commit_s``)
      one core of a replica was measured to hold, times ``cores_per_replica``;
    - by commits: the commit rate one replica was measured to take in (the step ladder).

    Each replica is loaded to ``headroom`` of that.

    >>> pipeline_replicas_needed(500_000, 100_000, 10_000, 100, 5.0)
    3
    >>> pipeline_replicas_needed(500_000, 40_000, 10_000, 100, 5.0)
    8
    """
    group_partitions = partitions * groups
    by_cpu = group_partitions / (group_partitions_per_core * cores_per_replica * headroom)
    by_commits = group_partitions / commit_s / (commits_per_replica * headroom)
    return max(1, math.ceil(max(by_cpu, by_commits)))


def per_core(steps: list[dict[str, Any]], steady: int) -> dict[str, Any]:
    """One replica's figures per core of its process tree, each charged the whole CPU (as
    Burrow's and KMinion's offsets/s per core are): the commits at the highest rate held,
    the group-partition ticks (group-partitions x samples/s) at the shape's steady rate.
    None where no such step held."""
    top = max_held(steps)
    at_top = next((s for s in steps if s["commits_per_s"] == top and s["sustained"]), None)
    at_steady = next((s for s in steps if s["commits_per_s"] == steady and s["sustained"]), None)
    return {
        "per_core_commits_per_s": at_top["commits_per_core_s"] if at_top else None,
        "group_partition_ticks_per_core_s": (
            at_steady["group_partition_ticks_per_core_s"] if at_steady else None
        ),
    }


def estimate(
    one: list[dict[str, Any]],
    two: list[dict[str, Any]],
    steady: int,
    shape_group_partitions: int,
    commit_s: float,
    partitions: int = 10_000,
    groups: int = 100,
) -> dict[str, Any]:
    """The replicas for ``partitions`` x ``groups``, from measured steps only.

    The shape's steady step of one replica gives the group-partitions one core holds
    (the shape over the replica's CPU there); the commits one replica takes in are the
    highest rate it held alone. The two-replica phase says how two split the work
    (``scaling_by_cpu``) and how far two went together; on a host whose cores it shares
    with the broker and the generator, that is as far as the host went, which is why it
    does not cap what one replica is counted for (it did, as half of two together, while
    the two-replica phase began above one's best and never held a step). If one replica
    did not hold the shape but two did, each counts as half of them. None when neither
    held it."""
    at_one = next((s for s in one if s["commits_per_s"] == steady and s["sustained"]), None)
    at_two = next((s for s in two if s["commits_per_s"] == steady and s["sustained"]), None)
    one_max, two_max = max_held(one), max_held(two) if two else 0
    if at_one is not None:
        commits = float(one_max)
        gp_per_core = shape_group_partitions / at_one["cpu_cores"]
        basis = "one replica held the shape"
    elif at_two is not None:
        commits = two_max / 2
        gp_per_core = shape_group_partitions / at_two["cpu_cores"]
        basis = "two replicas held the shape (one did not): each counted as half of them"
    else:
        return {"replicas_for_10k_x_100": None, "replicas_basis": None}
    needed = pipeline_replicas_needed(gp_per_core, commits, partitions, groups, commit_s)
    host_bound = [s["commits_per_s"] for s in one + two if not s.get("generator_on_rate", True)]
    return {
        "replicas_for_10k_x_100": needed,
        "replicas_basis": basis,
        # steps the host could not generate: the commits a replica takes in were not found
        # (a lower bound), and by_commits with them
        "commit_steps_the_host_could_not_generate": host_bound,
        "replicas_inputs": {
            "group_partitions_per_core": round(gp_per_core),
            "commits_per_replica": commits,
            "cores_per_replica": CORES_PER_REPLICA,
            "headroom": HEADROOM,
            "by_cpu": round(partitions * groups / (gp_per_core * CORES_PER_REPLICA * HEADROOM), 2),
            "by_commits": round(partitions * groups / commit_s / (commits * HEADROOM), 2)
            if commits
            else None,
        },
    }


def false_alarms(steps: list[dict[str, Any]]) -> int:
    """Non-OK lag events of the (healthy) load's groups over every measured window."""
    return sum(s.get("false_alarms", 0) for s in steps)


def scaling_by_cpu(one: list[dict[str, Any]], two: list[dict[str, Any]], steady: int) -> Any:
    """How two replicas split the shape's work, at its steady rate: one replica's CPU over
    the busier of the two replicas' (each replica's whole process tree). Two replicas
    hold that many times the load of one when each has the cores one had (the busier
    one runs out first); what does not split (each replica's own fixed cost) counts
    against it; so does an uneven split (topics go to replicas as their names hash:
    ``topics_by_replica``). ``ratio_if_even``: one's CPU over the two's mean, what two
    would hold if they split the work evenly (only the fixed cost against it). None
    unless both held the steady rate."""
    at_one = next((s for s in one if s["commits_per_s"] == steady and s["sustained"]), None)
    at_two = next((s for s in two if s["commits_per_s"] == steady and s["sustained"]), None)
    if at_one is None or at_two is None or not at_two.get("cpu_cores_by_replica"):
        return None
    cores = at_two["cpu_cores_by_replica"]
    busier, mean = max(cores), sum(cores) / len(cores)
    return {
        "one_replica_cores": at_one["cpu_cores"],
        "two_replicas_cores": cores,
        "topics_by_replica": at_two.get("topics_by_replica"),
        "ratio": round(at_one["cpu_cores"] / busier, 2) if busier else None,
        "ratio_if_even": round(at_one["cpu_cores"] / mean, 2) if mean else None,
    }
