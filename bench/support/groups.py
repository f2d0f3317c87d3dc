"""The consumer side of the incident scenarios (flood, mixed, calm): groups of SDK workers
that apply each record's side effect once, and record when.

A ``WorkerGroup`` is one consumer group of ``Worker`` instances (the SDK, as agent workers
embed it; static membership ids ``<group>-<i>``, as a StatefulSet's pods keep them across
restarts), reading the run's control topic and reporting on its outcomes topic, plus, when
the loop acts, the dedicated pool the shipped policy hands partitions off to (a team that
ships ``hotspot.pool`` runs that pool). Members can be restarted one by one (a rollout),
and extra members can join and leave.

Each record's handler sleeps its ``work_ms`` (a model call, an OCR pass) and writes one row
to the group's ``Effects`` table in the same transaction as the SDK's once-only mark: a
record applied twice would show as two rows.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import ConsumerGroupState, KafkaException
from confluent_kafka.admin import AdminClient

from actuators.workers import PoolWorker, Worker


class Effects:
    """One row per application of a record: (id, topic, partition, heavy, intended_ms,
    done_ms), in the group's dedupe store file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        db = sqlite3.connect(path)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(
                "CREATE TABLE IF NOT EXISTS effects (id TEXT, topic TEXT, partition "
                "INTEGER, heavy INTEGER, intended_ms INTEGER, done_ms INTEGER)"
            )
            db.commit()
        finally:
            db.close()

    def rows(self) -> list[tuple[str, str, int, int, int, int]]:
        db = sqlite3.connect(self.path)
        try:
            return db.execute(
                "SELECT id, topic, partition, heavy, intended_ms, done_ms FROM effects"
            ).fetchall()
        finally:
            db.close()

    def done_ids(self) -> set[str]:
        db = sqlite3.connect(self.path)
        try:
            return {r[0] for r in db.execute("SELECT id FROM effects")}
        finally:
            db.close()


def handle(msg: Any, ctx: Any) -> None:
    """The agents' record: work for its ``work_ms``, then its effect, once."""
    head = orjson.loads(msg.value().split(b"\n", 1)[0])
    time.sleep(head["work_ms"] / 1000)
    row = (head["id"], msg.topic(), msg.partition(), int(head["heavy"]), head["intended_ms"])
    ctx.once_sql(
        lambda db: db.execute(
            "INSERT INTO effects VALUES (?, ?, ?, ?, ?, ?)", (*row, int(time.time() * 1000))
        )
    )


class WorkerGroup:
    """SDK workers of one consumer group (see the module). ``pool``: the dedicated pool's
    name (None: no pool)."""

    def __init__(
        self,
        bootstrap: str,
        group: str,
        topics: list[str],
        workdir: Path,
        *,
        control: str,
        outcomes: str,
        members: int = 1,
        max_workers: int = 8,
        pool: str | None = None,
    ) -> None:
        self.bootstrap, self.group, self.topics = bootstrap, group, topics
        self.control, self.outcomes, self.max_workers = control, outcomes, max_workers
        self.effects = Effects(workdir / f"effects-{group}.sqlite")
        self.members: dict[str, Worker] = {
            f"{group}-{i}": self._worker(f"{group}-{i}") for i in range(members)
        }
        self.retired: list[Worker] = []  # stopped members (their counters still count)
        self.pool = (
            PoolWorker(
                pool=pool,
                bootstrap=bootstrap,
                group=group,
                handler=handle,
                max_workers=max_workers,
                dedupe=self.effects.path,
                control_topic=control,
                outcomes_topic=outcomes,
            )
            if pool
            else None
        )
        self._extra = 0
        self._lock = threading.Lock()

    def _worker(self, instance_id: str) -> Worker:
        return Worker(
            bootstrap=self.bootstrap,
            group=self.group,
            topics=self.topics,
            handler=handle,
            max_workers=self.max_workers,
            dedupe=self.effects.path,
            control_topic=self.control,
            outcomes_topic=self.outcomes,
            instance_id=instance_id,
        )

    def start(self) -> None:
        if self.pool is not None:
            self.pool.start()
        for w in self.members.values():
            w.start()

    def wait_stable(self, partitions: int, timeout_s: float = 90.0) -> bool:
        """Until the coordinator says the group is stable with every member in it, each
        member holding a share of the ``partitions`` and the members together all of them.
        A run's clock starts there: a new group's first join waits out the broker's
        group.initial.rebalance.delay.ms, and members that join after the first one move
        partitions in more rounds; traffic during those is not the scenario's."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                members = list(self.members.values())
            owned = [w.assignment() for w in members]
            try:
                desc = admin.describe_consumer_groups([self.group])[self.group].result(10)
            except KafkaException:
                desc = None
            if (
                desc is not None
                and desc.state == ConsumerGroupState.STABLE
                and len(desc.members) == len(members)
                and sum(len(o) for o in owned) == len(set().union(*owned)) == partitions
                and all(owned[: min(len(owned), partitions)])
            ):
                return True
            time.sleep(0.2)
        return False

    def restart(self, instance_id: str, down_s: float) -> None:
        """Stop one member (gracefully: running work ends, its positions are committed), wait
        ``down_s`` (a pod's restart), start it again under the same static id."""
        with self._lock:
            old = self.members[instance_id]
        old.stop()
        self.retired.append(old)
        time.sleep(down_s)
        new = self._worker(instance_id)
        new.start()
        with self._lock:
            self.members[instance_id] = new

    def join(self) -> str:
        """One more member with dynamic membership (a pod of a scaled-out deployment: it
        leaves the group when it stops); returns its key."""
        self._extra += 1
        key = f"{self.group}-extra-{self._extra}"
        w = Worker(
            bootstrap=self.bootstrap,
            group=self.group,
            topics=self.topics,
            handler=handle,
            max_workers=self.max_workers,
            dedupe=self.effects.path,
            control_topic=self.control,
            outcomes_topic=self.outcomes,
            instance_id="",
        )
        w.start()
        with self._lock:
            self.members[key] = w
        return key

    def leave(self, key: str) -> None:
        with self._lock:
            w = self.members.pop(key)
        w.stop()
        self.retired.append(w)

    def stop(self) -> None:
        with self._lock:
            members = list(self.members.values())
        engines: list[Any] = [*members, *([self.pool] if self.pool is not None else [])]
        # at once: each waits for its running work and its consumer's close
        threads = [threading.Thread(target=w.stop, daemon=True) for w in engines]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)

    def stats(self) -> dict[str, int]:
        """The members' and the pool's counters, summed (restarted members' included)."""
        out: dict[str, int] = {}
        engines: list[Any] = [*self.members.values(), *self.retired]
        if self.pool is not None:
            engines.append(self.pool)
        for w in engines:
            for k, v in w.stats().items():
                out[k] = out.get(k, 0) + int(v)
        out["rebalances"] = sum(w.rebalances for w in [*self.members.values(), *self.retired])
        return out
