"""An agent swarm on the real broker: producers, an avalanche of heavy payloads, workers.

- ``producers`` agents (default 50) publish perception events to ``agents.perception``
  (16 partitions; one client, ``client_id``); payload sizes and work times are heavy-tailed
  (lognormal). The names fit the shipped policy's allow-lists (``agents.*``, ``agent-*``).
- The avalanche: from ``avalanche_at_s`` for ``avalanche_s``, dense heavy payloads (500-page
  PDFs, TIFFs: ``heavy_work_ms`` of OCR each, slept here) land on the hot partitions
  (default 4 and 11), each with its own document key.
- Workers are built on the worker SDK (``actuators.workers.Worker``, group ``agent-workers``,
  ``lanes`` lanes per partition unless lagpilot spreads it), sleep in proportion to each
  payload's weight, and record the side effect exactly once (``ctx.once_sql``) with its
  end-to-end latency (done - produced, from the produce timestamp the message carries).
  With ``pool``, a ``PoolWorker`` of that pool serves the partitions lagpilot hands off.
  ``consumer="naive"``: plain confluent-kafka consumers instead (bench/support/naive.py),
  one thread per SDK worker thread.

``Swarm`` is used by ``bench/incidents/war_story.py`` and ``bench/demo.py``; alone it runs once:

    .venv/bin/python bench/support/swarm.py --help
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from actuators.workers import IDEMPOTENCY_HEADER, PoolWorker, Worker
from bench.support import broker
from bench.support.naive import NaiveGroup

ROOT = Path(__file__).resolve().parents[2]

FLUSH_S = 120.0  # how long the producers wait for their last messages' acknowledgements


@dataclass
class SwarmConfig:
    bootstrap: str = "127.0.0.1:21092"
    workers_bootstrap: str | None = None  # the workers' own way to the broker (None: bootstrap)
    topic: str = "agents.perception"  # the shipped policy's partition_topics: agents.*
    group: str = "agent-workers"
    partitions: int = 16
    hot_partitions: tuple[int, ...] = (4, 11)
    producers: int = 50
    rate_per_s: float = 250.0  # normal events per second, all agents together
    size_median_bytes: int = 1024
    size_sigma: float = 1.0  # lognormal: heavy-tailed sizes
    work_median_ms: float = 6.0
    work_sigma: float = 0.8
    work_cap_ms: float = 80.0
    heavy_rate_per_s: float = 10.0  # per hot partition, during the avalanche
    heavy_work_ms: float = 150.0
    heavy_size_bytes: int = 48 * 1024
    warmup_s: float = 15.0
    avalanche_s: float = 30.0
    lanes: int = 1  # lanes per partition from the start (lagpilot spreads a hot one further)
    max_workers: int = 48  # the SDK's handler threads; the naive arm runs as many consumers
    control_topic: str = "lagpilot.control"
    outcomes_topic: str | None = None  # where the workers report what they did (None: nowhere)
    consumer: str = "sdk"  # "sdk": the worker SDK; "naive": plain consumers (support/naive.py)
    pool: str | None = None  # the pool a PoolWorker runs for hand-offs (the policy's pool)
    group_protocol: str = "classic"  # the SDK workers' group protocol ("consumer": KIP-848)
    client_id: str = "agent-swarm-0"  # the producers' client id (the policy's agent-*)
    seed: int = 7

    def shape(self) -> dict[str, Any]:
        """The avalanche's shape as the results files record it."""
        return {
            "partitions": self.partitions,
            "hot": list(self.hot_partitions),
            "producers": self.producers,
            "rate_per_s": self.rate_per_s,
            "heavy_rate_per_s": self.heavy_rate_per_s,
            "heavy_work_ms": self.heavy_work_ms,
            "avalanche_s": self.avalanche_s,
            "group_protocol": self.group_protocol,
        }

    @property
    def avalanche_at_s(self) -> float:
        return self.warmup_s


@dataclass
class Produced:
    """What the producers sent. ``ids``: every message handed to the producer (id ->
    partition); ``acked``: those the broker acknowledged (only these can be lost: a
    message whose produce failed was never accepted, and its producer was told);
    ``failed``: id -> the delivery error of those it never accepted."""

    ids: dict[str, int] = field(default_factory=dict)  # id -> partition
    acked: set[str] = field(default_factory=set)
    failed: dict[str, str] = field(default_factory=dict)
    avalanche_start_ms: int = 0
    avalanche_end_ms: int = 0
    done: bool = False


def ensure_topic(bootstrap: str, topic: str, partitions: int, replication: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=10).topics:
        return
    admin.create_topics([NewTopic(topic, partitions, replication)])[topic].result(timeout=30)


def _head(payload: bytes) -> tuple[str, float, int, bool]:
    """id, work ms, produced ms and heaviness from a swarm payload's JSON head line."""
    head = orjson.loads(payload.split(b"\n", 1)[0])
    return head["id"], float(head["work_ms"]), int(head["produced_ms"]), bool(head["heavy"])


class Ledger:
    """The workers' side effects: one row per application, so duplicates would show."""

    def __init__(self, path: Path) -> None:
        self.path = path
        db = sqlite3.connect(path)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(
            "CREATE TABLE IF NOT EXISTS effects (id TEXT, partition INTEGER, heavy INTEGER, "
            "produced_ms INTEGER, done_ms INTEGER)"
        )
        db.commit()
        db.close()

    def rows(self) -> list[tuple[str, int, int, int, int]]:
        db = sqlite3.connect(self.path)
        try:
            return db.execute(
                "SELECT id, partition, heavy, produced_ms, done_ms FROM effects"
            ).fetchall()
        finally:
            db.close()


class Swarm:
    """Producers and workers of one run; ``start`` then ``stop`` (or ``run_producers``)."""

    def __init__(self, cfg: SwarmConfig, workdir: Path) -> None:
        self.cfg = cfg
        self.workdir = workdir
        self.produced = Produced()
        self.ledger = Ledger(workdir / "effects.sqlite")
        self._stop = threading.Event()
        # set: producers go on past the shape's end at its rate (a fault bench holds them
        # until its fault has cleared, so recovery is measured on live traffic)
        self.hold_production = threading.Event()
        self._rng = np.random.default_rng(cfg.seed)
        self.worker: Worker | NaiveGroup
        self.pool: PoolWorker | None = None
        self._threads: list[threading.Thread] = []
        if cfg.consumer == "naive":
            self.worker = NaiveGroup(
                bootstrap=cfg.bootstrap, group=cfg.group, topic=cfg.topic,
                ledger_path=self.ledger.path, work_ms=_head, members=cfg.max_workers,
            )  # fmt: skip
            return
        self.worker = Worker(
            bootstrap=cfg.workers_bootstrap or cfg.bootstrap,
            group=cfg.group,
            topics=[cfg.topic],
            handler=self._handle,
            lanes=cfg.lanes,
            max_workers=cfg.max_workers,
            max_buffered_per_partition=256,
            dedupe=self.ledger.path,
            control_topic=cfg.control_topic,
            outcomes_topic=cfg.outcomes_topic,
            instance_id=f"swarm-{uuid.uuid4().hex[:6]}",
            commit_interval_s=0.2,  # progress is what lagpilot sees: commit it often
            group_protocol=cfg.group_protocol,
        )
        if cfg.pool:
            self.pool = PoolWorker(
                pool=cfg.pool,
                bootstrap=cfg.workers_bootstrap or cfg.bootstrap,
                group=cfg.group,
                handler=self._handle,
                max_workers=8,
                dedupe=self.ledger.path,  # the owner's idempotency keys: nothing done twice
                control_topic=cfg.control_topic,
                outcomes_topic=cfg.outcomes_topic,
                commit_interval_s=0.2,
                group_protocol=cfg.group_protocol,
            )

    # -- workers -------------------------------------------------------------------------

    def _handle(self, msg: Any, ctx: Any) -> None:
        head = orjson.loads(msg.value().split(b"\n", 1)[0])
        time.sleep(head["work_ms"] / 1000)  # OCR / embedding / a model call

        def record(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT INTO effects VALUES (?, ?, ?, ?, ?)",
                (
                    head["id"],
                    msg.partition(),
                    int(head["heavy"]),
                    head["produced_ms"],
                    int(time.time() * 1000),
                ),
            )

        ctx.once_sql(record)

    # -- producers -----------------------------------------------------------------------

    def _payload(self, head: dict[str, Any], size: int) -> bytes:
        return orjson.dumps(head) + b"\n" + b"x" * max(0, size)

    def run_producers(self, on_tick: Callable[[float], None] | None = None) -> None:
        cfg, rng = self.cfg, self._rng
        # Idempotent, and each message's id as its idempotency key: a produce retried across
        # a broker crash (its ack lost) is written once, and if a copy ever lands twice the
        # workers' dedupe sees one key (``bench.faults`` row 1 once saw an effect twice).
        p = Producer({"bootstrap.servers": cfg.bootstrap, "client.id": cfg.client_id,
                      "linger.ms": 5, "message.max.bytes": 2_000_000,
                      "enable.idempotence": True})  # fmt: skip
        t0 = time.monotonic()
        sent = heavy_sent = 0
        end_s = cfg.warmup_s + cfg.avalanche_s + 5.0
        # every partition has at least one agent (a partition nobody writes would never be
        # committed, so no model has a position for it), the rest placed at random
        agent_partition = [
            a if a < cfg.partitions else int(rng.integers(cfg.partitions))
            for a in range(cfg.producers)
        ]
        while not self._stop.is_set():
            now_s = time.monotonic() - t0
            if now_s >= end_s and not self.hold_production.is_set():
                break
            due = int(now_s * cfg.rate_per_s)
            while sent < due:
                agent = int(rng.integers(cfg.producers))
                size = int(
                    min(rng.lognormal(np.log(cfg.size_median_bytes), cfg.size_sigma), 256_000)
                )
                work = float(
                    min(rng.lognormal(np.log(cfg.work_median_ms), cfg.work_sigma), cfg.work_cap_ms)
                )
                mid = f"a{agent}-{sent}"
                head = {"id": mid, "agent": agent, "heavy": False, "work_ms": round(work, 2),
                        "produced_ms": int(time.time() * 1000)}  # fmt: skip
                part = agent_partition[agent]
                p.produce(cfg.topic, self._payload(head, size), key=f"agent-{agent}",
                          partition=part, headers=[(IDEMPOTENCY_HEADER, mid.encode())],
                          on_delivery=partial(self._delivered, mid))  # fmt: skip
                self.produced.ids[mid] = part
                sent += 1
            in_avalanche = cfg.warmup_s <= now_s < cfg.warmup_s + cfg.avalanche_s
            if in_avalanche and not self.produced.avalanche_start_ms:
                self.produced.avalanche_start_ms = int(time.time() * 1000)
            if (
                not in_avalanche
                and self.produced.avalanche_start_ms
                and not self.produced.avalanche_end_ms
            ):
                self.produced.avalanche_end_ms = int(time.time() * 1000)
            if in_avalanche:
                hot_due = int((now_s - cfg.warmup_s) * cfg.heavy_rate_per_s)
                while heavy_sent < hot_due:
                    for part in cfg.hot_partitions:
                        mid = f"doc-{part}-{heavy_sent}"
                        work = cfg.heavy_work_ms * float(rng.uniform(0.8, 1.2))
                        head = {"id": mid, "agent": -1, "heavy": True, "work_ms": round(work, 2),
                                "produced_ms": int(time.time() * 1000)}  # fmt: skip
                        p.produce(cfg.topic, self._payload(head, cfg.heavy_size_bytes), key=mid,
                                  partition=part,
                                  headers=[(IDEMPOTENCY_HEADER, mid.encode())],
                                  on_delivery=partial(self._delivered, mid))  # fmt: skip
                        self.produced.ids[mid] = part
                    heavy_sent += 1
            p.poll(0)
            if on_tick is not None:
                on_tick(now_s)
            time.sleep(0.01)
        settle_deadline = time.monotonic() + FLUSH_S
        while len(p) and time.monotonic() < settle_deadline:
            p.flush(1.0)  # a node still restarting: its partitions' messages wait for it
        if len(p):  # never acknowledged: purged, so each is counted failed, not lost
            p.purge()
            p.flush(5.0)
        self.produced.done = True

    def _delivered(self, mid: str, err: Any, _msg: Any) -> None:
        """A delivery report (a report carries no headers: the id is bound per message)."""
        if err is None:
            self.produced.acked.add(mid)
        else:
            self.produced.failed[mid] = err.str()

    # -- lifecycle -----------------------------------------------------------------------

    def start_workers(self) -> None:
        t = threading.Thread(target=self.worker.run, name="swarm-worker", daemon=True)
        t.start()
        self._threads.append(t)
        if self.pool is not None:
            self.pool.start()

    def wait_assigned(self, timeout_s: float = 60.0) -> bool:
        """Until the workers own every partition: the run's clock starts there, so no arm's
        latency counts its group's first join (the broker holds a new group's first
        rebalance for group.initial.rebalance.delay.ms, 3 s by default: the warm-up's first
        messages waited for it and made the whole p99 of a run)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if len(self.worker.assignment()) >= self.cfg.partitions:
                return True
            time.sleep(0.1)
        return False

    def wait_drained(self, timeout_s: float, on_tick: Callable[[], None] | None = None) -> bool:
        """Until every produced message has its side effect (or the timeout)."""
        deadline = time.monotonic() + timeout_s
        want = set(self.produced.acked)
        while time.monotonic() < deadline:
            done = {r[0] for r in self.ledger.rows()}
            if want <= done:
                return True
            if on_tick is not None:
                on_tick()
            time.sleep(0.5)
        return False

    def stop(self) -> None:
        self._stop.set()
        self.worker.stop()
        if self.pool is not None:
            self.pool.stop()
        for t in self._threads:
            t.join(timeout=30)

    def results(self) -> dict[str, Any]:
        rows = self.ledger.rows()
        ids = [r[0] for r in rows]
        latency = np.array([r[4] - r[3] for r in rows], dtype=np.float64)
        produced = set(self.produced.acked)  # accepted by the broker: what can be lost
        stats = self.worker.stats()
        return {
            "worker": {k: v for k, v in stats.items() if isinstance(v, int | float | str)},
            "pool": self.pool.stats() if self.pool is not None else None,
            "consumer": self.cfg.consumer,
            # the naive arm is the library's documented consumer: always classic
            "group_protocol": self.cfg.group_protocol if self.cfg.consumer == "sdk" else "classic",
            # the naive arm's settings as it ran (what it leaves to the library's defaults)
            "naive": self.worker.shape() if isinstance(self.worker, NaiveGroup) else None,
            "rebalances": self.worker.rebalances,
            "produced": len(produced),
            "unacknowledged": len(set(self.produced.ids) - produced),
            # records the producer gave up on (purged after FLUSH_S unacknowledged, or
            # refused): the harness never wrote them, so they can be neither lost nor late
            "dropped": len(set(self.produced.ids) - produced),
            "produce_errors": dict(Counter(self.produced.failed.values())),
            "processed": len(set(ids)),
            "lost": len(produced - set(ids)),
            "duplicates": len(ids) - len(set(ids)),
            "p50_ms": round(float(np.percentile(latency, 50)), 1) if len(latency) else None,
            "p99_ms": round(float(np.percentile(latency, 99)), 1) if len(latency) else None,
            "max_ms": round(float(latency.max()), 1) if len(latency) else None,
        }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--topic", default="agents.perception")
    ap.add_argument("--avalanche-s", type=float, default=20.0)
    args = ap.parse_args(argv)
    args.bootstrap = broker.bootstrap(args.bootstrap)
    import tempfile

    cfg = SwarmConfig(bootstrap=args.bootstrap, topic=args.topic, avalanche_s=args.avalanche_s)
    ensure_topic(cfg.bootstrap, cfg.topic, cfg.partitions)
    with tempfile.TemporaryDirectory() as tmp:
        swarm = Swarm(cfg, Path(tmp))
        swarm.start_workers()
        swarm.run_producers()
        swarm.wait_drained(120)
        swarm.stop()
        print(orjson.dumps(swarm.results(), option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
