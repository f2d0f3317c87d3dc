"""The actuator's run loop: lagpilot.control -> check -> apply -> lagpilot.outcomes.

Exactly-once, thought through:

- All actuators share one consumer group, so each control partition has one owner at a time.
- Outcomes and the control offsets are committed in ONE Kafka transaction
  (``send_offsets_to_transaction``). Since KIP-447 the broker fences an actuator whose group
  generation is stale: an actuator that lost its partitions in a rebalance cannot commit
  offsets or outcomes for them; its transaction aborts and the new owner reprocesses.
- Before applying, the ledger (every applied id, rebuilt from the compacted outcomes topic at
  start and kept current by tailing it, read_committed) is checked: an id applied by anyone
  is a ``duplicate``.
- What remains is the window between applying and committing. Every backend operation sets a
  state (quota = rate, partitions = total, leader = broker), so a second application would
  change nothing; it is not even made: before its backend calls the runner writes an
  ``intent`` per action (one flush per batch), and an actuator that finds an intent with no
  outcome reads the cluster and records the outcome without calling again when the effect
  is already there (``actuators/reconcile.py``). The outcome is committed exactly once.
- ``actuator_id`` is the transactional id: a restarted actuator with the same id fences its
  dead predecessor and aborts its open transaction at once (instead of read_committed
  readers waiting for the transaction timeout).

The cluster is touched only by ``backend``; the kill switch and leases live in the ledger.
The runner is given its Kafka clients (``RunnerClients``); ``kafka_clients`` builds the real
ones from the settings (``actuators/__main__.py`` does, a unit test gives fakes).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from actuators.backends import Backend
from actuators.checks import Reading, Verdict, judge, lease_expiry_ms, outcome, read, released
from actuators.clients import client_configs
from actuators.dispatch import dispatch, with_retries
from actuators.errors import ActuatorError
from actuators.kept_halts import kept_global_halt_ms
from actuators.ledger import Lease, Ledger
from actuators.ledger_reader import fold_new, position, read_ledger
from actuators.metrics import Metrics, MetricsServer
from actuators.reconcile import IntentLog, in_effect, observe
from actuators.settings import Policy, Settings
from actuators.topics import ensure_topics
from actuators.transactions import Stopped, Transactions, is_fatal
from runtime import tracing
from schemas import ActionType, OutcomeResult, Verifier

log = logging.getLogger("lagpilot.actuator")

POLL_TIMEOUT_S = 0.1  # the loop turns at least 10 times a second: halts act within 1 s


@dataclass
class RunnerClients:
    """The runner's Kafka clients, one role each (their configs: actuators/clients.py)."""

    admin: AdminClient  # topics, readiness
    transactions: Transactions  # the transactional producer and the control consumer
    intents: IntentLog  # intents, outside the transaction
    tail: Consumer  # the ledger's tail of the outcomes topic
    #: ``issued_at`` of a global halt kept on the halts topic (actuators/kept_halts.py)
    kept_halt_ms: Callable[[Verifier], int | None]


def kafka_clients(settings: Settings) -> RunnerClients:
    """The real clients for ``settings`` (nothing connects until they are used)."""
    cfg = client_configs(settings)  # actuators/clients.py: one config per role
    admin = AdminClient(cfg.base)
    # the runner hands the transactions its own stop event (run()'s, set on SIGTERM)
    transactions = Transactions(cfg.transactional, cfg.control, settings.control_topic,
                                settings.actuator_id, threading.Event())  # fmt: skip
    intents = IntentLog(lambda: Producer(cfg.intents), settings.outcomes_topic,
                        settings.actuator_id)  # fmt: skip
    tail = Consumer(cfg.ledger_tail)
    halts = {"bootstrap.servers": settings.bootstrap, **settings.kafka,
             "group.id": f"lagpilot-actuator-halts-{settings.actuator_id}"}  # fmt: skip
    kept = functools.partial(kept_global_halt_ms, halts, settings.control_topic)
    return RunnerClients(admin, transactions, intents, tail, kept)


class Runner:
    """Applies the control topic's actions; ``clients`` default to :func:`kafka_clients`."""

    def __init__(
        self,
        settings: Settings,
        *,
        signing_key: Verifier,
        policy: Policy,
        backend: Backend,
        clients: RunnerClients | None = None,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.policy = policy
        self.backend = backend
        self.metrics = metrics or Metrics()
        self.ledger = Ledger()
        self._key = signing_key
        self._clock = clock
        self._release_retry_at: dict[str, float] = {}
        self._trace_headers: dict[str, list[tuple[str, bytes]]] = {}  # outcome key -> traceparent
        self._ready = False
        self._stop = threading.Event()  # run()'s: set on SIGTERM
        self._server: MetricsServer | None = None
        if clients is None:
            clients = kafka_clients(settings)
        self._admin = clients.admin
        # the transactional producer and the control consumer (actuators/transactions.py)
        self._txn = clients.transactions
        self._txn.stop = self._stop
        self._intents = clients.intents
        self._tail = clients.tail
        self._kept_halt_ms = clients.kept_halt_ms

    # -- lifecycle -----------------------------------------------------------------------

    def _adopt_kept_halts(self) -> None:
        """A halt issued while no actuator ran (actuators/kept_halts.py) holds here too."""
        at = self._kept_halt_ms(self._key)
        if at is not None and at >= self.ledger.kill_switch[0]:
            self.ledger.kill_switch = (at, True)
            self.metrics.halted.set(1)

    def start(self, serve_metrics: bool = True) -> Runner:
        ensure_topics(self._admin, self.settings)
        # First: fence a predecessor with our id and abort its open transaction, so the
        # read_committed rebuild below is not blocked by it.
        self._txn.producer.init_transactions(30)
        self.rebuild_ledger()
        self._adopt_kept_halts()
        self._txn.subscribe()
        if serve_metrics:
            self._server = MetricsServer(
                self.metrics, self.ready, self.settings.metrics_port
            ).start()
        self._ready = True
        log.info(
            "actuator %s started: backend=%s, %d applied ids, %d leases, halted=%s",
            self.settings.actuator_id,
            self.backend.name,
            len(self.ledger.applied),
            len(self.ledger.leases),
            self.ledger.halted,
        )
        return self

    def run(self, stop: threading.Event) -> None:
        self._stop = self._txn.stop = stop
        while not stop.is_set():
            try:
                self.step()
            except Stopped:
                return

    def close(self) -> None:
        self._ready = False
        if self._server is not None:
            self._server.stop()
        self._txn.close()
        self._tail.close()
        self._intents.close()
        self.backend.close()

    def ready(self) -> bool:
        if not self._ready:
            return False
        try:
            self._admin.list_topics(timeout=1.0)
        except KafkaException:
            return False
        return True

    @property
    def metrics_port(self) -> int | None:
        return self._server.port if self._server else None

    # -- ledger --------------------------------------------------------------------------

    def rebuild_ledger(self) -> None:
        """Read the outcomes topic from the beginning to its end into a fresh ledger."""
        self.ledger = read_ledger(self._tail, self.settings.outcomes_topic)
        self._gauges()

    def _tail_outcomes(self) -> None:
        """Fold outcomes other actuators committed (their applies, releases, halts)."""
        fold_new(self._tail, self.ledger)

    def _gauges(self) -> None:
        self.metrics.throttles_active.set(len(self.ledger.leases))
        self.metrics.halted.set(1 if self.ledger.halted else 0)

    # -- one turn of the loop ------------------------------------------------------------

    def step(self) -> int:
        """Fold new outcomes, end due leases, then process one batch of control events."""
        self._tail_outcomes()
        self._release_due_leases()
        # consume(n, timeout) waits for n messages or the timeout: wait for the first only,
        # then take what has already arrived, so one event never waits for a full batch.
        consumer = self._txn.consumer
        msgs = consumer.consume(1, timeout=POLL_TIMEOUT_S)
        if msgs and self.settings.max_batch > 1:
            msgs += consumer.consume(self.settings.max_batch - 1, timeout=0)
        fatal = next((m.error() for m in msgs if is_fatal(m.error())), None)
        if fatal is not None:  # fenced as a static member: nothing of this batch is applied
            self._txn.renew_consumer(fatal)
            return 0
        records: list[tuple[str, dict[str, Any]]] = []
        first: dict[tuple[str, int], int] = {}
        last: dict[tuple[str, int], int] = {}
        # Each event is read (decoded, validated, its signature verified) once; the intents
        # and then the handling judge that reading, each against the ledger of its moment.
        readings = [None if m.error() is not None else self._read(m) for m in msgs]
        self._write_intents([r for r in readings if r is not None])
        for msg, reading in zip(msgs, readings, strict=True):
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("control consumer: %s", err.str())
                continue
            assert reading is not None
            tp = (msg.topic(), msg.partition())
            first.setdefault(tp, msg.offset())
            last[tp] = msg.offset()
            records.append(self._handle(msg, reading))
        if not last:
            return 0
        offsets = [TopicPartition(t, p, o + 1) for (t, p), o in last.items()]
        committed = self._commit(records, offsets)
        self._trace_headers.clear()  # produced, or to be traced again when reprocessed
        if not committed:
            for (t, p), o in first.items():
                consumer.seek(TopicPartition(t, p, o))
            self.rebuild_ledger()
        self._gauges()
        return len(records)

    def _read(self, msg: Message) -> Reading:
        """Gates 0-3 on one control event (actuators/checks.py), once per event."""
        return read(msg.value(), position=position(msg), signing_key=self._key)

    def _judge(self, reading: Reading, now_ms: int) -> Verdict:
        """Gates 4-10: the verdict on ``reading`` against the ledger as it is now."""
        return judge(reading, policy=self.policy, ledger=self.ledger,
                     actuator=self.settings.actuator_id, now_ms=now_ms)  # fmt: skip

    def _handle(self, msg: Message, reading: Reading) -> tuple[str, dict[str, Any]]:
        if not tracing.on():
            return self._handle_one(reading)
        where = {"lagpilot.control_position": position(msg)}
        with tracing.span(
            "lagpilot.apply", parent=tracing.parent_from(msg.headers()), attributes=where
        ) as applied:
            key, result = self._handle_one(reading)
            got = {
                "lagpilot.action_id": result.get("action_id"),
                "lagpilot.action_type": result.get("action_type"),
                "lagpilot.result": result["result"],
                "lagpilot.actuator": self.settings.actuator_id,
            }
            applied.set_attributes({k: v for k, v in got.items() if v is not None})
            with tracing.span("lagpilot.outcome", parent=applied, attributes=got) as recorded:
                self._trace_headers[key] = tracing.headers_of(recorded)
        return key, result

    def _handle_one(self, reading: Reading) -> tuple[str, dict[str, Any]]:
        # judged again, not the intents' verdict: the batch's earlier events changed the
        # ledger (a duplicate id, a halt) and time went on (expiry, the outcome's time)
        verdict = self._judge(reading, self._now_ms())
        result = verdict.outcome if verdict.action is None else self._apply(verdict.action)
        assert result is not None
        self.ledger.fold(result)  # at once: a later event of this batch must see it
        kind = result.get("action_type", "unknown")
        self.metrics.events.labels(result=result["result"], type=kind).inc()
        level = (
            logging.INFO
            if result["result"] in ("applied", "recorded", "delegated")
            else logging.WARNING
        )
        log.log(
            level,
            "%s %s %s: %s",
            result["result"],
            kind,
            result.get("target", ""),
            result.get("reason") or result.get("error", {}).get("message", ""),
        )
        return verdict.key, result

    def _write_intents(self, readings: list[Reading]) -> None:
        """An ``intent`` for every action of the batch that will call the backend, flushed
        (acknowledged by the broker) before the first call. Judged against the ledger as it
        is now; an action that turns out otherwise gets its intent in ``_apply``."""
        now_ms = self._now_ms()
        self._intents.begin()
        for reading in readings:
            verdict = self._judge(reading, now_ms)
            if verdict.action is not None:
                self._intents.add(verdict.action, now_ms)
        self._intents.flush()

    def _reconciled(self, action: dict[str, Any]) -> str | None:
        """For an action whose intent has no outcome (an actuator died between its backend
        call and its outcome): the reason to record it applied without calling again, when
        the cluster already shows its effect; None to apply it."""
        if action["id"] not in self.ledger.intents:
            return None
        try:
            reason = in_effect(action, observe(self.backend, action))
        except Exception as exc:  # cannot tell: apply (every operation sets a state)
            log.warning("could not read the state of %s (%s); applying it", action["id"], exc)
            return None
        if reason is not None:
            self.metrics.events.labels(result="reconciled", type=action["type"]).inc()
        return reason

    def _apply(self, action: dict[str, Any]) -> dict[str, Any]:
        kind = action["type"]
        if kind in (ActionType.HALT, ActionType.RESUME):
            reason = (
                "kill switch on: nothing is applied until resume"
                if kind == ActionType.HALT
                else "kill switch off: actions are applied again"
            )
            return self._outcome(action, OutcomeResult.APPLIED, reason)
        if self._intents.add(action, self._now_ms()):
            self._intents.flush()
        reconciled = self._reconciled(action)
        if reconciled is not None:
            return self._outcome(action, OutcomeResult.APPLIED, reconciled)
        started = time.perf_counter()
        try:
            done = with_retries(
                lambda: dispatch(self.backend, action),
                max_retries=self.settings.max_retries,
                base_s=self.settings.backoff_base_s,
                cap_s=self.settings.backoff_max_s,
            )
        except ActuatorError as exc:
            refused = "the backend refused or could not be reached"
            return self._outcome(action, OutcomeResult.FAILED, refused, exc.as_outcome_error())
        except Exception as exc:  # a bug must cost one action, never the actuator
            log.exception("backend %s crashed on %s", self.backend.name, action["id"])
            error = {"message": f"{type(exc).__name__}: {exc}", "code": None, "retriable": False}
            crashed = "internal error in the backend"
            return self._outcome(action, OutcomeResult.FAILED, crashed, error)
        finally:
            self.metrics.apply_seconds.observe(time.perf_counter() - started)
        return self._outcome(action, OutcomeResult.APPLIED, done)

    def _outcome(
        self,
        action: dict[str, Any],
        result: OutcomeResult,
        reason: str,
        error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """``action``'s outcome, now; an applied throttle's with the end of its lease."""
        now_ms, lease = self._now_ms(), None
        if result is OutcomeResult.APPLIED and action["type"] == ActionType.THROTTLE_PRODUCER:
            lease = lease_expiry_ms(action, now_ms)
        return outcome(
            result,
            actuator=self.settings.actuator_id,
            now_ms=now_ms,
            action=action,
            reason=reason,
            error=error,
            lease_expires_at=lease,
        )

    def _release_due_leases(self) -> None:
        """Remove quotas whose lease ended. Done even while halted: the kill switch stops
        new changes, it must never pin producers under a throttle nobody renews."""
        now = self._clock()
        due: list[Lease] = [
            lease
            for lease in self.ledger.due(self._now_ms())
            if self._release_retry_at.get(lease.action_id, 0) <= now
        ]
        if not due:
            return
        records = []
        for lease in due:
            try:
                with_retries(
                    functools.partial(self.backend.release, lease.entity, lease.name),
                    max_retries=self.settings.max_retries,
                    base_s=self.settings.backoff_base_s,
                    cap_s=self.settings.backoff_max_s,
                )
            except ActuatorError as exc:
                # Not published under the throttle's id: that would erase its lease from the
                # compacted topic. The lease stays in the ledger and is retried in 5 s.
                log.warning("lease release of %s=%s failed: %s", lease.entity, lease.name, exc)
                self._release_retry_at[lease.action_id] = now + 5.0
                continue
            out = released(lease, actuator=self.settings.actuator_id, now_ms=self._now_ms())
            self.ledger.fold(out)
            self._release_retry_at.pop(lease.action_id, None)
            self.metrics.events.labels(result="released", type=out["action_type"]).inc()
            records.append((lease.action_id, out))
        if records and not self._commit(records, []):
            self.rebuild_ledger()
        self._gauges()

    def _commit(
        self, records: list[tuple[str, dict[str, Any]]], offsets: list[TopicPartition]
    ) -> bool:
        """Outcomes and control offsets in one transaction; False if it had to be aborted."""
        return self._txn.commit(self.settings.outcomes_topic, records, offsets,
                                lambda key: self._trace_headers.pop(key, None))  # fmt: skip

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)
