"""What one tick of the model computed, and the lag events built from it, column-wise.

``TopicObservation`` holds every group's numbers on one topic as (groups x partitions)
arrays; ``group_events`` and ``partition_events`` build the ``group_lag`` and
``partition_lag`` events (their JSON form) straight from those columns. ``Observation`` is
a per-group view of the same arrays, for callers that look at one group.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.model.history import SOURCE_NAMES
from pipeline.model.status import STATUS_BY_CODE
from schemas.lag import LagStatus


def round3(a: np.ndarray) -> list[float]:
    """Floats to 3 decimals as events carry them, rounded as one array (numpy's
    half-to-even of the scaled value; Python's ``round`` per value would be most of a
    tick's event building); a value that rounds to zero is 0.0, never -0.0."""
    return (np.round(np.asarray(a, np.float64), 3) + 0.0).tolist()  # + 0.0: no -0.0


@dataclass
class Observation:
    """Everything one tick computed for one group on one topic (arrays per partition)."""

    group: str
    topic: str
    now_ms: int
    partitions: np.ndarray  # which partitions the group has committed on
    committed: np.ndarray
    high_watermark: np.ndarray
    lag: np.ndarray
    lag_rate_per_s: np.ndarray
    lag_accel_per_s2: np.ndarray
    produce_rate_per_s: np.ndarray
    consume_rate_per_s: np.ndarray
    time_lag_s: np.ndarray
    time_lag_source: np.ndarray  # int8 codes: pipeline.model.history.SOURCE_NAMES
    eta_drain_s: np.ndarray  # nan: not draining
    status: np.ndarray  # int8 codes: SEVERITY
    last_commit_ms: np.ndarray
    leaders: np.ndarray
    topic_partitions: int
    group_type: str = "consumer"  # or "share": a KIP-932 share group


def group_type(group: str, share_groups: frozenset[str]) -> str:
    """The ``group_type`` of an event about ``group``: ``share`` for a share group the commits
    source reported as one, ``consumer`` otherwise (a consumer group of either protocol)."""
    return "share" if group in share_groups else "consumer"


@dataclass
class TopicObservation:
    """One tick of one topic: every group's numbers as (groups x partitions) arrays.

    ``mask`` marks the group-partitions that are modelled (the group committed there, and
    the sampler knows the partition). Indexing gives per-group ``Observation`` views, built
    only for the groups a caller looks at.
    """

    topic: str
    now_ms: int
    groups: list[str]
    mask: np.ndarray
    committed: np.ndarray
    high_watermark: np.ndarray  # (P,)
    lag: np.ndarray
    lag_rate_per_s: np.ndarray
    lag_accel_per_s2: np.ndarray
    produce_rate_per_s: np.ndarray  # (P,)
    consume_rate_per_s: np.ndarray
    time_lag_s: np.ndarray
    time_lag_source: np.ndarray
    eta_drain_s: np.ndarray
    status: np.ndarray
    last_commit_ms: np.ndarray
    leaders: np.ndarray  # (P,)
    topic_partitions: int
    #: the groups on this topic that are share groups (KIP-932); the others are consumer groups
    share_groups: frozenset[str] = frozenset()
    active: np.ndarray = field(init=False)  # groups with at least one modelled partition
    _worst: np.ndarray | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        self.active = np.nonzero(self.mask.any(axis=1))[0] if self.mask.size else np.zeros(0, int)

    def __len__(self) -> int:
        return len(self.active)

    def __getitem__(self, k: int) -> Observation:
        return self.view(int(self.active[k]))

    def __iter__(self) -> Iterator[Observation]:
        return (self.view(int(i)) for i in self.active)

    def group_status(self) -> np.ndarray:
        """Worst status code per group (0 for a group with nothing modelled); computed once
        per observation (the operator and the group events both ask)."""
        if self._worst is None:
            if not self.mask.size:
                self._worst = np.zeros(len(self.groups), np.int8)
            else:
                self._worst = np.where(self.mask, self.status, 0).max(axis=1).astype(np.int8)
        return self._worst

    def view(self, g: int) -> Observation:
        cols = np.nonzero(self.mask[g])[0]
        return Observation(
            group=self.groups[g],
            topic=self.topic,
            now_ms=self.now_ms,
            partitions=cols,
            committed=self.committed[g, cols],
            high_watermark=self.high_watermark[cols],
            lag=self.lag[g, cols],
            lag_rate_per_s=self.lag_rate_per_s[g, cols],
            lag_accel_per_s2=self.lag_accel_per_s2[g, cols],
            produce_rate_per_s=self.produce_rate_per_s[cols],
            consume_rate_per_s=self.consume_rate_per_s[g, cols],
            time_lag_s=self.time_lag_s[g, cols],
            time_lag_source=self.time_lag_source[g, cols],
            eta_drain_s=self.eta_drain_s[g, cols],
            status=self.status[g, cols],
            last_commit_ms=self.last_commit_ms[g, cols],
            leaders=self.leaders[cols],
            topic_partitions=self.topic_partitions,
            group_type=group_type(self.groups[g], self.share_groups),
        )

    def group_events(self, gs: list[int], worst_n: int) -> list[dict[str, Any]]:
        """``group_lag`` events (their JSON form, as ``to_dict(self.view(g).summary(worst_n))``
        gives them) for the groups ``gs``: the worst partitions of every group picked in one
        sort, then only Python for the few values an event holds."""
        if not gs:
            return []
        gi = np.asarray(gs, dtype=np.intp)
        mask = self.mask[gi]
        rows, cols = np.nonzero(mask)  # row-major: by group, then partition
        g_of = gi[rows]
        status = self.status[g_of, cols].astype(np.int64)
        tl = self.time_lag_s[g_of, cols]
        # by group, then status (worst first), then time lag (longest first); a stable sort,
        # so ties keep partition order, as the per-group lexsort of ``summary`` does
        order = np.lexsort((-tl, -status, rows))
        counts = mask.sum(axis=1)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        rank = np.arange(len(order)) - starts[rows[order]]
        pick = order[rank < worst_n]
        pg, pp = g_of[pick], cols[pick]
        worst_cols = zip(
            rows[pick].tolist(),
            pp.tolist(),
            self.lag[pg, pp].tolist(),
            round3(self.time_lag_s[pg, pp]),
            round3(self.lag_rate_per_s[pg, pp]),
            round3(self.lag_accel_per_s2[pg, pp]),
            round3(self.produce_rate_per_s[pp]),
            round3(self.consume_rate_per_s[pg, pp]),
            status[pick].tolist(),
            self.leaders[pp].tolist(),
            strict=True,
        )
        names = [s.value for s in STATUS_BY_CODE]
        worst: list[list[dict[str, Any]]] = [[] for _ in gs]
        for row, part, lag, t, rate, acc, prod, cons, st, leader in worst_cols:
            worst[row].append(
                {
                    "partition": part,
                    "lag_offsets": lag,
                    "time_lag_s": t,
                    "lag_rate_per_s": rate,
                    "lag_accel_per_s2": acc,
                    "produce_rate_per_s": prod,
                    "consume_rate_per_s": cons,
                    "status": names[st],
                    "leader": leader,
                }
            )
        # per group sums over its own partitions, in their order (the same floats as summary)
        rates = np.split(self.lag_rate_per_s[g_of, cols], starts[1:])
        rate_sums = round3(np.array([float(r.sum()) for r in rates]))
        top = self.group_status()[gi].tolist()
        total = np.where(mask, self.lag[gi], 0).sum(axis=1).tolist()
        max_tl = round3(np.where(mask, self.time_lag_s[gi], -np.inf).max(axis=1))
        return [
            {
                "group": self.groups[g],
                "group_type": group_type(self.groups[g], self.share_groups),
                "topic": self.topic,
                "observed_at_ms": self.now_ms,
                "status": names[top[i]] if n else LagStatus.OK.value,
                "total_lag_offsets": total[i],
                "max_time_lag_s": max_tl[i] if n else 0.0,
                "lag_rate_per_s": rate_sums[i],
                "partitions": n,
                "topic_partitions": self.topic_partitions,
                "worst": worst[i],
                "event": "group_lag",
                "v": 2,
            }
            for i, (g, n) in enumerate(zip(gs, counts.tolist(), strict=True))
        ]

    def partition_events(self, g: np.ndarray, p: np.ndarray) -> list[dict[str, Any]]:
        """``partition_lag`` events (their JSON form, as ``to_dict(PartitionLag)`` gives it)
        for the group-partition pairs ``(g[i], p[i])``, built column-wise."""
        if not len(g):
            return []
        eta = self.eta_drain_s[g, p]
        eta_l = round3(np.nan_to_num(eta))
        has_eta = (~np.isnan(eta)).tolist()
        cols = zip(
            [self.groups[i] for i in g.tolist()],
            p.tolist(),
            self.committed[g, p].tolist(),
            self.high_watermark[p].tolist(),
            self.lag[g, p].tolist(),
            round3(self.lag_rate_per_s[g, p]),
            round3(self.lag_accel_per_s2[g, p]),
            round3(self.produce_rate_per_s[p]),
            round3(self.consume_rate_per_s[g, p]),
            round3(self.time_lag_s[g, p]),
            self.time_lag_source[g, p].tolist(),
            eta_l,
            has_eta,
            self.status[g, p].tolist(),
            self.last_commit_ms[g, p].tolist(),
            self.leaders[p].tolist(),
            strict=True,
        )
        names = [s.value for s in STATUS_BY_CODE]
        return [
            {
                "group": grp,
                "group_type": group_type(grp, self.share_groups),
                "topic": self.topic,
                "partition": part,
                "observed_at_ms": self.now_ms,
                "committed_offset": c,
                "high_watermark": h,
                "lag_offsets": lag,
                "lag_rate_per_s": rate,
                "lag_accel_per_s2": acc,
                "produce_rate_per_s": prod,
                "consume_rate_per_s": cons,
                "time_lag_s": tl,
                "time_lag_source": SOURCE_NAMES[how],
                "eta_drain_s": e if ok else None,
                "status": names[st],
                "last_commit_ms": lc,
                "leader": ld,
                "event": "partition_lag",
                "v": 2,
            }
            for grp, part, c, h, lag, rate, acc, prod, cons, tl, how, e, ok, st, lc, ld in cols
        ]
