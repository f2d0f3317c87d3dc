"""The remedy ladder: per cause, the steps to try in order, each with a deadline (pure).

A step is written ``"<step>:<deadline_s>"`` or ``"<step>:<deadline_s>:recommend"`` (the
step's actions are published as recommendations whatever the policy's mode). Steps:

===================== ==================================================================
``spread_partition``  spread a hot partition over key-ordered lanes (each hot partition
                      climbs its own ladder: ``pipeline.decide.remedies``)
``handoff_partition`` hand a hot partition to the dedicated pool (``hotspot.pool``)
``handoff_member``    hand off the partitions of the member that keeps leaving (storm)
``scale_consumers``   ask the autoscaler for consumers, up to the partition count
``add_partitions``    add partitions to an allow-listed topic
``throttle_producer`` throttle the producers whose increase caused the burst (attributed)
``transfer_leadership`` move a lagging partition off the crowded leader
``alert``             nothing is changed; the incident is reported only
===================== ==================================================================

Each step expects its target's time lag to fall to ``verify.improve_ratio`` times what it
was when the action was applied (or below the exit level) by its deadline: then it is
``verified``; else ``no_effect``, and the action is undone (restore, release) or the next
step is taken. Per group in the policy TOML::

    [ladders.default]            # every group
    hotspot = ["spread_partition:30", "handoff_partition:60"]
    [ladders."etl-*"]            # groups matching the glob (most specific wins per cause)
    slow_group = ["scale_consumers:120"]
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass

from pipeline.decide.diagnosis import (
    BURST,
    CAUSES,
    DRAINING,
    HOTSPOT,
    REBALANCING,
    SKEW,
    SLOW,
    STALLED,
    STORM,
    WATCHING,
)

STEPS: dict[str, str] = {
    "spread_partition": "the hot partition's time lag falls",
    "handoff_partition": "the hot partition's time lag falls",
    "handoff_member": "the group's time lag falls and its rebalances stop",
    "scale_consumers": "the group's time lag falls",
    "add_partitions": "the group's time lag falls",
    "throttle_producer": "the group's time lag falls",
    "transfer_leadership": "the moved partition's time lag falls",
    "alert": "nothing (reported only)",
}


@dataclass(frozen=True, slots=True)
class Step:
    action: str  # a key of STEPS
    deadline_s: float
    recommend: bool = False

    @property
    def expects(self) -> str:
        return STEPS[self.action]

    def spec(self) -> str:
        return f"{self.action}:{self.deadline_s:g}" + (":recommend" if self.recommend else "")


DEFAULT_LADDER: dict[str, tuple[Step, ...]] = {
    HOTSPOT: (Step("spread_partition", 30.0), Step("handoff_partition", 60.0)),
    SLOW: (Step("scale_consumers", 60.0), Step("add_partitions", 300.0, recommend=True)),
    BURST: (Step("throttle_producer", 30.0),),
    STORM: (Step("handoff_member", 60.0),),
    SKEW: (Step("transfer_leadership", 120.0),),
    STALLED: (Step("alert", 0.0),),
    REBALANCING: (),
    WATCHING: (),
    DRAINING: (),
}


def parse_step(spec: object) -> Step:
    """``"spread_partition:30"`` -> Step; ValueError says what is wrong and what to write."""
    if not isinstance(spec, str):
        raise ValueError(f'step {spec!r} must be a string such as "spread_partition:30"')
    parts = spec.split(":")
    if parts[0] not in STEPS:
        raise ValueError(f"unknown step {parts[0]!r}; use one of {', '.join(STEPS)}")
    if parts[0] == "alert" and len(parts) == 1:
        return Step("alert", 0.0)
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != "recommend"):
        raise ValueError(f"step {spec!r}: write \"{parts[0]}:<deadline_s>\" or "
                         f"\"{parts[0]}:<deadline_s>:recommend\"")  # fmt: skip
    try:
        deadline = float(parts[1])
    except ValueError:
        raise ValueError(
            f"step {spec!r}: deadline {parts[1]!r} is not a number of seconds"
        ) from None
    if not deadline > 0:
        raise ValueError(f"step {spec!r}: the deadline must be > 0 seconds")
    return Step(parts[0], deadline, len(parts) == 3)


@dataclass(frozen=True, slots=True)
class Ladders:
    """The default ladder per cause, with per-group-glob replacements (whole ladders)."""

    by_glob: tuple[tuple[str, Mapping[str, tuple[Step, ...]]], ...] = ()

    def for_group(self, group: str, cause: str) -> tuple[Step, ...]:
        best: tuple[Step, ...] = DEFAULT_LADDER.get(cause, ())
        best_len = -1
        for glob, ladders in self.by_glob:
            if cause in ladders and fnmatch.fnmatchcase(group, glob):
                specificity = 0 if glob == "*" else len(glob.replace("*", ""))
                if specificity >= best_len:
                    best, best_len = ladders[cause], specificity
        return best


def parse_ladders(table: object) -> Ladders:
    """``[ladders.<glob>] <cause> = [steps]`` (``default`` is ``*``); ValueError names the key."""
    if not isinstance(table, dict):
        raise ValueError("ladders: must be a table; write [ladders.default]")
    out = []
    for glob, causes in table.items():
        where = f"ladders.{glob}"
        if not isinstance(causes, dict):
            raise ValueError(f"{where}: must be a table of cause = [steps]")
        parsed: dict[str, tuple[Step, ...]] = {}
        for cause, steps in causes.items():
            if cause not in CAUSES:
                raise ValueError(f"{where}.{cause}: unknown cause; use one of {', '.join(CAUSES)}")
            if not isinstance(steps, list):
                raise ValueError(f"{where}.{cause}: must be a list of steps, e.g. "
                                 "[\"spread_partition:30\"]")  # fmt: skip
            try:
                parsed[cause] = tuple(parse_step(s) for s in steps)
            except ValueError as exc:
                raise ValueError(f"{where}.{cause}: {exc}") from None
        out.append(("*" if glob == "default" else glob, parsed))
    return Ladders(tuple(out))
