"""How the poll thread obeys a control command (a part of the ``Engine``, shared by
``Worker`` and ``PoolWorker``): a workload halt pauses processing, an actions halt undoes
lagpilot's spreads and refuses new ones, resume lifts them, and a partition-level command
(spread, restore, hand-off) goes to the engine's ``_apply``. What each instance did is said
on the outcomes topic (docs/events.md, ``worker_outcome``). With tracing on, obeying is a
span that continues the action's trace.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

from actuators.workers.control import Command, ControlReader
from actuators.workers.handling import Tally
from actuators.workers.lanes import LaneExecutor, TopicPart
from actuators.workers.outcomes import HALTED, RESUMED, OutcomeReporter, worker_outcome
from runtime import tracing
from schemas import ActionType
from schemas.halts import ACTIONS, WORKLOAD

log = logging.getLogger("actuators.workers.engine")


class Obeying:
    """The commands part of the engine. It owns the actions halts in force
    (``actions_halts``); the rest it is given. The control reader, the outcome reporter and
    the instance id are asked for at each use: the engine sets them when it connects, after
    this part is built. ``apply`` and ``restore_all`` are the engine's hooks."""

    def __init__(
        self,
        *,
        kind: str,
        group: str,
        host: str,
        dispatcher: LaneExecutor,
        default_lanes: int,
        assigned: set[TopicPart],
        tally: Tally,
        apply: Callable[[Command], None],
        restore_all: Callable[[], None],
        control: Callable[[], ControlReader | None],
        reporter: Callable[[], OutcomeReporter | None],
        instance_id: Callable[[], str],
    ) -> None:
        self._kind = kind
        self._group = group
        self._host = host
        self._dispatcher = dispatcher
        self._default_lanes = default_lanes
        self._assigned = assigned  # the engine's set, read as it changes
        self._tally = tally
        self._apply = apply
        self._restore_all = restore_all
        self._control = control
        self._reporter = reporter
        self._instance_id = instance_id
        # actions halts in force for this group (state keys): spreads restored and refused
        self.actions_halts: set[str] = set()

    def obey(self, cmd: Command) -> None:
        if not tracing.on():
            self._obey_now(cmd)
            return
        control = self._control()
        parent = control.trace_parents.pop(cmd.action_id, None) if control else None
        attributes = {
            "lagpilot.action_id": cmd.action_id,
            "lagpilot.action_type": cmd.type.value,
            "lagpilot.group": self._group,
            "lagpilot.worker_kind": self._kind,
            "lagpilot.worker_instance": self._instance_id() or None,
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
            self.report(cmd, HALTED)
        elif cmd.type is ActionType.RESUME:
            if cmd.scope_kind == WORKLOAD:
                self._dispatcher.resume()
            elif cmd.scope == ACTIONS:  # lifting the global halt lifts every actions halt
                self.actions_halts.clear()
            else:
                self.actions_halts.discard(cmd.scope or ACTIONS)
            self.report(cmd, RESUMED)
        elif cmd.type is ActionType.SPREAD_PARTITION and self.actions_halts:
            self._tally.count("refused_spread_halted")
            log.info("%s refused %s: halted (%s)", self._kind, cmd, sorted(self.actions_halts))
            return
        else:
            self._apply(cmd)
        self._tally.count(f"obeyed_{cmd.type.value}")

    def restore_lanes(self) -> None:
        """An actions halt: every spread partition back to the default lanes (the engine's
        subclasses also return hand-offs, in their ``_restore_all``)."""
        for tp in list(self._assigned):
            if self._dispatcher.lanes(tp) != self._default_lanes:
                self._dispatcher.set_lanes(tp, self._default_lanes)
                self._tally.count("restored_on_halt")

    @property
    def instance(self) -> str:
        """Who this worker is in its outcome reports: its static membership id, else host:pid."""
        return self._instance_id() or f"{self._host}:{os.getpid()}"

    def report(self, cmd: Command, did: str, tp: TopicPart | None = None, **detail: Any) -> None:
        """Say on the outcomes topic what this instance did with ``cmd`` (docs/events.md)."""
        reporter = self._reporter()
        if reporter is None:
            return
        reporter.report(
            worker_outcome(
                action_id=cmd.action_id,
                action_type=cmd.type.value,
                did=did,
                group=self._group,
                instance=self.instance,
                host=self._host,
                now_ms=int(time.time() * 1000),
                topic=tp[0] if tp else None,
                partition=tp[1] if tp else None,
                **detail,
            )
        )
        self._tally.count(f"reported_{did}")
