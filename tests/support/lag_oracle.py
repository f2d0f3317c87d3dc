"""The per-object lag path: the typed reference the columnar events are checked against.

``TopicObservation.group_events``/``partition_events`` build the ``group_lag`` and
``partition_lag`` events column-wise for every group at once. These two functions build
the same events one group (or one partition) at a time, as the schemas' dataclasses, in
the plainest way: the tests compare the two paths event by event
(``to_dict(summary(obs.view(g), n)) == obs.group_events([g], n)[0]``). The pipeline never
runs this path, so it lives with the tests.
"""

from __future__ import annotations

import numpy as np

from pipeline.model.events import Observation, round3
from pipeline.model.history import SOURCE_NAMES
from pipeline.model.status import STATUS_BY_CODE
from schemas.lag import GroupLag, LagStatus, PartitionLag, WorstPartition


def _r(x: float) -> float:
    """One value rounded as the events round their arrays (``round3``)."""
    return round3(np.array([float(x)]))[0]


def partition_lag(view: Observation, i: int) -> PartitionLag:
    eta = float(view.eta_drain_s[i])
    return PartitionLag(
        group=view.group,
        topic=view.topic,
        partition=int(view.partitions[i]),
        observed_at_ms=view.now_ms,
        committed_offset=int(view.committed[i]),
        high_watermark=int(view.high_watermark[i]),
        lag_offsets=int(view.lag[i]),
        lag_rate_per_s=_r(view.lag_rate_per_s[i]),
        lag_accel_per_s2=_r(view.lag_accel_per_s2[i]),
        produce_rate_per_s=_r(view.produce_rate_per_s[i]),
        consume_rate_per_s=_r(view.consume_rate_per_s[i]),
        time_lag_s=_r(view.time_lag_s[i]),
        time_lag_source=SOURCE_NAMES[int(view.time_lag_source[i])],
        eta_drain_s=None if np.isnan(eta) else _r(eta),
        status=STATUS_BY_CODE[int(view.status[i])],
        last_commit_ms=int(view.last_commit_ms[i]),
        leader=int(view.leaders[i]),
        group_type=view.group_type,
    )


def summary(view: Observation, worst_n: int) -> GroupLag:
    n = len(view.partitions)
    order = np.lexsort((-view.time_lag_s, -view.status.astype(np.int64)))[:worst_n]
    worst = tuple(
        WorstPartition(
            partition=int(view.partitions[i]),
            lag_offsets=int(view.lag[i]),
            time_lag_s=_r(view.time_lag_s[i]),
            lag_rate_per_s=_r(view.lag_rate_per_s[i]),
            lag_accel_per_s2=_r(view.lag_accel_per_s2[i]),
            produce_rate_per_s=_r(view.produce_rate_per_s[i]),
            consume_rate_per_s=_r(view.consume_rate_per_s[i]),
            status=STATUS_BY_CODE[int(view.status[i])],
            leader=int(view.leaders[i]),
        )
        for i in order
    )
    return GroupLag(
        group=view.group,
        topic=view.topic,
        observed_at_ms=view.now_ms,
        status=STATUS_BY_CODE[int(view.status.max())] if n else LagStatus.OK,
        total_lag_offsets=int(view.lag.sum()),
        max_time_lag_s=_r(view.time_lag_s.max()) if n else 0.0,
        lag_rate_per_s=_r(view.lag_rate_per_s.sum()),
        partitions=n,
        topic_partitions=view.topic_partitions,
        worst=worst,
        group_type=view.group_type,
    )
