"""Producer rates on ``lagpilot.producers``: who writes a topic, and how fast.

Agent producers that embed the worker SDK's producer wrapper publish one ``producer_rates``
event a second per (client id, topic) they wrote in that second, or while they still hold
records or are throttled (JSON Schema ``producer_rates.v2.json``, key ``client_id|topic``;
v1 lacks ``throttle_ms`` and ``queued`` and is still read). The decide stage attributes an
inflow burst to the client ids whose rate rose, throttles exactly those, and releases a
throttle once its producer no longer pushes against it; producers that do not embed the
wrapper fall back to the policy file's client-id map.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ProducerRate:
    """``client_id`` wrote ``records_per_s`` records (``bytes_per_s`` bytes, values and keys)
    to ``topic`` over the ``window_s`` seconds that ended at ``at_ms`` (epoch ms), from
    ``host`` (the producer process's host name) as ``instance`` (its process id there).
    ``throttle_ms``: how long the brokers delayed the client for its quota in the window;
    ``queued``: records waiting in the client's own queue at ``at_ms``. Either above zero
    means the producer pushes against a throttle (wants to write more than it may)."""

    client_id: str
    topic: str
    records_per_s: float
    bytes_per_s: float
    window_s: float
    at_ms: int
    host: str = ""
    instance: str = ""
    throttle_ms: float = 0.0
    queued: int = 0
    event: str = field(default="producer_rates", init=False)
    v: int = field(default=2, init=False)

    @property
    def key(self) -> str:
        return f"{self.client_id}|{self.topic}"
