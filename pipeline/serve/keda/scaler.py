"""The scaler's state: the lag view and one ``Decision`` per ScaledObject, thread-safe.

No I/O here: the reader thread calls ``on_event`` with each decoded lag event, the
membership poller ``set_consumers``, and the gRPC handlers ask ``is_active``, ``metric``
and ``watch``. A ScaledObject is known by ``namespace/name`` and its metadata; when it is
first seen (or its metadata changed, or the scaler restarted) its decision is rebuilt by
replaying the summaries the view holds, so two replicas, or one restarted, answer alike.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Mapping
from typing import Any

from pipeline.serve.keda.metadata import ScalerSpec
from pipeline.serve.keda.rules import Decision, metric_value, step
from pipeline.serve.keda.view import GroupKey, LagView

log = logging.getLogger("lagpilot.scaler")

Observer = Callable[[str, Decision, bool | None], None]


class Scaler:
    def __init__(self, view: LagView | None = None, observer: Observer | None = None) -> None:
        self.view = view or LagView()
        self.decisions: dict[str, Decision] = {}
        self.watchers: dict[str, list[queue.Queue[bool]]] = {}
        self.consumers: dict[GroupKey, int | None] = {}
        self.observer = observer
        self._lock = threading.Lock()

    # -- inputs ---------------------------------------------------------------------------

    def on_event(self, ev: Mapping[str, Any]) -> None:
        with self._lock:
            s = self.view.apply(ev)
            if s is None:
                return
            key = (s.group, s.topic)
            for so, d in self.decisions.items():
                if (d.spec.group, d.spec.topic) != key:
                    continue
                parts = self.view.partition_rates(key)
                push = step(d, s, parts, self.consumers.get(key), s.observed_at_ms)
                self._observe(so, d, push)
                if push is not None:
                    for q in self.watchers.get(so, ()):
                        q.put(push)

    def set_consumers(self, key: GroupKey, n: int | None) -> None:
        with self._lock:
            self.consumers[key] = n

    def served(self) -> set[GroupKey]:
        with self._lock:
            return {(d.spec.group, d.spec.topic) for d in self.decisions.values()}

    # -- what the gRPC handlers ask -----------------------------------------------------------

    def decision(self, so: str, spec: ScalerSpec) -> Decision:
        """The ScaledObject's decision, rebuilt from the view when new or changed."""
        with self._lock:
            return self._decision(so, spec)

    def _decision(self, so: str, spec: ScalerSpec) -> Decision:
        d = self.decisions.get(so)
        if d is not None and d.spec == spec:
            return d
        d = Decision(spec)
        key = (spec.group, spec.topic)
        parts = self.view.partition_rates(key)
        for s in self.view.history(key):
            step(d, s, parts, self.consumers.get(key), s.observed_at_ms)
        self.decisions[so] = d
        self._observe(so, d, None)
        replayed = len(self.view.history(key))
        log.info("serving %s: %s (%d summaries replayed)", so, spec, replayed)
        if not replayed:
            log.warning(
                "%s: no lag events of group %r on topic %r yet: inactive until there are (is "
                "the group committing, and does the pipeline watch the topic?)",
                so, spec.group, spec.topic,
            )  # fmt: skip
        return d

    def is_active(self, so: str, spec: ScalerSpec) -> bool:
        with self._lock:
            return bool(self._decision(so, spec).activity.active)

    def metric(self, so: str, spec: ScalerSpec) -> float:
        with self._lock:
            return metric_value(self._decision(so, spec))

    def watch(self, so: str, spec: ScalerSpec) -> tuple[queue.Queue[bool], bool]:
        """A queue that receives each pushed value, and the value to send at once."""
        q: queue.Queue[bool] = queue.Queue()
        with self._lock:
            d = self._decision(so, spec)
            self.watchers.setdefault(so, []).append(q)
            return q, bool(d.activity.active)

    def unwatch(self, so: str, q: queue.Queue[bool]) -> None:
        with self._lock:
            qs = self.watchers.get(so, [])
            if q in qs:
                qs.remove(q)

    def _observe(self, so: str, d: Decision, push: bool | None) -> None:
        if self.observer is not None:
            self.observer(so, d, push)
