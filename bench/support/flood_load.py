"""The ``flood`` incident's load: its shape and its agents (one floods, the others send their
usual rate), shared by the ``flood`` scenario (``bench.incidents.flood``) and the ``mixed``
scenario's group B (``bench.incidents.mixed``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.support.agents import Agent, Records, Schedule, Stream, agent, steady_agents


@dataclass(frozen=True)
class FloodShape:
    partitions: int = 6
    producers: int = 4
    rate_per_s: float = 25.0  # each agent's usual records/s
    flood_factor: float = 10.0  # agent 0 sends this many times its rate during the flood
    warmup_s: float = 20.0
    flood_s: float = 30.0
    cooldown_s: float = 15.0
    records: Records = field(default_factory=Records)  # ~4 KiB, ~9 ms of work each
    max_workers: int = 2  # worker threads: above the usual inflow, below the flood
    # after the schedules end, for every record to be processed: a flooder held at its usual
    # rate drains its queue at that rate (the flood's excess over it, at most ~270 s here)
    drain_timeout_s: float = 360.0

    @classmethod
    def smoke(cls) -> FloodShape:
        """Seconds-long, for the test suite: the mechanics, not the figures."""
        return cls(warmup_s=8, flood_s=6, cooldown_s=3, flood_factor=5, drain_timeout_s=40)

    @property
    def end_s(self) -> float:
        return self.warmup_s + self.flood_s + self.cooldown_s


def flood_agents(
    bootstrap: str,
    topic: str,
    rates_topic: str,
    run: str,
    shape: FloodShape,
    *,
    first: int = 0,
    flood_from_s: float | None = None,
    end_s: float | None = None,
) -> list[Agent]:
    """The shape's agents (client ids ``agent-<run>-<first + i>``); the first one floods from
    ``flood_from_s`` (default: the warm-up's end) for ``flood_s``."""
    start = shape.warmup_s if flood_from_s is None else flood_from_s
    end = shape.end_s if end_s is None else end_s
    surge = Schedule.surge(shape.rate_per_s, end, start, start + shape.flood_s, shape.flood_factor)
    flooder = agent(
        bootstrap, run, first, topic, [Stream(surge, shape.records)], rates_topic=rates_topic
    )
    return [
        flooder,
        *steady_agents(
            bootstrap,
            run,
            first + 1,
            shape.producers - 1,
            topic,
            shape.rate_per_s,
            shape.records,
            end,
            rates_topic=rates_topic,
        ),
    ]
