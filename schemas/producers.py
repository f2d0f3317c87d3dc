"""Producer rates on ``lagpilot.producers``: who writes a topic, and how fast.

Agent producers that embed the worker SDK's producer wrapper publish one ``producer_rates``
event a second per (client id, topic) they wrote in that second (JSON Schema
``producer_rates.v1.json``, key ``client_id|topic``). The decide stage attributes an inflow
burst to the client ids whose rate rose, and throttles exactly those; producers that do not
embed the wrapper fall back to the policy file's client-id map.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ProducerRate:
    """``client_id`` wrote ``records_per_s`` records (``bytes_per_s`` bytes, values and keys)
    to ``topic`` over the ``window_s`` seconds that ended at ``at_ms`` (epoch ms), from
    ``host`` (the producer process's host name) as ``instance`` (its process id there)."""

    client_id: str
    topic: str
    records_per_s: float
    bytes_per_s: float
    window_s: float
    at_ms: int
    host: str = ""
    instance: str = ""
    event: str = field(default="producer_rates", init=False)
    v: int = field(default=1, init=False)

    @property
    def key(self) -> str:
        return f"{self.client_id}|{self.topic}"
