"""Worker progress in the lag model: SDK workers' processed positions, judged at every sample.

Commits are the only progress signal a plain consumer gives, so a stall shows only once
its next commit is overdue: 1.5 x its commit interval (7.5 s for Kafka's 5 s auto-commit).
SDK workers (``actuators.workers``) also publish, every sampling tick, each partition's
processed position and when it last advanced (``schemas/progress.v1.json``); the commits
source forwards the latest report per group-partition to the model with the commits. This
module keeps those reports per topic and, where a fresh one exists, replaces the inputs of
the status rules (``lag.classify``) for that group-partition:

- ``lag`` (is data waiting?): HWM - the processed position (or the committed offset, if
  a commit went further since the report);
- ``since_progress_s``: how long the processed position had not moved when the worker
  reported, plus the report's *silence* (below);
- ``time_lag_s``: how long the oldest unprocessed message had waited when the worker
  reported, plus the silence;
- ``since_commit_s`` (the STALL rule's "still alive"): the report's age, so a worker that
  keeps reporting but does not advance is STALL, and one that stopped reporting is STOP;
- ``interval_s`` (the usual progress interval the rules scale with): the worker's usual
  time per processed message, learned from its reports, not its commit cadence;
- the lag-growth inputs are disabled there: between commits the committed lag grows by
  design, and the processed position already says whether the worker keeps up.

Everything is measured as of the report, not as of the sample: a report is up to one
reporting interval old when the next sample is modelled, and a healthy worker must not
look stalled for that. Only silence beyond two intervals and a grace counts (a worker that
stops reporting while data waits: a hung or dead process): two reports may be missed (on a
loaded host, one missed report in the benchmark raised false alarms), so a late report
costs detection time, never a false alarm. Workers time their reports just
before the sampler's ticks (both on the wall-clock grid of the interval), so the sample
after a report sees it.

Pure: no clock (``now_ms`` passed in), no Kafka. Reports are not persisted: they are
replaced every tick, and a restarted model falls back to commits until the next report.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, slots=True)
class ProgressConfig:
    """Knobs of the progress overlay; see docs/lag-model.md."""

    # silence allowed before it counts: this many reports may be missed (a busy host, a
    # report that just missed its sample), plus a grace for delivery jitter
    missed_reports: int = 2
    grace_s: float = 0.05
    # WARN floor on "no progress" where a report judges (LagConfig.warn_min_s, 0.15, is for
    # commits, whose timing carries the coordinator's and the client's jitter; a report
    # stamps the worker's own progress to the millisecond)
    warn_min_s: float = 0.1
    expire_s: float = 60.0  # a report this old is dropped: commits judge the partition again
    gap_alpha: float = 0.3  # EWMA weight of the newest time-per-message sample


@dataclass(slots=True)
class Report:
    """The latest report of one group-partition (times in epoch ms, the worker's clock)."""

    processed: int
    progress_ms: int
    sent_at_ms: int
    interval_ms: int
    member: str
    host: str
    gap_s: float = math.nan  # usual time per processed message (nan: not learned yet)


class WorkerProgress:
    """The latest progress report per (group, partition) of one topic."""

    def __init__(self, cfg: ProgressConfig | None = None) -> None:
        self.cfg = cfg or ProgressConfig()
        self.reports: dict[tuple[str, int], Report] = {}
        self.skipped = 0  # malformed rows, counted and ignored

    def __len__(self) -> int:
        return len(self.reports)

    def report_many(self, rows: list[Any]) -> None:
        """Apply ``[group, partition, processed, progress_ms, sent_at_ms, interval_ms,
        member, host]`` rows; older reports than the one held change nothing; a processed
        offset of -1 releases the partition (its worker gave it up)."""
        a = self.cfg.gap_alpha
        for row in rows:
            try:
                group, partition, processed, progress_ms, sent_ms, interval_ms, member, host = row
                key = (str(group), int(partition))
                processed, progress_ms, sent_ms = int(processed), int(progress_ms), int(sent_ms)
                interval_ms = max(1, int(interval_ms))
            except (TypeError, ValueError):
                self.skipped += 1
                continue
            prev = self.reports.get(key)
            if prev is not None and sent_ms < prev.sent_at_ms:
                continue  # a replay
            if processed < 0:
                self.reports.pop(key, None)
                continue
            gap = math.nan if prev is None else prev.gap_s
            if prev is not None and processed > prev.processed and progress_ms > prev.progress_ms:
                sample = (progress_ms - prev.progress_ms) / 1000.0 / (processed - prev.processed)
                gap = sample if math.isnan(gap) else (1 - a) * gap + a * sample
            self.reports[key] = Report(
                processed, progress_ms, sent_ms, interval_ms, str(member), str(host), gap
            )

    def forget(self, group: str, partition: int | None = None) -> None:
        """Drop a group-partition's report (offset deleted), or all of a group's."""
        for key in [k for k in self.reports if k[0] == group and partition in (None, k[1])]:
            del self.reports[key]

    def expire(self, now_ms: int) -> None:
        horizon = now_ms - int(self.cfg.expire_s * 1000)
        for key in [k for k, r in self.reports.items() if r.sent_at_ms < horizon]:
            del self.reports[key]

    def overlay(
        self,
        inputs: dict[str, np.ndarray],
        *,
        index: dict[str, int],
        t_ms: np.ndarray,
        hw: np.ndarray,
        now_ms: int,
    ) -> dict[str, np.ndarray]:
        """``inputs`` of ``classify`` (group x partition arrays) with the cells that have a
        report replaced as the module docstring says; the arrays given are not modified."""
        from pipeline.model.history import time_lag_s

        self.expire(now_ms)
        width = hw.shape[1] if hw.ndim == 2 else 0
        cells = [
            (index[g], p, r)
            for (g, p), r in self.reports.items()
            if g in index and p < width and len(t_ms)
        ]
        if not cells:
            return inputs
        out = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in inputs.items()}
        gi = np.fromiter((c[0] for c in cells), np.intp, len(cells))
        pi = np.fromiter((c[1] for c in cells), np.intp, len(cells))
        reports = [c[2] for c in cells]
        # what the worker reported, or what the group committed since, if that is further
        hw_now = hw[-1, pi]
        processed = np.maximum(
            np.array([r.processed for r in reports], np.int64), hw_now - inputs["lag"][gi, pi]
        )
        sent = np.array([r.sent_at_ms for r in reports], np.int64)
        progress = np.array([r.progress_ms for r in reports], np.int64)
        interval = np.array([r.interval_ms for r in reports], np.float64) / 1000.0
        gap = np.array([r.gap_s for r in reports], np.float64)

        # the time lag of each processed position, one row per group (cells are unique)
        rows, row_of = np.unique(gi, return_inverse=True)
        c2 = np.full((len(rows), width), -1, np.int64)
        c2[row_of, pi] = processed
        tl_now = time_lag_s(t_ms, hw, c2, now_ms)[0][row_of, pi]
        age_s = (now_ms - sent) / 1000.0
        allowed = (1 + self.cfg.missed_reports) * interval + self.cfg.grace_s
        silence = np.maximum(0.0, age_s - allowed)
        tl_report = np.maximum(0.0, tl_now - age_s)
        stuck_report = np.maximum(0, sent - progress) / 1000.0

        out["lag"][gi, pi] = np.maximum(hw_now - processed, 0)
        out["time_lag"][gi, pi] = tl_report + silence
        out["since_progress_s"][gi, pi] = stuck_report + silence
        out["since_commit_s"][gi, pi] = np.maximum(age_s, 0.0)
        out["interval_s"][gi, pi] = np.where(np.isnan(gap), interval, gap)
        if isinstance(out.get("warn_min_s"), np.ndarray):  # per cell: set where reports judge
            out["warn_min_s"][gi, pi] = self.cfg.warn_min_s
        if out.get("lag_rate") is not None:
            out["lag_rate"][gi, pi] = 0.0
        if out.get("recent_lag_rate") is not None:
            out["recent_lag_rate"][gi, pi] = np.nan
        return out

    def annotate(self, events: list[dict[str, Any]], now_ms: int) -> None:
        """Add ``worker`` (member, host, processed offset, report age) to the
        ``partition_lag`` events of partitions a worker reports: a silent worker is named."""
        for ev in events:
            r = self.reports.get((ev["group"], ev["partition"]))
            if r is not None:
                ev["worker"] = {
                    "member": r.member,
                    "host": r.host,
                    "processed_offset": r.processed,
                    "report_age_s": round((now_ms - r.sent_at_ms) / 1000.0, 3),
                }

    def reporters(self, index: dict[str, int]) -> dict[tuple[int, int], tuple[str, str]]:
        """(group row, partition) -> (member, host) of the worker that reports it."""
        return {
            (index[g], p): (r.member, r.host) for (g, p), r in self.reports.items() if g in index
        }
