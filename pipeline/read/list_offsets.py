"""High watermarks with one ListOffsets request per leader broker per tick, answered per
partition.

confluent-kafka's ``AdminClient.list_offsets`` sends one request per broker too, but its
Python side builds a future (with a lock and a condition) per partition: at thousands of
partitions and 250 ms sampling, a large share of a core (``make bench-list-offsets``
measures it). kafka-python's ``KafkaConsumer.end_offsets`` is cheaper, but answers all or
nothing and retries a failing partition inside the call (a deleted topic would go on
being sampled). Here the same protocol is spoken with kafka-python's public parts, the
network client its consumer and admin client run on (``kafka.net.KafkaNetClient``) and
its ``ListOffsetsRequest``, and nothing is retried inside a tick:

- one request per leader broker, built when the watch set or a leader changes
  (``set_partitions``); its bytes are encoded once per API version
  (``ListOffsetsOnce``): each tick sends the same bytes under a new correlation id;
- every leader is asked at once; the tick waits ``wait_ms`` (a sample interval) for them
  all, and when none has answered by then, up to the request timeout: a loaded host makes
  the tick late, not empty;
- each partition is answered alone: its own error code makes it -1 this tick, counted
  under librdkafka's name for the code, as the AdminClient's way counts it; a broker that
  did not answer in time, or whose request failed, makes its partitions -1, counted by
  kind; a partition without a leader is -1 (``leader_not_available``);
- a request still unanswered is not sent again until it is answered or kafka-python's
  request timeout closes its connection (a slow broker is not asked twice as often);
- the response is read field by field into one list per topic: no object per partition
  beyond kafka-python's decode.

Pure parts (``group_by_leader``, ``read_response``, ``settle``) are unit-tested; the
broker tests run the rest.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import kafka.errors as kafka_errors
from kafka.future import Future
from kafka.protocol.consumer import ListOffsetsRequest

from pipeline.read.sampling import error_code_kind, error_kind
from runtime.client_log import route_kafka_python_logs
from runtime.kafka import KAFKA_PYTHON_NAMES, kafka_python_unsupported

#: ListOffsets' "latest" timestamp (the log end) and read_uncommitted (the high watermark,
#: not the last stable offset), as the AdminClient's way asks; read_committed (the last
#: stable offset) for the topics a read_committed consumer must read up to
LATEST = -1
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
#: no fencing by leader epoch: a stale epoch would turn an answer into an error
NO_LEADER_EPOCH = -1

#: the kinds of the partitions this way could not ask or did not hear from
LEADERLESS = "leader_not_available"
TIMED_OUT = "timed_out"
NOT_IN_RESPONSE = "not_in_response"

#: kafka-python reconnects after a failure with exponential backoff, by default up to 30 s:
#: a broker back from a restart would be left unasked for that long (librdkafka: 10 s)
RECONNECT_BACKOFF_MAX_MS = 1000

_Topic = ListOffsetsRequest.ListOffsetsTopic
_Partition = _Topic.ListOffsetsPartition


def kafka_python_config(broker_config: Mapping[str, Any]) -> dict[str, Any] | None:
    """kafka-python's arguments for a librdkafka config, or None when one of its TLS/SASL
    settings has no kafka-python equivalent (the sampler keeps to the AdminClient then)."""
    if kafka_python_unsupported(broker_config):
        return None
    out: dict[str, Any] = {"bootstrap_servers": str(broker_config["bootstrap.servers"])}
    for key, value in broker_config.items():
        if key in KAFKA_PYTHON_NAMES:
            out[KAFKA_PYTHON_NAMES[key]] = value
    if "client.id" in broker_config:
        out["client_id"] = str(broker_config["client.id"])
    return out


# --------------------------------------------------------------------------- pure core


def group_by_leader(
    watched: Mapping[str, Sequence[int]],
) -> dict[int, dict[str, list[int]]]:
    """leader broker id -> topic -> its partitions that broker leads, from the sampler's
    watch set (topic -> leader of each partition); leader -1 holds the leaderless ones."""
    by_leader: dict[int, dict[str, list[int]]] = {}
    for topic, leaders in watched.items():
        for partition, leader in enumerate(leaders):
            by_leader.setdefault(leader, {}).setdefault(topic, []).append(partition)
    return by_leader


@dataclass(slots=True)
class Answer:
    """One tick's answer: each watched topic's high watermarks by partition (-1: no
    answer), the partitions that failed by kind, and the first failure (for the log)."""

    hwms: dict[str, list[int]]
    failed: dict[str, int] = field(default_factory=dict)
    answered: int = 0  # partitions with a high watermark
    brokers_answered: int = 0
    first_error: BaseException | None = None

    @classmethod
    def empty(cls, shape: Mapping[str, int]) -> Answer:
        return cls({topic: [-1] * n for topic, n in shape.items()})

    def count(self, kind: str, n: int, exc: BaseException | None = None) -> None:
        if n > 0:
            self.failed[kind] = self.failed.get(kind, 0) + n
            if self.first_error is None and exc is not None:
                self.first_error = exc


def read_response(topics: Iterable[Any], answer: Answer) -> int:
    """Reads one ListOffsets response's topics into ``answer``: a partition without error
    gets its offset, one with an error stays -1 and is counted under its code's kind.
    Returns how many partitions the response held (answered or not)."""
    hwms, seen, answered = answer.hwms, 0, 0
    first_code = 0
    for topic in topics:
        row = hwms.get(topic.name)
        for partition in topic.partitions:
            seen += 1
            code = partition.error_code
            if code:
                kind = error_code_kind(code)
                answer.failed[kind] = answer.failed.get(kind, 0) + 1
                first_code = first_code or code
            elif row is not None and 0 <= partition.partition_index < len(row):
                row[partition.partition_index] = partition.offset
                answered += 1
    answer.answered += answered
    if first_code and answer.first_error is None:
        answer.first_error = kafka_errors.for_code(first_code)()
    return seen


def settle(
    answer: Answer, sent: Mapping[tuple[int, int], tuple[Future, int]]
) -> list[tuple[int, int]]:
    """Folds each request (keyed by its leader and isolation level: its future, how many
    partitions it asked) into ``answer`` after the wait; returns those still unanswered
    (their partitions are -1, ``timed_out``). ``brokers_answered`` counts requests."""
    late = []
    for key, (future, n) in sent.items():
        if not future.is_done:
            late.append(key)
            answer.count(TIMED_OUT, n, TimeoutError(f"broker {key[0]} did not answer in time"))
        elif future.exception is not None:
            answer.count(error_kind(future.exception), n, future.exception)
        else:
            answer.brokers_answered += 1
            seen = read_response(future.value.topics, answer)
            answer.count(NOT_IN_RESPONSE, n - seen)
    return late


# --------------------------------------------------------------------------- the edge


class ListOffsetsOnce(ListOffsetsRequest, init=False):  # type: ignore[call-arg]
    """A ``ListOffsetsRequest`` whose body is encoded once per API version: the sampler
    sends the same request every tick, only its header (the correlation id) changes, and
    encoding grows with the partitions asked. kafka-python's connection encodes a
    request with ``encode(framed=True, header=True)``; a release that encoded some other
    way would encode the same fields itself: slower, never wrong (a unit test compares
    the bytes with the library's own)."""

    __slots__ = ("_bodies",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._bodies: dict[int, bytes] = {}

    def encode(self, version: int | None = None, header: bool = False, framed: bool = False) -> Any:
        if version is not None:
            self.API_VERSION = version  # type: ignore[misc]  # a property of the base class
        v = self.API_VERSION
        if v is None:  # the library says what is missing
            return super().encode(version, header, framed)
        body = self._bodies.get(v)
        if body is None:
            body = self._bodies[v] = super().encode(v)
        if not (header or framed):
            return body
        data = self.encode_header(flexible=self.flexible_version_q(v)) + body if header else body
        return struct.pack(">i", len(data)) + data if framed else data


def build_request(
    topics: Mapping[str, Sequence[int]], isolation_level: int = READ_UNCOMMITTED
) -> ListOffsetsOnce:
    """One broker's request: the latest offset of each of its partitions (v1 at least: v0
    answers with a list of offsets; v2 at least for ``READ_COMMITTED``, which v0 and v1
    cannot say)."""
    return ListOffsetsOnce(
        replica_id=-1,
        isolation_level=isolation_level,
        topics=[
            _Topic(
                name=topic,
                partitions=[
                    _Partition(
                        partition_index=p, current_leader_epoch=NO_LEADER_EPOCH, timestamp=LATEST
                    )
                    for p in partitions
                ],
            )
            for topic, partitions in topics.items()
        ],
        min_version=1 if isolation_level == READ_UNCOMMITTED else 2,
    )


#: how long a tick waits for kafka-python's bootstrap to go on (the AdminClient's way
#: samples that tick if it is not done)
BOOTSTRAP_STEP_MS = 50


class BrokerListOffsets:
    """``latest()``: every watched partition's high watermark, one request per leader.

    Plain data until ``connect()``, which bootstraps kafka-python's client a step at a time
    (``setup()`` must do no I/O, and a tick must not wait a request timeout for it). Used
    from one thread, the sampler's run loop.
    """

    def __init__(self, config: Mapping[str, Any], request_timeout_ms: int, wait_ms: int) -> None:
        self.config = dict(config)
        self.request_timeout_ms = request_timeout_ms
        self.wait_ms = min(wait_ms, request_timeout_ms)
        self._client: Any = None
        self._manager: Any = None
        self._bootstrap: Future | None = None
        self._ready = False
        self._shape: dict[str, int] = {}  # topic -> partitions
        self._leaderless = 0
        # (leader, isolation level) -> (its request, how many partitions it asks)
        self._requests: dict[tuple[int, int], tuple[ListOffsetsOnce, int]] = {}
        self._unanswered: dict[tuple[int, int], Future] = {}  # requests still out

    def set_partitions(
        self,
        watched: Mapping[str, Sequence[int]],
        stable: Mapping[str, Sequence[int]] | None = None,
    ) -> None:
        """The watch set (topic -> leader of each partition) changed: one request per
        leader; ``stable`` (the same shape) are topics whose last stable offset is asked
        (read_committed: what a read_committed consumer can read up to), in a second
        request to their leaders."""
        self._requests, self._leaderless = {}, 0
        stable = stable or {}
        for isolation, topics_ in ((READ_UNCOMMITTED, watched), (READ_COMMITTED, stable)):
            by_leader = group_by_leader(topics_)
            self._leaderless += sum(len(ps) for ps in by_leader.pop(-1, {}).values())
            for leader, topics in by_leader.items():
                n = sum(len(ps) for ps in topics.values())
                self._requests[leader, isolation] = (build_request(topics, isolation), n)
        self._shape = {topic: len(leaders) for topic, leaders in {**watched, **stable}.items()}

    def connect(self) -> bool:
        """Starts or goes on with kafka-python's bootstrap for at most ``BOOTSTRAP_STEP_MS``;
        True once it is done. Raises what it failed with (the next call starts it again).

        kafka-python retries a refused login until its bootstrap times out: the failure
        says ``timed_out``, the cause is in its log lines (``lagpilot.kafka``, DEBUG)."""
        if self._ready:
            return True
        if self._client is None:
            from kafka.net import KafkaConnectionManager, KafkaNetClient, NetworkSelector

            route_kafka_python_logs()
            config = self._client_config()
            net = NetworkSelector(**config)
            self._manager = KafkaConnectionManager(net, **config)
            self._client = KafkaNetClient(net=net, manager=self._manager)
        if self._bootstrap is None:
            self._bootstrap = self._manager.bootstrap_async(timeout_ms=self.request_timeout_ms)
        self._client.poll(timeout_ms=BOOTSTRAP_STEP_MS, future=self._bootstrap)
        bootstrap = self._bootstrap
        if not bootstrap.is_done:
            return False
        self._bootstrap = None
        if bootstrap.exception is not None:
            raise bootstrap.exception
        self._ready = True
        return True

    def _client_config(self) -> dict[str, Any]:
        config = dict(self.config)
        bootstrap = str(config.pop("bootstrap_servers"))
        return {
            "client_id": "lagpilot-sampler",
            "request_timeout_ms": self.request_timeout_ms,
            "reconnect_backoff_max_ms": RECONNECT_BACKOFF_MAX_MS,
            **config,
            "bootstrap_servers": [b.strip() for b in bootstrap.split(",") if b.strip()],
        }

    def latest(self) -> Answer:
        """One tick: every leader's request sent at once, the answers read per partition."""
        assert self._ready, "connect() first"
        client = self._client
        answer = Answer.empty(self._shape)
        answer.count(LEADERLESS, self._leaderless)
        client.poll(timeout_ms=0)  # answers that came after the last tick's wait: stale
        sent: dict[tuple[int, int], tuple[Future, int]] = {}
        unanswered: dict[tuple[int, int], Future] = {}
        for key, (request, n) in self._requests.items():
            out = self._unanswered.get(key)
            if out is not None and not out.is_done:
                answer.count(TIMED_OUT, n)  # still waiting for an earlier tick's answer
                unanswered[key] = out
                continue
            try:
                sent[key] = (client.send(key[0], request), n)
            except kafka_errors.KafkaError as exc:  # a broker it does not know; a login refused
                answer.count(error_kind(exc), n, exc)
                if isinstance(exc, kafka_errors.UnknownBrokerIdError):
                    client.cluster.request_update()
        self._wait(sent)
        for key in settle(answer, sent):
            unanswered[key] = sent[key][0]
        self._unanswered = unanswered
        return answer

    def _wait(self, sent: Mapping[tuple[int, int], tuple[Future, int]]) -> None:
        """Until every request is answered or failed, at most ``wait_ms``; past that, while
        none has answered, until the request timeout."""
        futures = [future for future, _ in sent.values()]
        if not futures:
            return
        all_done: Future = Future()
        left = [len(futures)]

        def one_done(_: object) -> None:
            left[0] -= 1
            if left[0] == 0:
                all_done.success(None)

        for future in futures:
            future.add_both(one_done)
        client = self._client
        client.poll(timeout_ms=self.wait_ms, future=all_done)
        if not all_done.is_done and not any(f.succeeded() for f in futures):
            client.poll(timeout_ms=self.request_timeout_ms - self.wait_ms, future=all_done)

    def close(self) -> None:
        if self._client is not None:
            client, self._client, self._ready, self._bootstrap = self._client, None, False, None
            client.close()
