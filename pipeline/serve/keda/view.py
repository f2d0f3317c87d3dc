"""What the scaler knows of lagpilot's model: the latest lag events, folded (pure).

The scaler reads ``lagpilot.lag`` (the model's output, the same events ``lagpilot status``
prints) and keeps, per (group, topic), the recent ``group_lag`` summaries (to rebuild a
ScaledObject's smoothing by replaying them) and the latest ``partition_lag`` of each
partition. Malformed events are counted and skipped.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import MISSING, fields
from typing import Any

from pipeline.serve.keda.rules import PartitionRates
from schemas import GroupLag, LagStatus, WorstPartition

_GROUP_FIELDS = {f.name for f in fields(GroupLag) if f.init} - {"worst", "status"}
#: fields a v1 event lacks (``group_type``): their defaults stand in
_GROUP_DEFAULTED = {f.name for f in fields(GroupLag) if f.default is not MISSING}
_WORST_FIELDS = {f.name for f in fields(WorstPartition) if f.init} - {"status"}


def summary_from_event(ev: Mapping[str, Any]) -> GroupLag:
    """A ``GroupLag`` from a ``group_lag`` event, reading only the fields the scaler knows:
    a newer pipeline may add optional fields (v1 stays readable); a missing one raises."""
    worst = tuple(
        WorstPartition(**{k: w[k] for k in _WORST_FIELDS if k in w}, status=LagStatus(w["status"]))
        for w in ev.get("worst", ())
    )
    body = {k: ev[k] for k in _GROUP_FIELDS if k in ev or k not in _GROUP_DEFAULTED}
    return GroupLag(**body, status=LagStatus(ev["status"]), worst=worst)


GroupKey = tuple[str, str]


class LagView:
    def __init__(self, history_s: float = 60.0) -> None:
        self.history_ms = int(history_s * 1000)
        self.summaries: dict[GroupKey, deque[GroupLag]] = {}
        self.partitions: dict[GroupKey, dict[int, PartitionRates]] = {}
        self.bad_events = 0

    def apply(self, ev: Mapping[str, Any]) -> GroupLag | None:
        """Fold one event; the summary when it was a new ``group_lag``, else None."""
        kind = ev.get("event")
        try:
            if kind == "group_lag":
                return self._summary(summary_from_event(ev))
            if kind == "partition_lag":
                p = PartitionRates.from_event(ev)
                key = (str(ev["group"]), str(ev["topic"]))
                parts = self.partitions.setdefault(key, {})
                old = parts.get(p.partition)
                if old is None or old.observed_at_ms <= p.observed_at_ms:
                    parts[p.partition] = p
                return None
        except (KeyError, TypeError, ValueError):
            self.bad_events += 1
            return None
        self.bad_events += 1  # another kind of event on the lag topic: not ours to read
        return None

    def _summary(self, s: GroupLag) -> GroupLag | None:
        if not s.group or not s.topic or s.total_lag_offsets < 0:
            raise ValueError("summary without group/topic or with negative lag")
        q = self.summaries.setdefault((s.group, s.topic), deque())
        if q and s.observed_at_ms <= q[-1].observed_at_ms:
            return None  # a replayed or older summary: the newer one stands
        q.append(s)
        while q and q[0].observed_at_ms < s.observed_at_ms - self.history_ms:
            q.popleft()
        return s

    def latest(self, key: GroupKey) -> GroupLag | None:
        q = self.summaries.get(key)
        return q[-1] if q else None

    def history(self, key: GroupKey) -> list[GroupLag]:
        return list(self.summaries.get(key, ()))

    def partition_rates(self, key: GroupKey) -> dict[int, PartitionRates]:
        return self.partitions.get(key, {})
