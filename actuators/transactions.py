"""The actuator's two group-bound clients and how each survives a broker's failover.

- The transactional producer commits each batch's outcomes together with the control
  offsets (``commit``). A commit that fails while a node restarts is settled (``settle``):
  retried, aborted or ended by a new producer with the same transactional id.
- The control consumer is a static member (``group.instance.id`` = the actuator id). After
  its coordinator failed over, librdkafka can rejoin with a new member id and then be told
  that a member with its own instance id fenced it (a fatal error; librdkafka#3437).
  ``renew_consumer`` makes a new consumer that rejoins under the same instance id.

"Fenced" is ambiguous for both: a twin actuator with the same id, or the broker's failover.
A failover fences a client once per coordinator move, and a cluster can move two in a row
(the offsets leader's node, then the controller's, restarted one after the other). A twin fences it
again at every renewal, as each twin's renewal fences the other. So a client is renewed up
to ``MAX_RENEWALS`` times within ``TWIN_WINDOW_S``; fenced once more in that window, it is
a twin and the actuator stops, naming the fix.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from runtime.backoff import jittered_s
from schemas import encode
from schemas.errors import LagpilotError

log = logging.getLogger("lagpilot.actuator")

# errors that say another producer with our transactional id took over (or the coordinator
# expired our transaction while a node was down, which reads the same)
FENCED = frozenset(
    {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
)
TWIN_WINDOW_S = 60.0  # renewals counted over this window (monotonic seconds)
MAX_RENEWALS = 3  # renewals allowed within TWIN_WINDOW_S; one more fence: a twin actuator
TXN_SETTLE_S = 120.0  # how long a commit or abort is retried while the broker is away
SEND_OFFSETS_S = 10.0  # the deadline of send_offsets_to_transaction (kept by a helper thread)
SLOW_TXN_S = 3.0  # a transaction slower than this is logged with the step it spent it in
CLOSE_WAIT_S = 10.0  # a fenced consumer's close is given this long, then left behind


class Stopped(LagpilotError):
    """Raised out of a step when the actuator is told to stop while it waits for a broker;
    run() ends quietly on it. Retriable: the next actuator with this id takes over."""

    retriable = True


# what ``_send_offsets`` overrunning its deadline is settled as: a transaction this producer
# cannot end (neither retriable nor abortable), so a new producer ends it
OVERRAN = KafkaError(
    KafkaError._TIMED_OUT,
    f"send_offsets_to_transaction still blocked after {SEND_OFFSETS_S:.0f} s (librdkafka#5456)",
)


def is_fatal(err: KafkaError | None) -> bool:
    """A consumer's fatal error: librdkafka delivers it as a message whose error code is
    ``_FATAL`` (its ``fatal()`` flag is not set on that copy)."""
    return err is not None and (err.fatal() or err.code() == KafkaError._FATAL)


def twin_error(what: str, err: KafkaError, actuator_id: str) -> RuntimeError:
    return RuntimeError(
        f"{what} failed ({err.str()}): another actuator with actuator_id={actuator_id!r} has "
        "fenced this one; give each running actuator its own LAGPILOT_ACTUATOR_ID"
    )


class Transactions:
    """The transactional producer and the control consumer of one actuator."""

    def __init__(
        self,
        producer_config: dict[str, Any],
        consumer_config: dict[str, Any],
        control_topic: str,
        actuator_id: str,
        stop: threading.Event,
        *,
        make_producer: Callable[[dict[str, Any]], Any] = Producer,
        make_consumer: Callable[[dict[str, Any]], Any] = Consumer,
    ) -> None:
        self._producer_config, self._consumer_config = producer_config, consumer_config
        self._topic, self.actuator_id, self.stop = control_topic, actuator_id, stop
        self._make_producer, self._make_consumer = make_producer, make_consumer
        self.producer = make_producer(producer_config)
        self.consumer = make_consumer(consumer_config)
        self.producer_renewals = Renewals()  # monotonic times of the producer's renewals
        self.consumer_renewals = Renewals()

    def subscribe(self) -> None:
        self.consumer.subscribe([self._topic])

    # -- the producer ------------------------------------------------------------------------

    def commit(
        self,
        topic: str,
        records: Sequence[tuple[str, dict[str, Any]]],
        offsets: list[TopicPartition],
        headers: Callable[[str], Any],
    ) -> bool:
        """Outcomes and control offsets in one transaction; False if it had to be aborted."""
        p = self.producer
        started = time.monotonic()
        step = "begin"
        try:
            p.begin_transaction()
            for key, value in records:
                p.produce(topic, key=key.encode(), value=encode(value), headers=headers(key))
            step = "send_offsets"
            if offsets and not self._send_offsets(p, offsets):
                return self.settle(OVERRAN, count_renewal=False)
            step = "commit"
            p.commit_transaction(10)
            return True
        except KafkaException as exc:
            return self.settle(exc.args[0])
        finally:
            took_s = time.monotonic() - started
            if took_s > SLOW_TXN_S:  # a broker away: say where the time went
                log.warning(
                    "a transaction of %d outcome(s) took %.1f s (last step: %s); outcomes "
                    "and lease releases waited for it",
                    len(records),
                    took_s,
                    step,
                )

    def _send_offsets(self, p: Any, offsets: list[TopicPartition]) -> bool:
        """``send_offsets_to_transaction`` with a deadline that holds: librdkafka ignores the
        call's own timeout while the group's coordinator is away (librdkafka#5456), and
        outcomes and lease releases wait behind the blocked call. The call runs on a helper
        thread; False when it has not returned by SEND_OFFSETS_S (the caller then ends the
        transaction by a new producer, which fences this one and frees the thread)."""
        done, raised = threading.Event(), []
        meta = self.consumer.consumer_group_metadata()

        def call() -> None:
            try:
                p.send_offsets_to_transaction(offsets, meta, SEND_OFFSETS_S)
            except BaseException as exc:  # handed to the caller's thread
                raised.append(exc)
            finally:
                done.set()

        threading.Thread(target=call, name="send-offsets", daemon=True).start()
        if not done.wait(SEND_OFFSETS_S + 1.0):
            return False
        if raised:
            raise raised[0]
        return True

    def settle(self, err: KafkaError, *, count_renewal: bool = True) -> bool:
        """End a transaction whose commit failed: retry the commit while the error is
        retriable, abort when it says so (the batch is then reprocessed: False). A broker or
        a partition leader gone for a while (a node restart) must cost time, never the
        actuator: each call is retried with backoff until TXN_SETTLE_S has passed. A
        transaction this producer cannot end (the coordinator moved while it was open and
        answers "invalid state", or a fatal error other than fencing) is ended by a new
        producer with the same transactional id: its init_transactions aborts it."""
        deadline = time.monotonic() + TXN_SETTLE_S
        attempt = 0
        aborting = renewing = False  # once decided, only that ends the transaction
        while True:
            if err.code() in FENCED and self.producer_renewals.exhausted(time.monotonic()):
                raise twin_error("transactional producer", err, self.actuator_id) from None
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"could not end a transaction in {TXN_SETTLE_S:.0f} s ({err.str()}); is "
                    "the broker up? (lagpilot doctor)"
                )
            if attempt and self.stop.wait(jittered_s(attempt, base_s=0.2, cap_s=2.0)):
                # Told to stop: leave the transaction open. The next actuator with this id
                # aborts it at init_transactions, and the batch's offsets were not committed.
                raise Stopped
            attempt += 1
            stuck = err.code() in FENCED or not (err.retriable() or err.txn_requires_abort())
            renewing = renewing or stuck or err is OVERRAN
            aborting = aborting or err.txn_requires_abort()
            try:
                if renewing:
                    log.warning("transaction stuck (%s); a new producer aborts it", err.str())
                    if count_renewal:  # a fence (a failover or a twin), not our own deadline
                        self.producer_renewals.add(time.monotonic())
                    self.producer = self._make_producer(self._producer_config)
                    self.producer.init_transactions(30)
                    return False
                if aborting:
                    log.warning("transaction aborted (%s); reprocessing the batch", err.str())
                    self.producer.abort_transaction(10)
                    return False
                log.warning("transaction commit failed (%s); retrying it", err.str())
                self.producer.commit_transaction(10)
                return True
            except KafkaException as again:
                err = again.args[0]

    # -- the consumer ------------------------------------------------------------------------

    def renew_consumer(self, err: KafkaError) -> None:
        """The control consumer hit a fatal error (fenced as a static member): a new one
        rejoins under the same instance id and reads on from the committed offsets. Fenced
        again after MAX_RENEWALS renewals within TWIN_WINDOW_S: a twin actuator, and this
        one stops."""
        now = time.monotonic()
        if self.consumer_renewals.exhausted(now):
            raise twin_error("control consumer", err, self.actuator_id)
        log.warning(
            "control consumer: %s; a new consumer rejoins as %r (a coordinator that failed "
            "over can fence a static member by itself)",
            err.str(),
            self.actuator_id,
        )
        self.consumer_renewals.add(now)
        old, self.consumer = self.consumer, self._make_consumer(self._consumer_config)
        close_within(old, CLOSE_WAIT_S, "the fenced control consumer")
        self.subscribe()

    def close(self) -> None:
        close_within(self.consumer, CLOSE_WAIT_S, "the control consumer")


class Renewals:
    """The monotonic times a client was renewed after a fence, within ``TWIN_WINDOW_S``."""

    def __init__(self) -> None:
        self.at_s: list[float] = []

    def add(self, now_s: float) -> None:
        self.at_s.append(now_s)

    def exhausted(self, now_s: float) -> bool:
        """Whether MAX_RENEWALS renewals happened within the window before ``now_s``."""
        self.at_s = [t for t in self.at_s if now_s - t < TWIN_WINDOW_S]
        return len(self.at_s) >= MAX_RENEWALS


def close_within(client: Any, timeout_s: float, what: str) -> bool:
    """``client.close()`` on a daemon thread, waited for ``timeout_s``: a consumer whose
    coordinator is away can block in close, and a stop must not wait for the broker."""
    done = threading.Event()

    def close() -> None:
        try:
            client.close()
        except Exception as exc:  # closing a broken client: say it, never fail the stop
            log.warning("closing %s: %s", what, exc)
        finally:
            done.set()

    threading.Thread(target=close, name=f"close {what}", daemon=True).start()
    if not done.wait(timeout_s):
        log.warning("%s did not close in %.0f s; left behind", what, timeout_s)
        return False
    return True
