"""The producer side of the incident scenarios (flood, mixed, calm): agents that keep every
record they mean to send, and the accounting of those records.

An ``Agent`` is one producer client (``RateProducer``, the SDK's wrapper that reports its
rates to lagpilot; client id ``agent-<run>-<i>``, under the shipped policy's allow-list). It
sends one or more ``Stream`` s, each on its ``Schedule``: a record falls due when the
schedule says so, and that moment is its intent, carried in the record's head as
``intended_ms``. Latency counts from there, whatever happens to the record after: it may wait
in the client's queue (librdkafka's own, at its default limits) while a quota throttles the
client, and when that queue is full the agent blocks, polling, and sends the same record
again. A real client does that; a harness that skipped the record would hide its latency.
The agent gives a record up (``dropped``) only at the run's last deadline.

Every record is accounted for: ``intended`` (made due by the schedule), ``handed`` (accepted
by the client), ``acked`` (acknowledged by the broker), ``failed`` (the client's delivery
error, e.g. its queue time ran out). ``tally`` turns the workers' effects into latency, lost
and duplicates for any subset of the intended records.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import orjson

from actuators.workers import IDEMPOTENCY_HEADER, RateProducer


@dataclass(frozen=True)
class Schedule:
    """Records per second over a run: ``phases`` are (from_s, rate_per_s), in order, each
    holding until the next; nothing falls due at or after ``end_s``."""

    phases: tuple[tuple[float, float], ...]
    end_s: float

    @classmethod
    def steady(cls, rate_per_s: float, end_s: float) -> Schedule:
        return cls(((0.0, rate_per_s),), end_s)

    @classmethod
    def surge(
        cls, rate_per_s: float, end_s: float, from_s: float, until_s: float, factor: float
    ) -> Schedule:
        """``rate_per_s``, times ``factor`` within [from_s, until_s)."""
        return cls(((0.0, rate_per_s), (from_s, rate_per_s * factor), (until_s, rate_per_s)), end_s)

    @classmethod
    def window(cls, rate_per_s: float, from_s: float, until_s: float) -> Schedule:
        """``rate_per_s`` within [from_s, until_s), nothing outside it."""
        return cls(((0.0, 0.0), (from_s, rate_per_s), (until_s, 0.0)), until_s)

    def rate_at(self, t_s: float) -> float:
        rate = 0.0
        for start, r in self.phases:
            if start <= t_s:
                rate = r
        return rate

    def next_due(self, due_s: float) -> float:
        """When the record after one due at ``due_s`` falls due (inf: none)."""
        rate = self.rate_at(due_s)
        # rounded to the ns: a sum of 1/rate steps must not drift across a phase's edge
        nxt = round(due_s + 1.0 / rate, 9) if rate > 0 else math.inf
        # a phase that starts before that (or a rate that was 0) starts its own records
        for start, r in self.phases:
            if due_s < start < nxt and r > 0:
                nxt = start
                break
        return nxt if nxt < self.end_s else math.inf

    def first_due(self, offset_s: float) -> float:
        """The first record: ``offset_s`` into the first phase that sends (agents started
        together do not all send at the same instant)."""
        for start, r in self.phases:
            if r > 0:
                due = start + offset_s / r
                return due if due < self.end_s else math.inf
        return math.inf


@dataclass(frozen=True)
class Records:
    """What records weigh: lognormal sizes and work (heavy-tailed), capped; ``heavy_share``
    of them are heavy documents (``heavy_work_ms`` +-20%, ``heavy_size_bytes``)."""

    size_median_bytes: int = 4096
    size_sigma: float = 0.5
    size_cap_bytes: int = 256 * 1024
    work_median_ms: float = 8.0
    work_sigma: float = 0.5
    work_cap_ms: float = 400.0
    heavy_share: float = 0.0
    heavy_work_ms: float = 150.0
    heavy_size_bytes: int = 48 * 1024

    def draw(self, rng: np.random.Generator) -> tuple[int, float, bool]:
        """(size bytes, work ms, heavy) of one record."""
        if self.heavy_share and rng.random() < self.heavy_share:
            return self.heavy_size_bytes, self.heavy_work_ms * float(rng.uniform(0.8, 1.2)), True
        size = min(
            rng.lognormal(math.log(self.size_median_bytes), self.size_sigma), self.size_cap_bytes
        )
        work = min(rng.lognormal(math.log(self.work_median_ms), self.work_sigma), self.work_cap_ms)
        return int(size), round(float(work), 2), False


#: healthy but heavy-tailed traffic (group C of ``mixed``, ``calm``): sizes from hundreds of
#: bytes to hundreds of KiB, work mostly milliseconds with a lognormal tail, and one record in
#: a hundred a heavy document (150 ms, 128 KiB) wherever its key lands
HEAVY_TAILED = Records(
    size_median_bytes=2048,
    size_sigma=1.2,
    size_cap_bytes=512 * 1024,
    work_median_ms=5.0,
    work_sigma=1.2,
    work_cap_ms=1000.0,
    heavy_share=0.01,
    heavy_work_ms=150.0,
    heavy_size_bytes=128 * 1024,
)


@dataclass(frozen=True)
class Stream:
    """One kind of record an agent sends. ``partition`` None: by key, the client's default
    partitioner (keys cycle through ``sessions`` per agent; a heavy document is keyed by its
    own id); else that partition (an agent whose key lands there)."""

    schedule: Schedule
    records: Records
    partition: int | None = None
    sessions: int = 16


class Agent:
    """One producer client sending its streams' records when they fall due (see the module)."""

    def __init__(
        self,
        bootstrap: str,
        client_id: str,
        topic: str,
        streams: Sequence[Stream],
        *,
        rates_topic: str,
        seed: int,
        producer: RateProducer | None = None,
    ) -> None:
        self.client_id, self.topic, self.streams = client_id, topic, list(streams)
        # the client's defaults (queue limits, linger, timeouts) as an agent ships them;
        # idempotent: a retried produce never writes a second copy
        self.producer = (
            producer
            if producer is not None
            else RateProducer(
                {
                    "bootstrap.servers": bootstrap,
                    "client.id": client_id,
                    "enable.idempotence": True,
                },
                rates_topic=rates_topic,
            )
        )
        self._rng = np.random.default_rng(seed)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.scheduled = threading.Event()  # every record due has been handed or given up
        self.intended: dict[str, int] = {}  # id -> intended ms
        self.handed = 0
        self.acked: set[str] = set()
        self.failed: dict[str, str] = {}
        self.acked_per_s: list[int] = []  # [second since the start] -> records acknowledged
        self.blocked_s = 0.0  # time spent waiting for room in a full client queue
        self.max_behind_s = 0.0  # the most a record was handed after its intent
        self._t0_ms = 0

    def run(self, t0: float, t0_ms: int, give_up: float) -> None:
        """Send until the schedules end, then wait until the client's queue is empty or
        ``give_up`` (monotonic) passes: what is left is purged, and so failed."""
        self._t0_ms = t0_ms
        p = self.producer
        dues = [s.schedule.first_due(float(self._rng.random())) for s in self.streams]
        n = 0
        try:
            while not self._stop.is_set():
                i = int(np.argmin(dues))
                if math.isinf(dues[i]):
                    break
                wait_s = t0 + dues[i] - time.monotonic()
                if wait_s > 0:  # delivery reports are served meanwhile
                    p.poll(min(wait_s, 0.1))
                    continue
                if not self._send(n, self.streams[i], t0_ms + int(dues[i] * 1000), give_up):
                    break  # given up: the rest of its schedule is dropped too
                self.max_behind_s = max(self.max_behind_s, time.monotonic() - t0 - dues[i])
                n += 1
                dues[i] = self.streams[i].schedule.next_due(dues[i])
            self.scheduled.set()
            while len(p) and time.monotonic() < give_up and not self._stop.is_set():
                p.poll(0.1)
        finally:
            self.scheduled.set()
            if len(p):
                p.producer.purge()
            p.close()

    def _send(self, n: int, stream: Stream, intended_ms: int, give_up: float) -> bool:
        mid = f"{self.client_id}-{n}"
        size, work_ms, heavy = stream.records.draw(self._rng)
        key = mid if heavy else f"{self.client_id}/s{n % stream.sessions}"
        head = {"id": mid, "intended_ms": intended_ms, "work_ms": work_ms, "heavy": heavy}
        value = orjson.dumps(head) + b"\n" + b"x" * size
        where = {} if stream.partition is None else {"partition": stream.partition}
        with self._lock:
            self.intended[mid] = intended_ms
        blocked_at = None
        while True:
            try:
                self.producer.produce(
                    self.topic,
                    value=value,
                    key=key.encode(),
                    headers=[(IDEMPOTENCY_HEADER, mid.encode())],
                    on_delivery=partial(self._delivered, mid),
                    **where,
                )
                break
            except BufferError:  # the queue is full: wait for room, then this record again
                blocked_at = blocked_at or time.monotonic()
                if time.monotonic() >= give_up or self._stop.is_set():
                    return False
                self.producer.poll(0.05)
        if blocked_at is not None:
            self.blocked_s += time.monotonic() - blocked_at
        self.handed += 1
        return True

    def _delivered(self, mid: str, err: Any, _msg: Any) -> None:
        second = max(0, int((time.time() * 1000 - self._t0_ms) // 1000))
        with self._lock:
            if err is not None:
                self.failed[mid] = err.str()
                return
            self.acked.add(mid)
            while len(self.acked_per_s) <= second:
                self.acked_per_s.append(0)
            self.acked_per_s[second] += 1

    def stop(self) -> None:
        self._stop.set()

    def snapshot(self) -> dict[str, int]:
        """id -> intended ms of every record made due so far."""
        with self._lock:
            return dict(self.intended)

    def counts(self) -> dict[str, Any]:
        with self._lock:
            intended, acked, failed = len(self.intended), len(self.acked), len(self.failed)
            errors = sorted(set(self.failed.values()))
        return {
            "intended": intended,
            "handed": self.handed,
            "dropped": intended - self.handed,
            "acked": acked,
            "failed": failed,
            "delivery_errors": errors,
            "blocked_s": round(self.blocked_s, 2),
            "max_behind_s": round(self.max_behind_s, 2),
        }

    def rate_per_s(self, seconds: range) -> float:
        """Mean records acknowledged per second over ``seconds`` (since the start)."""
        with self._lock:
            vals = [self.acked_per_s[t] if t < len(self.acked_per_s) else 0 for t in seconds]
        return round(float(np.mean(vals)), 1) if vals else 0.0


def agent(
    bootstrap: str, run: str, i: int, topic: str, streams: Sequence[Stream], *, rates_topic: str
) -> Agent:
    """Agent ``i`` of a run: client id ``agent-<run>-<i>`` (the shipped allow-list's
    ``agent-*``), its random draws seeded by ``i``."""
    return Agent(bootstrap, f"agent-{run}-{i}", topic, streams, rates_topic=rates_topic, seed=i)


def steady_agents(
    bootstrap: str,
    run: str,
    first: int,
    count: int,
    topic: str,
    rate_per_s: float,
    records: Records,
    end_s: float,
    *,
    rates_topic: str,
) -> list[Agent]:
    """``count`` agents from ``first``, each sending ``rate_per_s`` of ``records`` until
    ``end_s``, keyed by session."""
    stream = Stream(Schedule.steady(rate_per_s, end_s), records)
    return [
        agent(bootstrap, run, first + i, topic, [stream], rates_topic=rates_topic)
        for i in range(count)
    ]


class Agents:
    """Agents run together, each on its own thread, from one start."""

    def __init__(self, agents: Iterable[Agent]) -> None:
        self.agents = list(agents)
        self.start_ms = 0
        self._threads: list[threading.Thread] = []

    def start(self, give_up_after_s: float) -> int:
        """Start every agent now; returns the start (epoch ms). After ``give_up_after_s``
        the agents give up what they still hold."""
        t0 = time.monotonic()
        self.start_ms = int(time.time() * 1000)
        give_up = t0 + give_up_after_s
        self._threads = [
            threading.Thread(
                target=a.run,
                args=(t0, self.start_ms, give_up),
                daemon=True,
                name=f"agent-{a.client_id}",
            )
            for a in self.agents
        ]
        for t in self._threads:
            t.start()
        return self.start_ms

    def wait_scheduled(self) -> None:
        for a in self.agents:
            a.scheduled.wait()

    def wait_processed(self, done_ids: Callable[[], set[str]], timeout_s: float) -> bool:
        """Until every intended record is among ``done_ids()`` (True), or ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.intended().keys() <= done_ids():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.5)

    def intended(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for a in self.agents:
            out.update(a.snapshot())
        return out

    def stop(self, timeout_s: float = 30.0) -> None:
        for a in self.agents:
            a.stop()
        for t in self._threads:
            t.join(timeout_s)

    def dropped(self) -> int:
        return sum(a.counts()["dropped"] for a in self.agents)


def tally(intended: dict[str, int], rows: Iterable[tuple[Any, ...]], end_ms: int) -> dict[str, Any]:
    """Latency from intent, lost and duplicates of the ``intended`` records (id -> intended
    ms) from effect rows ``(id, ..., done_ms)``. A record never processed counts as lost, and
    in the latency as waiting until ``end_ms`` (a lower bound)."""
    done: dict[str, int] = {}
    applications = 0
    for row in rows:
        mid, done_ms = row[0], int(row[-1])
        if mid in intended:
            applications += 1
            done[mid] = min(done_ms, done.get(mid, done_ms))
    missing = [m for m in intended if m not in done]
    lat = np.array(
        [done[m] - intended[m] for m in done] + [end_ms - intended[m] for m in missing],
        dtype=np.float64,
    )

    def pct(q: float) -> float | None:
        return round(float(np.percentile(lat, q)), 1) if len(lat) else None

    return {
        "intended": len(intended),
        "processed": len(done),
        "lost": len(missing),
        "duplicates": applications - len(done),
        "p50_ms": pct(50),
        "p99_ms": pct(99),
        "max_ms": round(float(lat.max()), 1) if len(lat) else None,
    }
