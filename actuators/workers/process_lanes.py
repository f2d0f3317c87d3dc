"""The lanes of a worker in process mode: ``LaneExecutor``'s routing, order, commits and
closing, with each lane's turn run on the answers of a ``ProcessRunner`` instead of a thread.

A lane's message is sent to its worker process and the lane is left there; when the answer
comes, the runner's answers thread finishes the message as a lane thread would
(``_finished``: the processed prefix advances, the key may move on) and sends the lane's
next message. A thread blocked per running message would cost a thread wake-up and a fight
for the interpreter lock per message, in the process whose CPU the worker processes share.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from actuators.workers.lanes import LaneExecutor, TopicPart
from actuators.workers.processes import ProcessRunner

log = logging.getLogger(__name__)


class _AtOnce:
    """The lanes' "thread pool" in process mode: a lane's turn starts on the calling thread
    (the poll thread or an answers thread), where it only sends a message."""

    threads = 0

    def submit(self, fn: Callable[..., object], *args: Any) -> None:
        fn(*args)

    def pending(self) -> int:
        return 0  # no lane ever waits for a thread

    def shutdown(self) -> None:
        return None  # the runner's close() ends the worker processes


class ProcessLaneExecutor(LaneExecutor):
    """``LaneExecutor`` whose lanes run in ``runner``'s worker processes."""

    def __init__(self, runner: ProcessRunner, *, default_lanes: int, name: str) -> None:
        super().__init__(runner, max_workers=1, default_lanes=default_lanes, name=name)
        self._runner = runner
        self._pool = _AtOnce()  # type: ignore[assignment]
        self._lane = self._send

    def _send(self, tp: TopicPart, part: Any, lane: int, batch: list[Any]) -> None:
        """A lane's turn: its batch's first message goes to the worker process; the rest wait
        in the batch until the answer (one message of a lane at a time, so a halt, a lane
        change or a close stops the lane between two messages, as on a thread)."""
        if batch:
            self._runner.send(batch[0], functools.partial(self._answered, tp, part, lane, batch))

    def _answered(self, tp: TopicPart, part: Any, lane: int, batch: list[Any]) -> None:
        """On the runner's answers thread: the batch's first message finished; the lane goes
        on (``_finished`` puts the rest back at the front of the lane's queue and hands out
        the lane's next batch unless it must stop)."""
        part.done.append(batch[0])
        nxt = self._finished(tp, part, lane, batch, 1, 0.0)
        if nxt:
            self._send(tp, part, lane, nxt)
