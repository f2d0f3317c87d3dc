"""The ``slow_group`` baseline's autoscaler: consumer lag polled as KEDA's Kafka scaler does
by default, driving the same ``lagpilot workers`` supervisor lagpilot drives.

Every ``interval_s`` it reads the group's total lag on the topic (committed offsets against
the high watermarks, as the scaler does) and publishes, signed, on the supervisor's control
topic, a ``scale_consumers`` for ``keda_replicas(total lag)``: the count an HPA computes
from the scaler's metric, which the supervisor obeys as it obeys lagpilot's (up at once,
down after its lease). KEDA's defaults, from its documentation:

- ``lagThreshold``: 10, "Average target value to trigger scaling actions"
  (keda.sh/docs/2.4/scalers/apache-kafka); with an AverageValue target the HPA asks for
  ceil(total lag / 10) replicas;
- replicas never exceed the topic's partition count unless ``allowIdleConsumers`` is set
  (same page, "By default, the number of replicas will not exceed the number of
  partitions on a topic");
- ``pollingInterval``: 30 s, "Optional. Default: 30 seconds"
  (keda.sh/docs/latest/reference/scaledobject-spec).

A caveat the results carry: KEDA's operator honours ``pollingInterval``, but for 1 -> N its
metrics server answers each HPA request (every 15 s by default) by asking the scaler
(kedacore/keda#2282, unless ``useCachedMetrics``), so a default KEDA + HPA can react
within ~15 s; the 30 s poll is the interval the issue names.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from schemas import encode, sign
from schemas.codec import load_signing_key

LAG_THRESHOLD = 10  # KEDA's Kafka scaler default lagThreshold
POLL_INTERVAL_S = 30.0  # KEDA's ScaledObject default pollingInterval


def keda_replicas(total_lag: int, partitions: int, lag_threshold: int = LAG_THRESHOLD) -> int:
    """What the HPA asks for on the scaler's metric: ceil(total lag / lag threshold), capped at
    the partition count (no idle consumers), at least one (the group's minimum here)."""
    return max(1, min(partitions, math.ceil(max(total_lag, 0) / lag_threshold)))


def scale_action(group: str, replicas: int, partitions: int, total_lag: int,
                 now_ms: int, ttl_s: float = 30.0) -> dict[str, Any]:  # fmt: skip
    """A signed ``scale_consumers`` for ``group`` (``action.v1.json``), as any publisher holding
    the signing key may send one; its reason names the poll that made it."""
    event = {
        "event": "action", "v": 1, "id": uuid.uuid4().hex, "type": "scale_consumers",
        "target": f"group:{group}",
        "params": {"group": group, "replicas": replicas, "partitions": partitions},
        "reason": {"rule": "keda_poll", "total_lag": total_lag, "lag_threshold": LAG_THRESHOLD},
        "mode": "act", "issued_at": now_ms, "expires_at": now_ms + int(ttl_s * 1000),
        "policy_version": "keda-poll", "signature": "",
    }  # fmt: skip
    return sign(event, load_signing_key())


class LagPoll:
    """Polls ``group``'s total lag on ``topic`` every ``interval_s`` from ``first_poll`` (a
    ``time.monotonic()`` instant) and publishes each poll's hint on ``control``;
    ``polls`` keeps (epoch ms, total lag, replicas asked)."""

    def __init__(self, bootstrap: str, group: str, topic: str, partitions: int, control: str,
                 *, interval_s: float, first_poll: float) -> None:  # fmt: skip
        self.group, self.topic, self.partitions, self.control = group, topic, partitions, control
        self.interval_s, self.first_poll = interval_s, first_poll
        self.polls: list[tuple[int, int, int]] = []
        # the group's committed offsets, read as the scaler reads them (no join, no commit)
        self._offsets = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "enable.auto.commit": False})  # fmt: skip
        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="keda-poll", daemon=True)

    def start(self) -> LagPoll:
        self._thread.start()
        return self

    def total_lag(self) -> int:
        """The sum over partitions of high watermark - committed offset (a partition with no
        commit counts 0: the scaler's offsetResetPolicy ``latest``)."""
        tps = [TopicPartition(self.topic, p) for p in range(self.partitions)]
        lag = 0
        for tp in self._offsets.committed(tps, timeout=10):
            _, high = self._offsets.get_watermark_offsets(tp, timeout=10)
            lag += max(0, high - tp.offset) if tp.offset >= 0 else 0
        return lag

    def _run(self) -> None:
        next_poll = self.first_poll
        while not self._stop.wait(max(0.0, next_poll - time.monotonic())):
            next_poll += self.interval_s
            lag = self.total_lag()
            replicas = keda_replicas(lag, self.partitions)
            now_ms = int(time.time() * 1000)
            action = scale_action(self.group, replicas, self.partitions, lag, now_ms)
            self._producer.produce(self.control, encode(action), action["id"].encode())
            self._producer.flush(10)
            self.polls.append((now_ms, lag, replicas))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)
        self._offsets.close()
