"""The actuator under test, for the tests and the benchmarks; not shipped in the wheel.

Signed control events built like the policy builds them (with ``KEY``, a signing key for
tests only), and ``Harness``, which runs actuators in threads against fresh topics on a
real broker and reads their committed outcomes.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from actuators.backends import Backend, DryRunBackend
from actuators.runner import Runner
from actuators.settings import AllowList, Policy, Settings
from schemas import Mode, Signer, Verifier, encode, sign


def action(
    kind: str,
    target: str,
    params: dict[str, Any],
    *,
    key: Signer,
    now_ms: int,
    mode: str = "act",
    ttl_ms: int = 60_000,
    action_id: str | None = None,
) -> dict[str, Any]:
    """A signed, schema-valid action event (``action.v1.json``)."""
    return sign(
        {
            "event": "action",
            "v": 1,
            "id": action_id or uuid.uuid4().hex,
            "type": kind,
            "target": target,
            "params": params,
            "reason": {"test": True},
            "mode": mode,
            "issued_at": now_ms,
            "expires_at": now_ms + ttl_ms,
            "policy_version": "test",
            "signature": "",
        },
        key,
    )


def throttle(
    name: str,
    bytes_per_s: int,
    *,
    key: Signer,
    now_ms: int,
    lease_s: float = 60.0,
    entity: str = "client-id",
    **kw: Any,
) -> dict[str, Any]:
    params = {"entity": entity, "name": name, "producer_byte_rate": bytes_per_s, "lease_s": lease_s}
    return action("throttle_producer", f"{entity}:{name}", params, key=key, now_ms=now_ms, **kw)


def release(
    name: str, *, key: Signer, now_ms: int, entity: str = "client-id", **kw: Any
) -> dict[str, Any]:
    params = {"entity": entity, "name": name}
    return action("release_producer", f"{entity}:{name}", params, key=key, now_ms=now_ms, **kw)


def halt(*, key: Signer, now_ms: int, scope: str = "all", **kw: Any) -> dict[str, Any]:
    return action("halt", f"scope:{scope}", {"scope": scope}, key=key, now_ms=now_ms, **kw)


def resume(*, key: Signer, now_ms: int, scope: str = "all", **kw: Any) -> dict[str, Any]:
    return action("resume", f"scope:{scope}", {"scope": scope}, key=key, now_ms=now_ms, **kw)


KEY = b"actuator-test-signing-key-0123456789"
ACT_POLICY = Policy(
    mode=Mode.ACT,
    allow=AllowList(partition_topics=("t-*",), throttle_client_ids=("ok-*", "lp-*")),
)


@dataclass
class Harness:
    bootstrap: str
    name: str
    runners: list[tuple[Runner, threading.Event, threading.Thread]] = field(default_factory=list)

    @property
    def control(self) -> str:
        return f"{self.name}.control"

    @property
    def outcomes(self) -> str:
        return f"{self.name}.outcomes"

    def settings(self, actuator_id: str = "a1", **kw: Any) -> Settings:
        return Settings(
            bootstrap=self.bootstrap,
            backend="dry-run",
            actuator_id=f"{self.name}-{actuator_id}",
            group_id=f"{self.name}-actuator",
            control_topic=self.control,
            outcomes_topic=self.outcomes,
            metrics_port=0,
            **kw,
        ).validated()

    def start(
        self,
        backend: Backend | None = None,
        policy: Policy = ACT_POLICY,
        actuator_id: str = "a1",
        verifier: Verifier = KEY,
        **kw: Any,
    ) -> Runner:
        runner = Runner(
            self.settings(actuator_id, **kw),
            signing_key=verifier,
            policy=policy,
            backend=backend or DryRunBackend(),
        ).start()
        stop = threading.Event()
        thread = threading.Thread(target=runner.run, args=(stop,), daemon=True)
        thread.start()
        self.runners.append((runner, stop, thread))
        return runner

    def stop(self, runner: Runner) -> None:
        for r, stop, thread in self.runners:
            if r is runner:
                stop.set()
                thread.join(10)
                r.close()
        self.runners = [t for t in self.runners if t[0] is not runner]

    def send(self, *events: dict[str, Any] | bytes, key: bytes | None = None) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0})
        for e in events:
            value = e if isinstance(e, bytes) else encode(e)
            k = key if key is not None or isinstance(e, bytes) else str(e.get("target")).encode()
            producer.produce(self.control, key=k, value=value)
        producer.flush(10)

    def read_outcomes(
        self, until: int, timeout_s: float = 20.0, group: str | None = None
    ) -> list[dict[str, Any]]:
        """Committed outcomes from the beginning, until ``until`` are read or time is up.
        Intents (written before each backend call, superseded by the outcome) are left out.

        The partitions are assigned, not subscribed: a group join takes a second or more on a
        loaded broker, and a short read would end before its first fetch."""
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": group or f"{self.name}-reader",
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        got: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout_s
        try:
            partitions = self._outcome_partitions(consumer, deadline)
            consumer.assign(
                [TopicPartition(self.outcomes, p, OFFSET_BEGINNING) for p in partitions]
            )
            while partitions and len(got) < until and time.monotonic() < deadline:
                for msg in consumer.consume(500, timeout=0.1):
                    if msg.error() is None and msg.value() is not None:
                        event = orjson.loads(msg.value())
                        if event.get("event") != "intent":
                            got.append(event)
        finally:
            consumer.close()
        return got

    def _outcome_partitions(self, consumer: Consumer, deadline: float) -> list[int]:
        while True:
            topic = consumer.list_topics(self.outcomes, timeout=5).topics.get(self.outcomes)
            if topic is not None and topic.error is None and topic.partitions:
                return sorted(topic.partitions)
            if time.monotonic() >= deadline:
                return []
            time.sleep(0.1)


def by_id(outcomes: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for o in outcomes:
        out.setdefault(o["action_id"], []).append(o)
    return out
