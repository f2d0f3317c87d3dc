"""Process mode: a worker's lanes served by worker processes, for handlers that hold the GIL.

With threads, a handler that computes in Python (parsing, OCR, embedding) holds the
interpreter lock, and a worker runs one message at a time however many lanes it has. In
process mode (``executor="processes"``) the poll loop, the lanes, the commits and the control
commands stay in the worker's process, unchanged; each lane's running message is sent to one
of ``processes`` worker processes, which runs it (the handler, its retries, ``ctx.once_sql``
on its own connection to the dedupe store) and answers. The lane goes on only from the answer
(process_lanes.py), so a message counts as finished (and its offset may be committed) only
once its worker process finished it, exactly as when a thread runs it; halts, spreads,
hand-offs and revocations act on the lanes as they always do.

A key always goes to the same worker process (``lane_for(key)`` over the processes), and a
lane sends a key's next message only after the previous one finished, so a key's messages
run in offset order. Messages waiting for the same process are sent together (one pipe
write for what the lanes queued meanwhile), and each process runs what it was sent in
arrival order.

A worker process that dies is reported (logged, counted ``process_died``), started again,
and sent every message it had not answered, in the order they were first sent: nothing
unfinished is committed, and ``ctx.once_sql`` keeps a repeated effect from happening twice.
A message that was running each time its process died, ``max_attempts`` times, is given up
on like a handler that keeps raising (counted ``failed``, passed to ``on_failure``), so one
message that kills its process cannot wedge its partition.

Processes start with ``spawn``: the worker's process holds librdkafka's threads, and a
forked copy of them is unsafe. So the handler is pickled (a module-level function) and the
dedupe store is opened again in each process from its path or DSN (process_child.py).
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import os
import pickle
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from actuators.workers.dedupe import DedupeStore, SQLiteDedupeStore
from actuators.workers.dedupe_pg import PostgresDedupeStore
from actuators.workers.handling import AsyncHandler, FailureHook, Handler, Tally, is_async_handler
from actuators.workers.lanes import lane_for
from actuators.workers.process_child import (
    DONE,
    ERROR,
    ChildSettings,
    Payload,
    StoreSpec,
    child_main,
    payload,
)
from schemas import ConfigError
from schemas.errors import LagpilotError

log = logging.getLogger(__name__)

#: ``threads`` or ``processes``, when the ``executor`` keyword is not given
EXECUTOR_ENV = "LAGPILOT_WORKER_EXECUTOR"
#: how many worker processes, when the ``processes`` keyword is not given (process mode only)
PROCESSES_ENV = "LAGPILOT_WORKER_PROCESSES"
THREADS, PROCESSES = "threads", "processes"
EXECUTORS = (THREADS, PROCESSES)
#: a worker process is sent more once fewer than this many of its messages are unanswered:
#: it always has its next message at hand, while the lanes' new ones gather into one send
AHEAD = 2
#: how long a worker process may take to import the handler's module and open the store
START_TIMEOUT_S = 60.0
#: how long closing waits for each worker process to exit before it is killed
STOP_TIMEOUT_S = 5.0


class WorkerProcessError(LagpilotError, RuntimeError):
    """A worker process could not start, or died while running a message."""

    code = "worker_process"


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, e.g. a container's cpuset)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def resolve_processes(executor: str | None, processes: int | None) -> int | None:
    """None for the threaded executor, else how many worker processes: the arguments, else
    ``$LAGPILOT_WORKER_EXECUTOR`` / ``$LAGPILOT_WORKER_PROCESSES``, else threads / the usable
    CPUs. A bad value is refused naming where it came from and what it may be."""
    source = "executor"
    if executor is None:
        executor = os.environ.get(EXECUTOR_ENV, "").strip() or THREADS
        source = EXECUTOR_ENV
    if executor not in EXECUTORS:
        raise ConfigError(
            f"{source}={executor!r}: set it to 'threads' (the default: handlers that wait on "
            "I/O) or 'processes' (handlers that compute in Python and hold the GIL)"
        )
    if executor == THREADS:
        if processes is not None:
            raise ConfigError(
                f"processes={processes!r} is for process mode: pass executor='processes' "
                f"too (or set {EXECUTOR_ENV}=processes), or drop processes"
            )
        return None
    psource = "processes"
    if processes is None:
        text = os.environ.get(PROCESSES_ENV, "").strip()
        if not text:
            return usable_cpus()
        psource = PROCESSES_ENV
        try:
            processes = int(text)
        except ValueError:
            processes = text  # type: ignore[assignment]  # refused below, as it was given
    if not isinstance(processes, int) or isinstance(processes, bool) or processes < 1:
        raise ConfigError(
            f"{psource}={processes!r}: must be an integer >= 1 (unset: the usable CPUs, "
            f"{usable_cpus()} here)"
        )
    return processes


def pickled_handler(handler: Handler | AsyncHandler) -> bytes:
    """The handler as worker processes receive it; a handler they cannot receive is refused."""
    name = getattr(handler, "__qualname__", type(handler).__name__)
    if is_async_handler(handler):
        raise ConfigError(
            f"handler={name}: an async def handler cannot run in process mode; use "
            "executor='threads' (its lanes are tasks on an event loop), or a plain def handler"
        )
    try:
        return pickle.dumps(handler)
    except Exception as exc:
        raise ConfigError(
            f"handler={name} cannot be sent to worker processes ({exc}): with "
            "executor='processes' the handler must be a function defined at module level "
            "(not a lambda, a nested function or a closure); pass its extra arguments with "
            "functools.partial"
        ) from None


def store_spec(store: DedupeStore) -> StoreSpec:
    """How worker processes open ``store`` again; a store only one process can see is refused."""
    if isinstance(store, SQLiteDedupeStore):
        options = (("synchronous", store._synchronous), ("busy_timeout_ms", store._busy_timeout_ms))
        return StoreSpec("sqlite", str(store.path.resolve()), options)
    if isinstance(store, PostgresDedupeStore):
        return StoreSpec("postgres", store.dsn, (("table", store.table),))
    raise ConfigError(
        f"dedupe={type(store).__name__}(): in process mode each worker process opens the dedupe "
        "store itself, so it must be a SQLite file or a PostgreSQL database, not one "
        "process's memory: pass dedupe='path/to/dedupe.sqlite' or a postgresql:// URL (or "
        "set LAGPILOT_DEDUPE_PATH / LAGPILOT_DEDUPE_URL, or leave dedupe unset for "
        "lagpilot-dedupe-<group>.sqlite)"
    )


@dataclass(eq=False)
class _Job:
    """A message sent to a worker process, and what to call when it is answered."""

    seq: int
    message: Any
    payload: Payload
    done: Callable[[], object]  # on the answers thread, once its process finished it
    released: Callable[[], object] | None = None  # when closing abandons it unanswered
    deaths: int = 0  # times its process died while it was the one running


class _Slot:
    """One worker process, its pipe, and the messages sent to it and not answered yet."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.lock = threading.Lock()  # outbox and unanswered
        self.sending = threading.Lock()  # the pipe's write end (held by whoever flushes)
        self.outbox: list[Payload] = []
        self.unanswered: dict[int, _Job] = {}  # by seq, in the order first sent
        self.proc: BaseProcess | None = None
        self.conn: Connection | None = None
        self.ahead = 0  # messages sent to the process and not answered yet
        self.sends = 0  # pipe writes of messages (under ``sending``)
        self.sent = 0  # messages in them


class ProcessRunner:
    """``runner(message)`` runs the handler on ``message`` in a worker process and returns when
    it has finished there (a lane's ``process``); ``start`` and ``close`` bound the
    processes' life. Counters go to ``tally`` as the threaded runner's do."""

    def __init__(
        self,
        handler: Handler,
        *,
        group: str,
        store: StoreSpec,
        processes: int,
        max_attempts: int,
        retry_backoff_s: float,
        on_failure: FailureHook | None,
        tally: Tally,
        name: str = "lagpilot-worker",
    ) -> None:
        self._settings = ChildSettings(
            pickled_handler(handler), group, store, max_attempts, retry_backoff_s
        )
        self._max_attempts = max_attempts
        self._on_failure = on_failure
        self._tally = tally
        self._name = name
        self._ctx = multiprocessing.get_context("spawn")
        self._slots = [_Slot(i) for i in range(processes)]
        self._seq = itertools.count()
        self._started = False
        self._closed = False

    @property
    def processes(self) -> int:
        return len(self._slots)

    def pids(self) -> list[int | None]:
        """The worker processes' ids, one per slot (None while one is being started)."""
        return [s.proc.pid if s.proc is not None else None for s in self._slots]

    def batching(self) -> tuple[int, int]:
        """(pipe writes, messages sent in them) so far, over every worker process."""
        return sum(s.sends for s in self._slots), sum(s.sent for s in self._slots)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start every worker process and wait until each imported the handler and opened
        the store; raise ``WorkerProcessError`` (naming why) if one cannot."""
        launched = [(slot, *self._launch(slot)) for slot in self._slots]
        try:
            for slot, proc, conn in launched:
                self._await_ready(proc, conn)
                slot.proc, slot.conn = proc, conn
        except BaseException:
            for _slot, proc, conn in launched:
                proc.kill()
                conn.close()
            raise
        self._started = True
        for slot in self._slots:
            threading.Thread(
                target=self._receive, args=(slot,), name=f"{self._name}-answers-{slot.index}",
                daemon=True,
            ).start()  # fmt: skip

    def close(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Stop the worker processes (each ends after its running message, or is killed
        after ``timeout_s``). Messages still waiting for an answer are abandoned: call this
        after the worker closed its partitions, which leaves their offsets uncommitted."""
        if self._closed:
            return
        self._closed = True
        for slot in self._slots:
            if slot.conn is None:
                continue
            if slot.sending.acquire(timeout=timeout_s):
                try:
                    slot.conn.send(None)
                except OSError:
                    pass  # already gone
                finally:
                    slot.sending.release()
        for slot in self._slots:
            if slot.proc is not None:
                slot.proc.join(timeout_s)
                if slot.proc.is_alive():
                    log.warning("worker process %s did not stop in %g s: killed",
                                slot.proc.pid, timeout_s)  # fmt: skip
                    slot.proc.kill()
                    slot.proc.join(timeout_s)
            with slot.lock:
                jobs = list(slot.unanswered.values())
                slot.unanswered.clear()
                slot.outbox.clear()
            for job in jobs:
                if job.released is not None:
                    job.released()
            if slot.conn is not None:
                slot.conn.close()

    # -- a lane's calls ------------------------------------------------------------------------

    def send(self, message: Any, done: Callable[[], object]) -> None:
        """Run the handler on ``message`` in its key's worker process; ``done()`` is called
        (on this runner's answers thread, after the counters and ``on_failure``) once it
        finished there, and never if the runner closes first."""
        self._send(message, done, None)

    def __call__(self, message: Any) -> None:
        """``send``, waiting for the answer (or for ``close``) on the calling thread."""
        answered = threading.Event()
        self._send(message, answered.set, answered.set)
        answered.wait()

    def _send(
        self, message: Any, done: Callable[[], object], released: Callable[[], object] | None
    ) -> None:
        if not self._started:
            raise WorkerProcessError(
                f"{message!r} reached the process runner before start()", retriable=True
            )
        if self._closed:  # abandoned, as every unanswered message is when closing
            if released is not None:
                released()
            return
        slot = self._slots[lane_for(message.key(), message.offset(), len(self._slots))]
        seq = next(self._seq)
        job = _Job(seq, message, payload(seq, message), done, released)
        with slot.lock:
            slot.unanswered[seq] = job
            slot.outbox.append(job.payload)
        if self._closed:  # closed meanwhile: close() may have collected before this was added
            if released is not None:
                released()
            return
        self._flush(slot)

    def _settle(self, job: _Job, counts: dict[str, int], failure: BaseException | None) -> None:
        """A message finished in its process (or was given up on): count, report, go on."""
        for name, n in counts.items():
            self._tally.count(name, n)
        if failure is not None and self._on_failure is not None:
            try:
                self._on_failure(job.message, failure)
            except Exception:
                log.exception("on_failure raised for %r", job.message)
        try:
            job.done()
        except Exception:
            log.exception("going on after %r raised", job.message)

    def _flush(self, slot: _Slot) -> None:
        """Send the slot's outbox in one write once fewer than ``AHEAD`` of its process's
        messages are unanswered: what the lanes queue while it runs one goes together, and
        it never waits for the pipe (its next message is already there). Whoever holds the pipe
        sends; each caller checks again after letting go, so nothing sendable is left
        behind while no one holds it (the answers thread calls this after every answer)."""
        while slot.sending.acquire(blocking=False):
            try:
                while True:
                    with slot.lock:
                        if slot.ahead >= AHEAD or not slot.outbox:
                            break
                        batch, slot.outbox = slot.outbox, []
                        slot.ahead += len(batch)
                    assert slot.conn is not None
                    try:
                        slot.conn.send(batch)
                        slot.sends += 1
                        slot.sent += len(batch)
                    except OSError:
                        # the process died: these are unanswered, and its restart sends them
                        break
            finally:
                slot.sending.release()
            with slot.lock:
                if slot.ahead >= AHEAD or not slot.outbox:
                    return

    # -- answers and restarts (a thread per worker process) -------------------------------------

    def _receive(self, slot: _Slot) -> None:
        while not self._closed:
            conn = slot.conn
            assert conn is not None
            try:
                answer = conn.recv()
            except (EOFError, OSError):
                if self._closed:
                    return
                self._revive(slot)
                continue
            if answer[0] != DONE:
                continue
            _, seq, counts, failure = answer
            with slot.lock:
                job = slot.unanswered.pop(seq, None)
                slot.ahead -= 1
                more = bool(slot.outbox)
            if job is not None:
                self._settle(job, counts, failure)
            if more:
                self._flush(slot)

    def _revive(self, slot: _Slot) -> None:
        """The slot's process died: report it, start another, send it the unanswered messages
        (the one that was running first)."""
        assert slot.proc is not None
        slot.proc.join(1.0)
        pid, code = slot.proc.pid, slot.proc.exitcode
        self._tally.count("process_died")
        with slot.lock:
            jobs = sorted(slot.unanswered.values(), key=lambda j: j.seq)
        log.error(
            "worker process %s (%d of %d) died (exit code %s): starting another; its %d "
            "unanswered messages run again", pid, slot.index + 1, len(self._slots), code, len(jobs),
        )  # fmt: skip
        if jobs:
            self._blame(slot, jobs[0], pid, code)
        backoff_s = 0.5
        while not self._closed:
            try:
                with slot.sending:
                    proc, conn = self._launch(slot)
                    self._await_ready(proc, conn)
                    old, slot.proc, slot.conn = slot.conn, proc, conn
                    if old is not None:
                        old.close()
                    with slot.lock:
                        slot.outbox.clear()  # every queued message is among the unanswered
                        resend = [j.payload for j in slot.unanswered.values()]
                        slot.ahead = len(resend)
                    if resend:
                        conn.send(resend)
            except (WorkerProcessError, OSError) as exc:
                log.error("starting worker process %d again failed, retried in %g s: %s",
                          slot.index + 1, backoff_s, exc)  # fmt: skip
                time.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, 10.0)
                continue
            self._tally.count("process_restarted")
            self._flush(slot)  # what lanes queued while the pipe was held
            return

    def _blame(self, slot: _Slot, job: _Job, pid: int | None, code: int | None) -> None:
        """The oldest unanswered message was the one running when the process died (a process
        runs what it is sent in order): after ``max_attempts`` such deaths it is given up on,
        as a handler that keeps raising is."""
        job.deaths += 1
        if job.deaths < self._max_attempts:
            return
        with slot.lock:
            slot.unanswered.pop(job.seq, None)
        log.warning("giving up on %r: its worker process died %d times running it",
                    job.message, job.deaths)  # fmt: skip
        failure = WorkerProcessError(
            f"worker process {pid} died (exit code {code}) running this message, "
            f"{job.deaths} times",
            retriable=False,
        )
        self._settle(job, {"failed": 1}, failure)

    def _launch(self, slot: _Slot) -> tuple[BaseProcess, Connection]:
        ours, theirs = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(
            target=child_main, args=(theirs, self._settings),
            name=f"{self._name}-{slot.index + 1}", daemon=True,
        )  # fmt: skip
        proc.start()
        theirs.close()  # so the process's death reads as the end of the pipe here
        return proc, ours

    def _await_ready(self, proc: BaseProcess, conn: Connection) -> None:
        try:
            ready = conn.poll(START_TIMEOUT_S)
            answer = conn.recv() if ready else None
        except (EOFError, OSError):
            proc.join(1.0)
            raise WorkerProcessError(
                f"worker process {proc.pid} exited while starting (exit code {proc.exitcode}); "
                "its stderr says why. A script that starts a worker in process mode must do "
                "so under `if __name__ == '__main__':` (each process imports it again)",
                retriable=False,
            ) from None
        if answer is None:
            proc.kill()
            raise WorkerProcessError(
                f"worker process {proc.pid} was not ready in {START_TIMEOUT_S:g} s (importing "
                "the handler's module, opening the dedupe store)",
                retriable=True,
            )
        if answer[0] == ERROR:
            proc.join(1.0)
            raise WorkerProcessError(
                f"worker process {proc.pid} could not start: {answer[1]}", retriable=False
            )
