"""``lagpilot workers``: keep N processes of an agent worker running, scaled by lagpilot.

The policy publishes a signed ``scale_consumers`` action (params ``group``, ``replicas``,
``partitions``) when a group needs more consumers. On Kubernetes KEDA scales the Deployment
(docs/keda.md); on VMs and bare hosts this supervisor does: ``--min`` processes of the
command, up to the hint at once (never above ``--max``), back toward ``--min`` one process
per ``--scale-down-interval-s`` once ``--lease-s`` passed without another hint for the
group; a child that dies is restarted after a short backoff, as a Deployment would.

Pure core: ``read_hint`` (control bytes -> a ``Hint`` or why it is not obeyed) and
``desired_replicas`` (``now`` passed in). Effects: ``Supervisor`` (the children),
``ControlSource``, ``OutcomesSink``; ``main`` is the command (docs/workers.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from confluent_kafka import Consumer, Producer, TopicPartition

from actuators.checks import outcome
from actuators.workers.control import (
    DUPLICATE,
    EXPIRED,
    OTHER_GROUP,
    RECOMMEND,
    SeenIds,
    read_event,
)
from actuators.workers.control import _end_offset as end_offset
from actuators.workers.outcomes import outcome_key, worker_outcome
from actuators.workers.worker import INSTANCE_ID_ENV
from runtime.backoff import backoff_s
from schemas import ActionType, ConfigError, OutcomeResult, Verifier
from schemas.codec import encode
from schemas.keys import load_verifier
from schemas.topics import CONTROL, OUTCOMES

log = logging.getLogger(__name__)

SCALED = "scaled"  # worker_outcome ``did``: the supervisor now keeps ``replicas`` processes
NOT_SCALE = "not_scale_consumers"
INDEX_ENV, GROUP_ENV = "LAGPILOT_WORKER_INDEX", "LAGPILOT_WORKER_GROUP"
RESTART_BACKOFF_S = (1.0, 30.0)  # the first wait after a crash, doubled per crash in a row
HEALTHY_AFTER_S = 10.0  # a child that ran this long before it died starts the backoff over

# --------------------------------------------------------------------------- pure core


@dataclass(frozen=True)
class Bounds:
    min_replicas: int
    max_replicas: int
    lease_s: float = 60.0
    scale_down_interval_s: float = 10.0


@dataclass(frozen=True)
class Hint:
    """A verified ``scale_consumers`` for our group; its lease runs from ``at_ms`` (read)."""

    action_id: str
    replicas: int
    at_ms: int
    action: Mapping[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class ScalePlan:
    replicas: int
    why: str


def check_bounds(b: Bounds, stop_grace_s: float = 0.0) -> Bounds:
    """``b``, or a ``ConfigError`` naming the flag, its variable and what to set."""
    bad: list[tuple[str, object, str]] = []
    if b.min_replicas < 0:
        bad.append(("min", b.min_replicas, "0 or more"))
    if b.max_replicas < max(1, b.min_replicas):
        bad.append(("max", b.max_replicas, f"at least 1 and --min ({b.min_replicas})"))
    for flag, s in (("lease-s", b.lease_s), ("scale-down-interval-s", b.scale_down_interval_s)):
        if not s > 0:
            bad.append((flag, s, "a number of seconds > 0"))
    if not stop_grace_s >= 0:
        bad.append(("stop-grace-s", stop_grace_s, "a number of seconds >= 0"))
    if bad:
        flag, value, want = bad[0]
        env = "LAGPILOT_WORKERS_" + flag.upper().replace("-", "_")
        raise ConfigError(f"--{flag} ({env}) = {value}: set it to {want}")
    return b


def read_hint(payload: bytes | None, *, group: str, key: Verifier, now_ms: int) -> Hint | str:
    """A ``Hint`` for ``group``, or why the event is not obeyed. Read by ``read_event``, as
    the SDK workers' ``read_command`` reads it, authenticity before anything is read from
    it: an unsigned or badly signed event is never obeyed."""
    event = read_event(payload, key)
    if isinstance(event, str):
        return event
    if event["type"] != ActionType.SCALE_CONSUMERS:
        return NOT_SCALE
    if event["mode"] != "act":
        return RECOMMEND
    if event["expires_at"] < now_ms:
        return EXPIRED
    if event["params"]["group"] != group:
        return OTHER_GROUP
    return Hint(event["id"], int(event["params"]["replicas"]), now_ms, event)


def desired_replicas(
    hint: Hint | None, *, current: int, now_ms: int, bounds: Bounds, last_down_ms: int | None
) -> ScalePlan:
    """How many processes to keep now: up at once to the hint (capped at ``max``); down only
    once the hint's lease ended, one per ``scale_down_interval_s``, never below ``min``."""
    lo, hi = bounds.min_replicas, bounds.max_replicas
    if current < lo or current > hi:
        return ScalePlan(min(max(current, lo), hi), "--min" if current < lo else "--max")
    lease_end_ms = 0 if hint is None else hint.at_ms + int(bounds.lease_s * 1000)
    if hint is not None and now_ms < lease_end_ms:  # an ended lease asks for nothing
        want = min(max(hint.replicas, lo), hi)
        if want > current:
            capped = ", capped at --max" if hint.replicas > hi else ""
            return ScalePlan(want, f"scale_consumers {hint.action_id} asks {hint.replicas}{capped}")
        return ScalePlan(current, "leased")
    if current == lo:
        return ScalePlan(current, "at --min")
    step_ms = int(bounds.scale_down_interval_s * 1000)
    due_ms = lease_end_ms if last_down_ms is None else max(lease_end_ms, last_down_ms + step_ms)
    if now_ms >= due_ms:
        return ScalePlan(current - 1, "the hint's lease ended without renewal")
    return ScalePlan(current, "waiting for the scale-down interval")


# --------------------------------------------------------------------------- processes


class ActionSource(Protocol):
    def poll(self, timeout_s: float) -> list[bytes | None]: ...


class Sink(Protocol):
    def send(self, key: bytes, event: dict[str, Any]) -> None: ...


@dataclass
class _Child:
    index: int
    proc: subprocess.Popen[bytes] | None = None
    started_ms: int = 0
    crashes: int = 0  # deaths in a row, each within HEALTHY_AFTER_S of its start
    restart_at_ms: int = 0


def _alive(proc: subprocess.Popen[bytes]) -> bool:
    """The child, or anything left in its process group (a shell's children), still runs."""
    if proc.poll() is None:
        return True
    try:
        os.killpg(proc.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _signal(proc: subprocess.Popen[bytes], sig: int) -> None:
    """``sig`` to the child's process group (it runs in its own session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


class Supervisor:
    """Keeps ``replicas`` processes of ``cmd`` running for ``group`` (see the module doc).

    ``source`` gives raw control events (the control topic, or a test's queue), ``sink``
    takes the reports (None: none), ``clock`` is epoch seconds. Each child runs in its own
    session: a terminal's Ctrl-C reaches only the supervisor, which stops them in order."""

    def __init__(self, *, group: str, cmd: Sequence[str], bounds: Bounds, source: ActionSource,
                 key: Verifier, sink: Sink | None = None, instance: str | None = None,
                 stop_grace_s: float = 30.0, env: Mapping[str, str] | None = None,
                 poll_s: float = 0.2, clock: Callable[[], float] = time.time) -> None:  # fmt: skip
        self.group, self.cmd, self.bounds = group, list(cmd), check_bounds(bounds, stop_grace_s)
        self._source, self._key, self._sink = source, key, sink
        self.host = socket.gethostname()
        self.instance = instance or self.host
        self._grace_s, self._poll_s, self._clock = stop_grace_s, poll_s, clock
        self._env = dict(os.environ if env is None else env)
        self._id_base = self._env.get(INSTANCE_ID_ENV) or f"{self.host}-{group}"
        self._children: list[_Child] = []  # in start order: a scale-down stops the last
        self._stopping: list[tuple[subprocess.Popen[bytes], int, int]] = []  # proc, index, kill
        self._hint: Hint | None = None
        self._last_down_ms: int | None = None
        self._seen = SeenIds()
        self.counts: Counter[str] = Counter()

    @property
    def replicas(self) -> int:
        """The processes it keeps (a crashed one waiting for its restart included)."""
        return len(self._children)

    def pids(self) -> list[int]:
        """The running children's pids, in start order (stopping ones left out)."""
        return [c.proc.pid for c in self._children if c.proc is not None and c.proc.poll() is None]

    def step(self) -> ScalePlan:
        """One turn: read the actions that arrived, reap children, scale, restart, report."""
        payloads = self._source.poll(self._poll_s)
        now_ms = int(self._clock() * 1000)
        obeyed = [h for h in (self._read(p, now_ms) for p in payloads) if h is not None]
        self._reap(now_ms)
        before = self.replicas
        plan = desired_replicas(self._hint, current=before, now_ms=now_ms, bounds=self.bounds,
                                last_down_ms=self._last_down_ms)  # fmt: skip
        if plan.replicas != before:
            self._resize(plan.replicas, now_ms)
            log.info("group %s: scaled %d -> %d worker processes (%s)",
                     self.group, before, plan.replicas, plan.why)  # fmt: skip
        for child in self._children:
            if child.proc is None and now_ms >= child.restart_at_ms:
                self.counts["restarts"] += 1
                self._spawn(child, now_ms)
        for hint in obeyed:
            self._report(hint, now_ms, applied=True)
        if plan.replicas != before and not obeyed and self._hint is not None:
            self._report(self._hint, now_ms, applied=False)  # a step down: its lease ended
        return plan

    def run(self, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                self.step()
        finally:
            self.shutdown()

    def _read(self, payload: bytes | None, now_ms: int) -> Hint | None:
        got = read_hint(payload, group=self.group, key=self._key, now_ms=now_ms)
        if isinstance(got, str):
            self.counts[got] += 1
            if got not in (OTHER_GROUP, NOT_SCALE, RECOMMEND, EXPIRED):
                log.warning("control event ignored, not obeyed: %s", got)
            return None
        if not self._seen.add(got.action_id):
            self.counts[DUPLICATE] += 1
            return None
        self.counts["accepted"] += 1
        self._hint = got  # the latest scale_consumers of the group renews the lease
        return got

    def _reap(self, now_ms: int) -> None:
        for child in self._children:
            if child.proc is None or child.proc.poll() is None:
                continue
            code, pid = child.proc.returncode, child.proc.pid
            _signal(child.proc, signal.SIGKILL)  # nothing of it is left behind
            healthy = now_ms - child.started_ms >= HEALTHY_AFTER_S * 1000
            child.crashes = 1 if healthy else child.crashes + 1
            wait_s = backoff_s(child.crashes - 1, *RESTART_BACKOFF_S)
            child.proc, child.restart_at_ms = None, now_ms + int(wait_s * 1000)
            log.warning("group %s: worker process %d (pid %d) exited with %s; restarting it in "
                        "%.1f s", self.group, child.index, pid, code, wait_s)  # fmt: skip
        still = []
        for proc, index, kill_ms in self._stopping:
            if not _alive(proc):
                log.info("group %s: worker process %d stopped", self.group, index)
                continue
            if now_ms >= kill_ms:
                log.warning("group %s: worker process %d still running %g s after SIGTERM: "
                            "SIGKILL", self.group, index, self._grace_s)  # fmt: skip
                _signal(proc, signal.SIGKILL)
                kill_ms = sys.maxsize
            still.append((proc, index, kill_ms))
        self._stopping = still

    def _resize(self, replicas: int, now_ms: int) -> None:
        while self.replicas < replicas:  # the lowest index no live process holds
            busy = {c.index for c in self._children} | {i for _, i, _ in self._stopping}
            child = _Child(min(set(range(len(busy) + 1)) - busy))
            self._children.append(child)
            self._spawn(child, now_ms)
        while self.replicas > replicas:  # one waiting for its restart first, else the newest
            waiting = [c for c in self._children if c.proc is None]
            child = waiting[-1] if waiting else self._children[-1]
            self._children.remove(child)
            self._last_down_ms = now_ms
            if child.proc is not None:  # SDK workers finish their running messages on SIGTERM
                _signal(child.proc, signal.SIGTERM)
                self._stopping.append((child.proc, child.index, now_ms + int(self._grace_s * 1e3)))

    def _spawn(self, child: _Child, now_ms: int) -> None:
        env = {**self._env, INDEX_ENV: str(child.index), GROUP_ENV: self.group,
               INSTANCE_ID_ENV: f"{self._id_base}-{child.index}"}  # fmt: skip
        child.started_ms = now_ms
        try:
            child.proc = subprocess.Popen(self.cmd, env=env, start_new_session=True)
        except OSError as exc:
            child.crashes += 1
            wait_s = backoff_s(child.crashes - 1, *RESTART_BACKOFF_S)
            child.restart_at_ms = now_ms + int(wait_s * 1000)
            log.error("group %s: cannot start worker process %d (%s: %s); retrying in %.1f s",
                      self.group, child.index, self.cmd[0], exc.strerror, wait_s)  # fmt: skip

    def _report(self, hint: Hint, now_ms: int, *, applied: bool) -> None:
        """A ``worker_outcome`` (did ``scaled``, ``replicas``); for an action just obeyed
        also its ``outcome`` ``applied``, keyed by its id: what starts the policy's watch."""
        if self._sink is None:
            return
        event = worker_outcome(action_id=hint.action_id, action_type=ActionType.SCALE_CONSUMERS,
                               did=SCALED, group=self.group, instance=self.instance,
                               host=self.host, now_ms=now_ms)  # fmt: skip
        event["replicas"] = self.replicas
        self._sink.send(outcome_key(event), event)
        if applied:
            b = self.bounds
            why = (f"{self.replicas} worker processes of group {self.group} on {self.host} (hint "
                   f"{hint.replicas}, --min {b.min_replicas}, --max {b.max_replicas})")  # fmt: skip
            done = outcome(OutcomeResult.APPLIED, actuator=f"workers@{self.instance}",
                           now_ms=now_ms, action=hint.action, reason=why)  # fmt: skip
            self._sink.send(hint.action_id.encode(), done)

    def shutdown(self) -> None:
        """SIGTERM to every child, SIGKILL to those still running after the grace."""
        for child in self._children:
            if child.proc is not None and child.proc.poll() is None:
                _signal(child.proc, signal.SIGTERM)
                self._stopping.append((child.proc, child.index, 0))
        procs, self._children, self._stopping = [p for p, _, _ in self._stopping], [], []
        deadline = time.monotonic() + self._grace_s
        while any(_alive(p) for p in procs) and time.monotonic() < deadline:
            time.sleep(0.05)
        for p in [p for p in procs if _alive(p)]:
            log.warning("group %s: pid %d still running %g s after SIGTERM: SIGKILL",
                        self.group, p.pid, self._grace_s)  # fmt: skip
            _signal(p, signal.SIGKILL)
            p.wait(10)
        log.info("group %s: stopped %d worker processes", self.group, len(procs))


# --------------------------------------------------------------------------- Kafka edges


class ControlSource:
    """The control topic, every partition assigned at its end. No group is joined (its id is
    never used): every supervisor of a group, one per host, must see every hint, where a
    shared group would give each partition of the topic to one of them only."""

    def __init__(self, config: Mapping[str, Any], topic: str) -> None:
        self.topic = topic
        self._consumer = Consumer({**config, "group.id": "lagpilot-workers-control",
                                   "enable.auto.commit": False})  # fmt: skip
        parts = sorted(self._consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        ends = [TopicPartition(topic, p) for p in parts]
        self._consumer.assign([TopicPartition(topic, tp.partition, end_offset(self._consumer, tp))
                               for tp in ends])  # fmt: skip

    def poll(self, timeout_s: float) -> list[bytes | None]:
        """What has arrived, else the first event within ``timeout_s``: ``consume(100,
        timeout)`` alone returns only once 100 are in or the timeout passed, so every hint
        would wait the whole timeout before the supervisor scales."""
        msgs = self._consumer.consume(num_messages=100, timeout=0) or self._consumer.consume(
            num_messages=1, timeout=timeout_s
        )
        for bad in [m for m in msgs if m.error() is not None]:
            log.warning("control topic %s: %s", self.topic, bad.error())
        return [m.value() for m in msgs if m.error() is None]

    def close(self) -> None:
        self._consumer.close()


class OutcomesSink:
    """Reports on the outcomes topic; one that cannot be sent is logged, never raised."""

    def __init__(self, config: Mapping[str, Any], topic: str) -> None:
        self.topic, self.errors = topic, 0
        self._producer = Producer({**config, "linger.ms": 0, "message.timeout.ms": 5000,
                                   "allow.auto.create.topics": False})  # fmt: skip

    def send(self, key: bytes, event: dict[str, Any]) -> None:
        try:
            self._producer.produce(self.topic, encode(event), key, on_delivery=self._delivered)
            self._producer.poll(0)
        except Exception as exc:  # BufferError, KafkaException: the children come first
            self._delivered(exc, None)

    def _delivered(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self.errors += 1
            log.warning("report to %s not sent: %s", self.topic, err)

    def close(self) -> None:
        self._producer.flush(5)


# --------------------------------------------------------------------------- the command

EXAMPLE = """example:
  export KAFKA_BOOTSTRAP=redpanda-0:9092 LAGPILOT_TRUSTED_KEYS=/etc/lagpilot/trusted
  lagpilot workers --group doc-parsers --min 1 --max 8 -- python worker.py

Each child gets LAGPILOT_WORKER_INDEX, LAGPILOT_WORKER_GROUP and LAGPILOT_WORKER_INSTANCE_ID
(<base>-<index>: a unique static membership id) on top of this process's environment."""


def _parser() -> Any:
    from runtime.cli import Parser, add_connection

    p = Parser(prog="lagpilot workers", epilog=EXAMPLE,
               usage="lagpilot workers --group G --min N --max M [options] -- CMD [ARGS...]",
               description="Run CMD as worker processes of a consumer group, scaled by "
               "lagpilot's signed scale_consumers actions within --min/--max.")  # fmt: skip
    add_connection(p)
    o, w = p.option, "LAGPILOT_WORKERS_"
    o("--group", env=w + "GROUP", help="the consumer group the processes join (required)")
    o("--min", dest="min_replicas", env=w + "MIN", default=1, type=int,
      help="processes kept while no hint holds")  # fmt: skip
    o("--max", dest="max_replicas", env=w + "MAX", type=int, help="most processes (required)")
    o("--lease-s", env=w + "LEASE_S", default=60.0, type=float,
      help="a hint holds this long after the group's last scale_consumers")  # fmt: skip
    o("--scale-down-interval-s", env=w + "SCALE_DOWN_INTERVAL_S", default=10.0, type=float,
      help="after the lease, one process stopped per this many seconds")  # fmt: skip
    o("--stop-grace-s", env=w + "STOP_GRACE_S", default=30.0, type=float,
      help="SIGKILL a process this long after its SIGTERM")  # fmt: skip
    o("--control-topic", env="LAGPILOT_CONTROL_TOPIC", default=CONTROL, help="hints come here")
    o("--outcomes-topic", env="LAGPILOT_OUTCOMES_TOPIC", default=OUTCOMES,
      help="scale steps are reported here ('' for nowhere)")  # fmt: skip
    o("--id", dest="instance", env=w + "ID", default="the host name",
      help="this supervisor's name in its reports (their instance)")  # fmt: skip
    return p


def _workers(args: Any, cmd: list[str]) -> int:
    from runtime.cli import EX_NOINPUT, EX_USAGE, CommandError, client_config, connect

    if not cmd:
        raise CommandError("no worker command: put it after --, e.g. lagpilot workers "
                           "--group G --max 4 -- python worker.py", EX_USAGE)  # fmt: skip
    if shutil.which(cmd[0]) is None:
        raise CommandError(f"worker command {cmd[0]!r} is not an executable file or on PATH; "
                           "give its path after --", EX_USAGE)  # fmt: skip
    required = (("group", args.group, "the consumer group the processes join"),
                ("max", args.max_replicas, "the most processes it may run"))  # fmt: skip
    for flag, value, what in required:
        if value in (None, ""):
            raise ConfigError(f"--{flag} (LAGPILOT_WORKERS_{flag.upper()}) is not set: {what}")
    bounds = check_bounds(Bounds(args.min_replicas, args.max_replicas, args.lease_s,
                                 args.scale_down_interval_s), args.stop_grace_s)  # fmt: skip
    key = load_verifier(args.env)
    for topic in filter(None, (args.control_topic, args.outcomes_topic)):
        found = connect(args.bootstrap, args.kafka, args.connect_timeout_s, topic=topic)
        meta = found.topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise CommandError(f"topic {topic} not found at {args.bootstrap}; start the pipeline "
                               "and the actuator (they create lagpilot's topics) or fix "
                               "--control-topic / --outcomes-topic", EX_NOINPUT)  # fmt: skip
    conf = client_config(args.bootstrap, args.kafka)
    source = ControlSource(conf, args.control_topic)
    sink = OutcomesSink(conf, args.outcomes_topic) if args.outcomes_topic else None
    instance = None if args.instance == "the host name" else args.instance
    sup = Supervisor(group=args.group, cmd=cmd, bounds=bounds, source=source, key=key,
                     sink=sink, instance=instance, stop_grace_s=args.stop_grace_s)  # fmt: skip
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    log.info("lagpilot workers: group %s, %d..%d processes of %r, hints from %s, lease %g s",
             args.group, bounds.min_replicas, bounds.max_replicas, " ".join(cmd),
             args.control_topic, bounds.lease_s)  # fmt: skip
    try:
        sup.run(stop)
    finally:
        source.close()
        if sink is not None:
            sink.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    from runtime.cli import run

    args = list(sys.argv[1:] if argv is None else argv)
    cut = args.index("--") if "--" in args else len(args)
    opts, cmd = args[:cut], args[cut + 1 :]
    return run("lagpilot workers", _parser(), lambda a: _workers(a, cmd), opts)


if __name__ == "__main__":
    sys.exit(main())
