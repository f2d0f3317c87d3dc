"""A producer agent producers embed, so lagpilot knows who writes a topic and how fast.

``RateProducer`` wraps a confluent-kafka ``Producer``: every ``produce`` is forwarded and
counted per topic (records, and bytes of value plus key), and once a second a background
thread publishes one ``producer_rates`` event per topic written in that second to
``lagpilot.producers`` (key ``client_id|topic``). The decide stage attributes an inflow burst
to the client ids whose rate rose and throttles exactly those; a producer that does not embed
this wrapper is throttled only through the policy file's client-id map.

Each event also says whether the producer pushes against a throttle: ``throttle_ms``, the
time the brokers delayed it for its quota in that second (librdkafka's throttle events,
delivered by ``poll``), and ``queued``, the records waiting in its own queue. The policy
releases a throttle only once its producer stops pushing against it.

``RateCounter`` is the pure part (counts in, events out, ``now`` passed in), tested without a
broker. A topic that stops being written gets one more event at rate 0, so a reader sees the
drop instead of a last non-zero rate that never changes; while the client still holds
records or is throttled, its topics keep getting events (at rate 0 if nothing was accepted).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Producer

from schemas import ConfigError, ProducerRate, encode, to_dict
from schemas.topics import PRODUCERS

log = logging.getLogger(__name__)


@dataclass
class _Window:
    records: int = 0
    bytes: int = 0


def payload_size(value: Any, key: Any) -> int:
    """Bytes of ``value`` plus ``key`` as the broker will count them (str as UTF-8)."""
    size = 0
    for part in (value, key):
        if part is None:
            continue
        size += len(part.encode()) if isinstance(part, str) else len(part)
    return size


class RateCounter:
    """Records and bytes per topic since the last ``flush``; thread-safe (produce may be called
    from several threads while the reporter flushes)."""

    def __init__(
        self, client_id: str, *, host: str = "", instance: str = "", start_ms: int | None = None
    ) -> None:
        self.client_id = client_id
        self.host = host
        self.instance = instance
        self._lock = threading.Lock()
        self._windows: dict[str, _Window] = {}
        self._since_ms = start_ms  # None: the first add starts the first window
        self._throttle_ms = 0.0

    def throttled(self, ms: float) -> None:
        """The brokers delayed this client ``ms`` for its quota (one throttle event)."""
        with self._lock:
            self._throttle_ms += max(0.0, ms)

    def add(self, topic: str, nbytes: int, now_ms: int, records: int = 1) -> None:
        with self._lock:
            if self._since_ms is None:
                self._since_ms = now_ms
            window = self._windows.setdefault(topic, _Window())
            window.records += records
            window.bytes += nbytes

    def flush(self, now_ms: int, queued: int = 0) -> list[ProducerRate]:
        """One event per topic counted since the last flush (a topic counted last time and not
        this time gets one event at 0, then none, unless the client is under pressure:
        ``queued`` records wait in its queue or it was throttled), and a new window from
        ``now_ms``. A flush with no time elapsed returns nothing and keeps the counts."""
        with self._lock:
            since = self._since_ms
            if since is None or now_ms <= since:
                return []
            windows = self._windows
            throttle_ms, self._throttle_ms = self._throttle_ms, 0.0
            pressure = queued > 0 or throttle_ms > 0
            self._windows = {t: _Window() for t, w in windows.items() if w.records or pressure}
            self._since_ms = now_ms
        window_s = (now_ms - since) / 1000.0
        return [
            ProducerRate(
                client_id=self.client_id,
                topic=topic,
                records_per_s=w.records / window_s,
                bytes_per_s=w.bytes / window_s,
                window_s=window_s,
                at_ms=now_ms,
                host=self.host,
                instance=self.instance,
                throttle_ms=round(throttle_ms, 1),
                queued=max(0, int(queued)),
            )
            for topic, w in sorted(windows.items())
        ]


class RateProducer:
    """A confluent-kafka ``Producer`` that reports its per-topic rates to lagpilot.

    ``config`` is the usual librdkafka producer config and must set ``client.id``: that is the
    name quotas (and so lagpilot's throttle) apply to. Use it as the producer:
    ``produce``, ``poll``, ``flush`` are forwarded; anything else reaches the wrapped producer
    through ``.producer``. ``close()`` stops the reporter after one last report.

    Reports go out through a second small producer with client id
    ``lagpilot-rates.<client id>``: a throttled (quota-delayed, queue-full) producer must
    still say how fast it writes, and a quota on the agent's client id or prefix does not
    match that name. Pass ``producer=`` (and ``reporter=``) to inject either.
    """

    def __init__(
        self,
        config: dict[str, Any],
        *,
        rates_topic: str = PRODUCERS,
        interval_s: float = 1.0,
        producer: Producer | None = None,
        reporter: Producer | None = None,
    ) -> None:
        client_id = str(config.get("client.id") or "")
        if not client_id:
            raise ConfigError(
                "producer config has no 'client.id': set it (e.g. {'client.id': 'agent-7'}); "
                "lagpilot attributes and throttles producers by client id"
            )
        if interval_s <= 0:
            raise ConfigError(f"interval_s={interval_s!r}: must be > 0 (1.0 is the contract)")
        self.client_id = client_id
        self.rates_topic = rates_topic
        self.counter = RateCounter(
            client_id, host=socket.gethostname(), instance=str(os.getpid()), start_ms=_now_ms()
        )
        own_cb = config.get("throttle_cb")

        def on_throttle(event: Any) -> None:  # from poll(): the broker held a response
            self.counter.throttled(float(getattr(event, "throttle_time", 0.0)) * 1000)
            if callable(own_cb):
                own_cb(event)

        self.producer = (
            producer if producer is not None else Producer({**config, "throttle_cb": on_throttle})
        )
        if reporter is None and producer is not None:
            reporter = producer
        elif reporter is None:
            own = {"client.id": f"lagpilot-rates.{client_id}", "message.timeout.ms": 10_000}
            reporter = Producer({**{k: v for k, v in config.items() if k != "throttle_cb"}, **own})
        self.reporter = reporter
        self.reports_sent = 0
        self.report_errors = 0
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._report_loop, name=f"lagpilot-rates-{client_id}", daemon=True
        )
        self._thread.start()

    def produce(self, topic: str, value: Any = None, key: Any = None, **kwargs: Any) -> None:
        self.producer.produce(topic, value=value, key=key, **kwargs)
        # counted once accepted by the client (a BufferError above is not a write)
        self.counter.add(topic, payload_size(value, key), _now_ms())

    def poll(self, timeout: float = 0) -> int:
        return int(self.producer.poll(timeout))

    def flush(self, timeout: float = -1) -> int:
        return int(self.producer.flush(timeout))

    def __len__(self) -> int:
        return len(self.producer)

    def report(self, now_ms: int | None = None) -> list[ProducerRate]:
        """Publish the rates since the last report (the thread calls this every interval)."""
        queued = len(self.producer) if self.reporter is not self.producer else 0
        rates = self.counter.flush(_now_ms() if now_ms is None else now_ms, queued=queued)
        for rate in rates:
            if rate.topic == self.rates_topic:
                continue  # our own reports are not the agent's traffic
            try:
                self.reporter.produce(
                    self.rates_topic, value=encode(to_dict(rate)), key=rate.key.encode()
                )
                self.reports_sent += 1
            except Exception as exc:  # BufferError (queue full), KafkaException: never the caller's
                self.report_errors += 1
                log.warning("producer_rates for %s not sent: %s", rate.key, exc)
        self.reporter.poll(0)
        return rates

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop reporting (after one last report) and flush."""
        self._stop.set()
        self._thread.join(timeout_s)
        self.producer.flush(timeout_s)
        if self.reporter is not self.producer:
            self.reporter.flush(timeout_s)

    def __enter__(self) -> RateProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _report_loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.report()
        self.report()


def _now_ms() -> int:
    return int(time.time() * 1000)
