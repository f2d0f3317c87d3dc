"""Kafka clients' own words, through lagpilot's logging (``pipeline`` and ``actuators`` share it).

librdkafka's lines and Quix Streams' client callbacks are detail: they go to
``lagpilot.kafka`` at DEBUG (``--log-level debug`` shows them). When they say the broker
cannot be reached, :class:`BrokerWatch` has lagpilot say so first, in its own words.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("lagpilot")


class _ClientLog:
    """librdkafka's log callback target: every line to ``lagpilot.kafka`` at DEBUG.

    librdkafka marks a refused connection as an error, but for a user it is detail under
    lagpilot's own sentence ("cannot reach the broker at ..."), so its level is not kept.
    """

    logger = logging.getLogger("lagpilot.kafka")

    def log(self, level: int, msg: str, *args: Any) -> None:
        self.logger.debug(msg, *args)


CLIENT_LOG = _ClientLog()
#: the format confluent-kafka logs librdkafka's lines with: facility, client name, text
_LIBRDKAFKA_FORMAT = "%s [%s] %s"


#: the loggers Quix Streams hands librdkafka and its error callbacks (its topic admin too)
_QUIX_CLIENT_LOGGERS = (
    "quixstreams.kafka.consumer",
    "quixstreams.kafka.producer",
    "quixstreams.models.topics.admin",
)
#: how Quix's error callbacks begin their lines
_QUIX_CLIENT_ERRORS = ("Kafka producer error:", "Kafka consumer error:")
#: words of a client line that mean "the broker cannot be reached" (librdkafka's texts)
_UNREACHABLE_WORDS = ("Connection refused", "Connect to", "Disconnected", "brokers are down",
                      "transport failure", "Timed out", "Name or service not known",
                      "No route to host")  # fmt: skip


def unreachable_sentence(bootstrap: str, detail: str) -> str:
    """What a service says when the broker goes (it keeps retrying; /readyz turns false).

    ``detail`` is the client's line, kept to its last clause: "FAIL [rdkafka#consumer-3]
    [thrd:...]: host:port/1: Connect to ... failed: Connection refused (after 0ms ...)"
    reads "host:port/1: Connect to ... failed: Connection refused"."""
    clause = detail.rsplit("]: ", 1)[-1].split(' code="')[0]
    for prefix in _QUIX_CLIENT_ERRORS:
        clause = clause.removeprefix(prefix).strip()
    return f"cannot reach the broker at {bootstrap} ({short(clause)}); retrying, /readyz is false"


class BrokerWatch(logging.Filter):
    """On the loggers Quix Streams hands its clients: librdkafka's own lines, and Quix's
    reports of an unreachable broker, go to ``lagpilot.kafka`` at DEBUG like every other
    client's. When they say the broker cannot be reached, lagpilot says so first in its
    own words (``unreachable_sentence``), at most once every ``repeat_s``; with no
    ``bootstrap`` (Quix's source process, whose logging is not lagpilot's) it only demotes.
    Quix's other lines pass unchanged."""

    def __init__(self, bootstrap: str | None = None, repeat_s: float = 60.0) -> None:
        super().__init__()
        self.bootstrap = bootstrap
        self.repeat_s = repeat_s
        self._said_at = -float("inf")
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        unreachable = any(w in text for w in _UNREACHABLE_WORDS)
        if record.msg != _LIBRDKAFKA_FORMAT:
            quix_says = str(record.msg).startswith(_QUIX_CLIENT_ERRORS)
            if not (unreachable and (quix_says or "brokers are down" in text)):
                return True
        if unreachable and self.bootstrap:
            self.announce(text)
        CLIENT_LOG.logger.debug("%s", text)
        return False

    def announce(self, detail: str) -> None:
        import time

        now = time.monotonic()
        with self._lock:
            if now - self._said_at < self.repeat_s:
                return
            self._said_at = now
        log.warning("%s", unreachable_sentence(self.bootstrap or "?", detail))


_WATCH = BrokerWatch()  # one for every client logger: one sentence per outage, not three


def watch_client_logs(bootstrap: str | None = None) -> None:
    """Put the :class:`BrokerWatch` on Quix Streams' client loggers (idempotent; with a
    ``bootstrap``, lagpilot's sentence names it)."""
    if bootstrap:
        _WATCH.bootstrap = bootstrap
    for name in _QUIX_CLIENT_LOGGERS:
        quix = logging.getLogger(name)
        if _WATCH not in quix.filters:
            quix.addFilter(_WATCH)


class _KafkaPythonLines(logging.Handler):
    """kafka-python's records, re-told on ``lagpilot.kafka`` at DEBUG (see below)."""

    def emit(self, record: logging.LogRecord) -> None:
        CLIENT_LOG.logger.debug("kafka-python %s: %s", record.name, record.getMessage())


_KAFKA_PYTHON = _KafkaPythonLines()


def route_kafka_python_logs() -> None:
    """kafka-python's lines (the sampler's per-broker ListOffsets client) are detail too: a
    refused connection or a request that timed out is WARNING/ERROR on its ``kafka.*``
    loggers, but lagpilot counts and says such failures itself. They go to
    ``lagpilot.kafka`` at DEBUG, and only from INFO up: kafka-python's own DEBUG lines
    print every request whole (every partition of a tick), too dear to format (idempotent)."""
    kafka_log = logging.getLogger("kafka")
    if _KAFKA_PYTHON not in kafka_log.handlers:
        kafka_log.addHandler(_KAFKA_PYTHON)
    kafka_log.setLevel(logging.INFO)
    kafka_log.propagate = False


class ClientErrors:
    """An ``error_cb`` that keeps what librdkafka reported: the exception a call raises says
    only "transport failure", the callback says it was SASL or TLS."""

    def __init__(self) -> None:
        self.errors: list[Any] = []

    def __call__(self, err: Any) -> None:
        self.errors.append(err)
        CLIENT_LOG.logger.debug("client error: %s", err)


def client_config(
    bootstrap: str, kafka: Mapping[str, str], errors: ClientErrors | None = None
) -> dict[str, Any]:
    """librdkafka settings with lagpilot's log routing (and error collector)."""
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, **kafka, "logger": CLIENT_LOG}
    if errors is not None:
        conf["error_cb"] = errors
    return conf


def short(text: str) -> str:
    """librdkafka's detail without its "thrd:" and "(after N ms in state X)" noise."""
    text = text.split(" (after ")[0]
    return text if len(text) <= 160 else text[:157] + "..."
