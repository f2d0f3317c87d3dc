"""How the poll thread obeys a control command (the ``Engine``'s side, shared by ``Worker``
and ``PoolWorker``): a workload halt pauses processing, an actions halt undoes lagpilot's
spreads and refuses new ones, resume lifts them, and a partition-level command (spread,
restore, hand-off) goes to the subclass's ``_apply``. What each instance did is said on the
outcomes topic (docs/events.md, ``worker_outcome``). With tracing on, obeying is a span
that continues the action's trace.
"""

from __future__ import annotations

import abc
import logging
import os
import time
from typing import Any

from actuators.workers.control import Command, ControlReader
from actuators.workers.lanes import LaneExecutor, TopicPart
from actuators.workers.outcomes import HALTED, RESUMED, OutcomeReporter, worker_outcome
from runtime import tracing
from schemas import ActionType
from schemas.halts import ACTIONS, WORKLOAD

log = logging.getLogger("actuators.workers.engine")


class Obeying:
    """The commands half of the engine; the engine holds the state it reads."""

    kind: str
    group: str
    actions_halts: set[str]
    _assigned: set[TopicPart]
    _default_lanes: int
    _dispatcher: LaneExecutor
    _control: ControlReader | None
    _reporter: OutcomeReporter | None
    _host: str

    @abc.abstractmethod
    def _apply(self, cmd: Command) -> None:
        """The engine's subclasses implement it."""

    @abc.abstractmethod
    def _count(self, name: str, n: int = 1) -> None:
        """The engine's tally."""

    def _obey(self, cmd: Command) -> None:
        if not tracing.on():
            self._obey_now(cmd)
            return
        parent = self._control.trace_parents.pop(cmd.action_id, None) if self._control else None
        attributes = {
            "lagpilot.action_id": cmd.action_id,
            "lagpilot.action_type": cmd.type.value,
            "lagpilot.group": self.group,
            "lagpilot.worker_kind": self.kind,
            "lagpilot.worker_instance": getattr(self, "instance_id", None) or None,
            "lagpilot.topic": cmd.topic,
            "lagpilot.partition": cmd.partition,
            "lagpilot.lanes": cmd.lanes,
            # every worker of the group obeys; the partition's owner acts on it now
            "lagpilot.owner": None
            if cmd.topic is None or cmd.partition is None
            else (cmd.topic, cmd.partition) in self._assigned,
        }
        with tracing.span("lagpilot.worker.obey", parent=parent, attributes=attributes):
            self._obey_now(cmd)

    def _obey_now(self, cmd: Command) -> None:
        if cmd.type is ActionType.HALT:
            if cmd.scope_kind == WORKLOAD:  # pause processing, explicitly
                self._dispatcher.halt()
            else:  # lagpilot stops acting: undo its spreads, keep processing
                self.actions_halts.add(cmd.scope or ACTIONS)
                self._restore_all()
            self._report(cmd, HALTED)
        elif cmd.type is ActionType.RESUME:
            if cmd.scope_kind == WORKLOAD:
                self._dispatcher.resume()
            elif cmd.scope == ACTIONS:  # lifting the global halt lifts every actions halt
                self.actions_halts.clear()
            else:
                self.actions_halts.discard(cmd.scope or ACTIONS)
            self._report(cmd, RESUMED)
        elif cmd.type is ActionType.SPREAD_PARTITION and self.actions_halts:
            self._count("refused_spread_halted")
            log.info("%s refused %s: halted (%s)", self.kind, cmd, sorted(self.actions_halts))
            return
        else:
            self._apply(cmd)
        self._count(f"obeyed_{cmd.type.value}")

    def _restore_all(self) -> None:
        """An actions halt: every spread partition back to the default lanes (subclasses also
        return hand-offs)."""
        for tp in list(self._assigned):
            if self._dispatcher.lanes(tp) != self._default_lanes:
                self._dispatcher.set_lanes(tp, self._default_lanes)
                self._count("restored_on_halt")

    @property
    def instance(self) -> str:
        """Who this worker is in its outcome reports: its static membership id, else host:pid."""
        return getattr(self, "instance_id", "") or f"{self._host}:{os.getpid()}"

    def _report(self, cmd: Command, did: str, tp: TopicPart | None = None, **detail: Any) -> None:
        """Say on the outcomes topic what this instance did with ``cmd`` (docs/events.md)."""
        if self._reporter is None:
            return
        self._reporter.report(
            worker_outcome(
                action_id=cmd.action_id,
                action_type=cmd.type.value,
                did=did,
                group=self.group,
                instance=self.instance,
                host=self._host,
                now_ms=int(time.time() * 1000),
                topic=tp[0] if tp else None,
                partition=tp[1] if tp else None,
                **detail,
            )
        )
        self._count(f"reported_{did}")
