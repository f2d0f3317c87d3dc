"""Topic id -> name, looked up in a thread for the group-health model (an I/O edge).

KIP-848 records name a member's partitions by topic id; the group-health model needs
names to say who owns a lagging partition. Kafka 4.1 no longer writes the group's
partition metadata (type 4) that carried them, so this asks the cluster: the AdminClient's
``describe_topics`` for the topics the members subscribe to (every topic for a regex
subscription). It runs in its own thread so a slow answer never holds up the reading of
``__consumer_offsets``.
"""

from __future__ import annotations

import base64
import logging
import threading
from typing import Any

from runtime.cli import CLIENT_LOG

log = logging.getLogger(__name__)

ALL_TOPICS = "*"


class TopicIdResolver:
    """``want(names)`` from the reading loop; ``take()`` returns what was learnt since."""

    def __init__(self, broker_config: dict[str, Any], retry_s: float = 2.0) -> None:
        self.broker_config = dict(broker_config)
        self.retry_s = retry_s
        self._wanted: set[str] = set()
        self._learnt: dict[str, str] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def want(self, names: set[str]) -> None:
        if not names:
            return
        with self._lock:
            new = names - self._wanted
            self._wanted |= names
        if new:
            self._wake.set()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="topic-ids", daemon=True)
            self._thread.start()

    def take(self) -> dict[str, str]:
        with self._lock:
            out, self._learnt = self._learnt, {}
        return out

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def _run(self) -> None:
        from confluent_kafka import TopicCollection
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({**self.broker_config, "logger": CLIENT_LOG})
        while not self._stop.is_set():
            self._wake.wait(self.retry_s)
            self._wake.clear()
            with self._lock:
                names, self._wanted = set(self._wanted), set()
            if not names:
                continue
            try:
                if ALL_TOPICS in names:
                    names = set(admin.list_topics(timeout=10).topics) - {ALL_TOPICS}
                futures = admin.describe_topics(TopicCollection(sorted(names)))
                learnt = {}
                for future in futures.values():
                    try:
                        desc = future.result(timeout=10)
                    except Exception as exc:  # deleted meanwhile, or not authorised
                        log.debug("topic id lookup: %s", exc)
                        continue
                    learnt[topic_id_text(desc.topic_id)] = desc.name
                with self._lock:
                    self._learnt.update(learnt)
            except Exception as exc:  # the broker is busy or away: asked again next time
                log.warning("topic id lookup failed: %s", exc)


def topic_id_text(uuid: Any) -> str:
    """A confluent-kafka ``Uuid`` as Kafka writes topic ids (URL-safe base64, unpadded),
    the form :mod:`pipeline.coordinator.records` decodes. ``str(uuid)`` is not it:
    librdkafka prints the standard alphabet (``+``, ``/``)."""
    mask = (1 << 64) - 1
    raw = (uuid.get_most_significant_bits() & mask).to_bytes(8, "big") + (
        uuid.get_least_significant_bits() & mask
    ).to_bytes(8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
