"""Worker progress in the lag model: SDK workers' processed positions, judged as they land.

Commits are the only progress signal a plain consumer gives, so a stall shows only once
its next commit is overdue: 1.5 x its commit interval (7.5 s for Kafka's 5 s auto-commit).
SDK workers (``actuators.workers``) also publish, every 125 ms, each partition's processed
position, when it last advanced and how many messages they hold
(``schemas/progress.v1.json``); the commits source forwards the latest report per
group-partition to the model with the commits, at once. This module keeps those reports
per topic and, where a fresh one exists, replaces the inputs of the status rules
(``status.classify``) for that group-partition:

- ``lag`` (is data waiting?): HWM - the processed position (or the committed offset, if
  a commit went further since the report), or the messages the worker holds, if more
  (data it fetched after the last sample);
- ``since_progress_s``: how long the processed position had not moved when the worker
  reported, plus the report's *silence* (below);
- ``time_lag_s``: how long the oldest unprocessed message had waited when the worker
  reported (at least ``since_progress_s`` while the worker holds messages), plus the
  silence;
- ``since_commit_s`` (the STALL rule's "still alive"): the report's age, so a worker that
  keeps reporting but does not advance is STALL, and one that stopped reporting is STOP;
- ``interval_s`` (the usual progress interval the rules scale with): the worker's usual
  time per processed message, learned from its reports, not its commit cadence, or its
  usual healthy pause if longer (``WorkerProgress._pause``);
- the lag-growth inputs are disabled there: between commits the committed lag grows by
  design, and the processed position already says whether the worker keeps up.

A partition its worker gave up (a revoke, a loss, its shutdown: the report lists it as
``released``) is owned by no one until another member reports it or a commit moves its
offset: where data waits there, nobody consumes it, and ``classify`` says STOP at once
(the ``released`` input) instead of after the time a dead consumer's silence takes. A
rebalance is then seen for what it is from its first moment, never as a slow partition.
A partition handed to a pool (``handed_off``) is consumed there: commits judge it again.

The samples judge every cell; between them, a report that shows a stalled worker
(``suspects``) is judged the moment it lands (``TopicModel.judge_reports``), so detection
waits for no sampler tick. Everything is measured as of the report, not as of the moment
it is judged, so a healthy worker never looks stalled for a report's age. Only silence
beyond ``missed_reports`` missed reports, one more interval and ``grace_s`` counts (a
worker that stops reporting while data waits: a hung or dead process), so a late report
costs detection time, never a false alarm. Workers also time their reports just before the
sampler's ticks (both on the wall-clock grid), so a sample finds them fresh.

Pure: no clock (``now_ms`` passed in), no Kafka. Reports are not persisted: they are
replaced every tick, and a restarted model falls back to commits until the next report.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # status imports config, which imports this module
    from pipeline.model.status import StatusInputs


@dataclass(frozen=True, slots=True)
class ProgressConfig:
    """Knobs of the progress overlay (``LAGPILOT_PROGRESS_*``, pipeline/settings.py); see
    docs/lag-model.md."""

    # WARN floor on "no progress" where a report judges: how long a healthy worker may go
    # without advancing while data waits. It sits above the pauses a busy host gives a
    # healthy process (GC, scheduling), so they raise no alarm; detection pays it once.
    warn_min_s: float = 0.15
    # ...and where another partition of the same worker advanced at least this long after
    # this one last did: the process ran meanwhile, so this partition's own work is what is
    # slow (a heavy message, a hung handler), never a pause of the process (in a pause no
    # partition advances); a lower floor lets one heavy message be seen while it runs
    moving_worker_min_s: float = 0.1
    # ...and where every partition of a worker (two at least) paused at once: most often the
    # process (GC, a starved host), not a stall (see WorkerProgress._whole_worker)
    whole_worker_min_s: float = 0.4
    # ...and the STALL/STOP floor there (LagConfig.stop_min_s elsewhere): a starved host can
    # pause a whole process for longer than stop_min_s, but a worker frozen for a second is
    # error-level
    whole_worker_stop_s: float = 1.0
    # silence allowed before it counts (a worker that stops reporting: hung or dead): this
    # many reports may be missed, plus a grace for a reporter thread that wakes late
    missed_reports: int = 2
    grace_s: float = 0.4
    expire_s: float = 60.0  # a report this old is dropped: commits judge the partition again
    gap_alpha: float = 0.3  # EWMA weight of the newest time-per-message sample
    # the usual pause of a healthy worker (a report that showed every partition holding
    # work, two at least, not advancing at once, below the WARN threshold, and the next
    # report showed it moving again),
    # kept as a maximum that halves every pause_half_life_s: part of its usual interval
    pause_half_life_s: float = 60.0


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
    in_flight: int = 0  # messages the worker holds, delivered and not finished
    pause_s: float = 0.0  # longest healthy pause seen lately (decaying; see ProgressConfig)

    def usual_s(self) -> float:
        """How long this worker usually goes between advances: its time per message or
        its usual healthy pause, whichever is longer (0 while neither is known)."""
        return max(0.0 if math.isnan(self.gap_s) else self.gap_s, self.pause_s)


def whole_pause_s(since_progress_s: list[float], holding: list[bool]) -> float | None:
    """How long a whole worker has not advanced, from one report of its partitions: the
    shortest time since any of them advanced (an idle partition advanced long ago and
    shortens nothing; one that just finished a message shows the process running). None
    unless two or more partitions hold work: one partition alone is no evidence that
    the process, not its work, paused."""
    if sum(holding) < 2:
        return None
    return min(since_progress_s)


def moved_since(progress_ms: np.ndarray, gap_ms: float) -> np.ndarray:
    """Per partition of one worker (when each last advanced, the worker's clock): did
    another of them advance at least ``gap_ms`` after this one last did? Then the process
    ran while this partition did not move."""
    if len(progress_ms) < 2:
        return np.zeros(len(progress_ms), bool)
    order = np.argsort(-progress_ms, kind="stable")
    others = np.full(len(progress_ms), progress_ms[order[0]])
    others[order[0]] = progress_ms[order[1]]  # the latest partition's others exclude itself
    return others >= progress_ms + gap_ms


def _by_member(reports: list[Report]) -> list[list[int]]:
    """The indexes of ``reports``, grouped by the worker (member) that sent them."""
    cells: dict[str, list[int]] = {}
    for i, r in enumerate(reports):
        cells.setdefault(r.member, []).append(i)
    return list(cells.values())


class WorkerProgress:
    """The latest progress report per (group, partition) of one topic."""

    def __init__(self, cfg: ProgressConfig | None = None, warn_factor: float = 1.5) -> None:
        self.cfg = cfg or ProgressConfig()
        self.warn_factor = warn_factor  # LagConfig.warn_factor: WARN after that x usual
        self.reports: dict[tuple[str, int], Report] = {}
        # cells a worker released and no one has taken since: the release's report
        self.released: dict[tuple[str, int], Report] = {}
        self.skipped = 0  # malformed rows, counted and ignored

    def __len__(self) -> int:
        return len(self.reports) + len(self.released)

    def report_many(self, rows: list[Any]) -> list[tuple[str, int]]:
        """Apply ``[group, partition, processed, progress_ms, sent_at_ms, interval_ms,
        member, host, in_flight]`` rows (``in_flight`` may be left out: 0); older reports
        than the one held change nothing; a processed offset of -1 releases the partition
        (its worker gave it up: no one consumes it), -2 hands it to a pool (commits judge
        it again). Returns the (group, partition) of the reports taken."""
        a = self.cfg.gap_alpha
        whole = self._whole_pauses(rows) if self.cfg.pause_half_life_s > 0 else {}
        taken: list[tuple[str, int]] = []
        for row in rows:
            try:
                group, partition, processed, progress_ms, sent_ms, interval_ms, member, host = row[
                    :8
                ]
                held = max(0, int(row[8])) if len(row) > 8 else 0
                key = (str(group), int(partition))
                processed, progress_ms, sent_ms = int(processed), int(progress_ms), int(sent_ms)
                interval_ms = max(1, int(interval_ms))
            except (TypeError, ValueError):
                self.skipped += 1
                continue
            prev = self.reports.get(key)
            if prev is not None and sent_ms < prev.sent_at_ms:
                continue  # a replay
            gone = self.released.get(key)
            if gone is not None and sent_ms < gone.sent_at_ms:
                continue  # older than the release
            if processed < -1:  # handed to a pool: commits (the mirrored position) judge it
                self.reports.pop(key, None)
                self.released.pop(key, None)
                continue
            if processed < 0:  # released: the worker's last position, as of the release
                self.reports.pop(key, None)
                last = prev.processed if prev is not None else -1
                self.released[key] = Report(last, sent_ms, sent_ms, interval_ms, str(member),
                                            str(host))  # fmt: skip
                taken.append(key)
                continue
            self.released.pop(key, None)  # reported again: owned
            gap = math.nan if prev is None else prev.gap_s
            pause = (
                0.0
                if prev is None
                else self._pause(
                    prev, processed, sent_ms, whole.get((prev.member, prev.sent_at_ms))
                )
            )
            if prev is not None and processed > prev.processed and progress_ms > prev.progress_ms:
                sample = (progress_ms - prev.progress_ms) / 1000.0 / (processed - prev.processed)
                gap = sample if math.isnan(gap) else (1 - a) * gap + a * sample
            self.reports[key] = Report(
                processed,
                progress_ms,
                sent_ms,
                interval_ms,
                str(member),
                str(host),
                gap,
                held,
                pause,
            )
            taken.append(key)
        return taken

    def _whole_pauses(self, rows: list[Any]) -> dict[tuple[str, int], float]:
        """Per (member, sent_at_ms) of the reports held for ``rows``' cells: the pause
        every partition of that report showed at once (the shortest time since any of
        them advanced), where two or more held work. A worker reports all its partitions
        of a topic in one event, so the previous report of each of its cells is that
        event's; an idle partition advanced long ago and shortens nothing, one that just
        finished a message shows the process was running."""
        shown: dict[tuple[str, int], list[float]] = {}
        holding: dict[tuple[str, int], list[bool]] = {}
        for row in rows:
            try:
                prev = self.reports.get((str(row[0]), int(row[1])))
            except (TypeError, ValueError, IndexError):
                continue  # counted as skipped by report_many
            if prev is not None:
                at = (prev.member, prev.sent_at_ms)
                shown.setdefault(at, []).append(max(0, at[1] - prev.progress_ms) / 1000.0)
                holding.setdefault(at, []).append(prev.in_flight > 0)
        out = {at: whole_pause_s(shown[at], holding[at]) for at in shown}
        return {at: s for at, s in out.items() if s is not None}

    def _pause(self, prev: Report, processed: int, sent_ms: int, whole_s: float | None) -> float:
        """``prev``'s usual pause, decayed to ``sent_ms``, raised to the pause ``prev``
        showed if that ended in progress (the worker held work, the prefix has moved
        since) below the WARN threshold, and every partition of the worker that held work
        (two at least) showed it at once (``whole_s``): a healthy worker on a busy host
        (GC, a starved thread) shows such pauses, and the threshold follows them instead
        of alarming.

        Not learned: a pause that reached WARN (a stall that ends does not raise the
        threshold), and one partition's pause while its siblings move, or on a worker
        with one partition holding work: that is the partition's own work (a heavy
        message), what detection is for; its time per message is learned as ``gap_s``.
        Learned, such a pause would raise the threshold at the first heavy message and
        delay the detection of the next ones."""
        half = self.cfg.pause_half_life_s
        if half <= 0:
            return 0.0  # learning off: the floor and the time per message alone
        dt_s = max(0, sent_ms - prev.sent_at_ms) / 1000.0
        pause = prev.pause_s * 0.5 ** (dt_s / half)
        # (whole_s is at most this partition's own pause: it is the shortest of those)
        if (
            whole_s is not None
            and prev.in_flight > 0
            and processed > prev.processed
            and whole_s < max(self.cfg.warn_min_s, self.warn_factor * prev.usual_s())
        ):
            pause = max(pause, whole_s)
        return pause

    def suspects(self, keys: list[tuple[str, int]], hw_now: np.ndarray, warn_factor: float) -> int:
        """The newest ``sent_at_ms`` among the reports of ``keys`` that show data waiting
        (the last sampled HWM beyond the processed position) and no progress for longer
        than the WARN rule allows a report (``warn_min_s``, or ``warn_factor`` x the
        worker's usual time per message); 0 if none does.

        Such a report is worth judging the moment it arrives rather than at the next
        sample (``TopicModel.judge_reports``): detection then waits for no sampler tick.
        The same thresholds as the rules, so healthy, idle (caught-up) and slow but moving
        workers are never suspects; a burst after idleness may be (its prefix is old, its
        data young), and the rules, which also look at the time lag, judge it OK."""
        newest = 0
        width = len(hw_now)
        for key in keys:
            r = self.reports.get(key)
            gone = self.released.get(key)
            if gone is not None and key[1] < width and hw_now[key[1]] > gone.processed:
                newest = max(newest, gone.sent_at_ms)  # released with data waiting: STOP now
                continue
            if r is None or key[1] >= width:
                continue
            if hw_now[key[1]] <= r.processed and r.in_flight <= 0:
                continue  # nothing waits, as far as the last sample and the worker know
            usual = warn_factor * r.usual_s()
            stuck_s = (r.sent_at_ms - r.progress_ms) / 1000.0
            if stuck_s > max(self.cfg.warn_min_s, usual) or (
                stuck_s > max(self.cfg.moving_worker_min_s, usual) and self._sibling_moved(key, r)
            ):
                newest = max(newest, r.sent_at_ms)
        return newest

    def _sibling_moved(self, key: tuple[str, int], r: Report) -> bool:
        """Did another partition of ``r``'s worker advance at least ``moving_worker_min_s``
        after this one last did (``moved_since``)?"""
        after_ms = r.progress_ms + self.cfg.moving_worker_min_s * 1000.0
        return any(
            o.member == r.member and o.progress_ms >= after_ms
            for k, o in self.reports.items()
            if k[0] == key[0] and k != key
        )

    def forget(self, group: str, partition: int | None = None) -> None:
        """Drop a group-partition's report (offset deleted), or all of a group's."""
        for cells in (self.reports, self.released):
            for key in [k for k in cells if k[0] == group and partition in (None, k[1])]:
                del cells[key]

    def expire(self, now_ms: int) -> None:
        horizon = now_ms - int(self.cfg.expire_s * 1000)
        for cells in (self.reports, self.released):
            for key in [k for k, r in cells.items() if r.sent_at_ms < horizon]:
                del cells[key]

    def overlay(
        self,
        inputs: StatusInputs,
        *,
        index: dict[str, int],
        t_ms: np.ndarray,
        hw: np.ndarray,
        now_ms: int,
    ) -> StatusInputs:
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
        unowned = self._unowned(inputs, index, width, now_ms)
        if not cells and unowned is None:
            return inputs
        copies = {
            f.name: value.copy()
            for f in fields(inputs)
            if isinstance(value := getattr(inputs, f.name), np.ndarray)
        }
        if unowned is not None:
            copies["released"] = unowned
        out = replace(inputs, **copies)
        if not cells:
            return out
        gi = np.fromiter((c[0] for c in cells), np.intp, len(cells))
        pi = np.fromiter((c[1] for c in cells), np.intp, len(cells))
        reports = [c[2] for c in cells]
        # what the worker reported, or what the group committed since, if that is further
        hw_now = hw[-1, pi]
        processed = np.maximum(
            np.array([r.processed for r in reports], np.int64), hw_now - inputs.lag_offsets[gi, pi]
        )
        sent = np.array([r.sent_at_ms for r in reports], np.int64)
        progress = np.array([r.progress_ms for r in reports], np.int64)
        interval = np.array([r.interval_ms for r in reports], np.float64) / 1000.0
        gap = np.array([r.gap_s for r in reports], np.float64)
        pause = np.array([r.pause_s for r in reports], np.float64)
        held = np.array([r.in_flight for r in reports], np.int64)

        # the time lag of each processed position, one row per group (cells are unique)
        rows, row_of = np.unique(gi, return_inverse=True)
        c2 = np.full((len(rows), width), -1, np.int64)
        c2[row_of, pi] = processed
        tl_now = time_lag_s(t_ms, hw, c2, now_ms)[0][row_of, pi]
        age_s = (now_ms - sent) / 1000.0
        allowed = self.allowed_silence_s(interval * 1000.0)
        silence = np.maximum(0.0, age_s - allowed)
        # a report newer than the moment judged (a sample held back while the reports went
        # ahead) is taken as of now: its age is not negative time lag
        tl_report = np.maximum(0.0, tl_now - np.maximum(age_s, 0.0))
        stuck_report = np.maximum(0, sent - progress) / 1000.0

        # data waits where the last sample saw it or the worker holds unfinished messages
        # (work that arrived after the sample): the worker's own word is the fresher one.
        # Then the oldest waiting message has waited at least since the prefix last
        # advanced (an SDK worker restarts that clock when work arrives at an idle
        # partition), so the time lag is at least that: a worker stalled just after a
        # sample is judged at its next report, not a sample later
        out.lag_offsets[gi, pi] = np.maximum(np.maximum(hw_now - processed, 0), held)
        out.time_lag_s[gi, pi] = (
            np.where(held > 0, np.maximum(tl_report, stuck_report), tl_report) + silence
        )
        out.since_progress_s[gi, pi] = stuck_report + silence
        out.since_commit_s[gi, pi] = np.maximum(age_s, 0.0)
        # the usual interval: time per message (the report cadence until learned), or the
        # worker's usual healthy pause if longer
        out.interval_s[gi, pi] = np.maximum(np.where(np.isnan(gap), interval, gap), pause)
        if out.warn_min_s is not None:  # per cell: set where reports judge
            waiting = (hw_now > processed) | (held > 0)
            whole = self._whole_worker(reports, stuck_report, waiting)
            out.warn_min_s[gi, pi] = np.where(
                whole, self.cfg.whole_worker_min_s, self._moving_floor(reports)
            )
            if out.stop_min_s is not None:
                stop = out.stop_min_s[gi, pi]
                out.stop_min_s[gi, pi] = np.where(
                    whole, np.maximum(stop, self.cfg.whole_worker_stop_s), stop
                )
        if out.lag_rate_per_s is not None:
            out.lag_rate_per_s[gi, pi] = 0.0
        if out.recent_lag_rate_per_s is not None:
            out.recent_lag_rate_per_s[gi, pi] = np.nan
        return out

    def _unowned(
        self, inputs: StatusInputs, index: dict[str, int], width: int, now_ms: int
    ) -> np.ndarray | None:
        """(groups x partitions): the released cells no one has taken since, None if none.
        A commit that moved the offset after the release (the worker commits what it
        finished before it releases) shows a new consumer, one that may not report: the
        cell is commits' to judge again."""
        if not self.released:
            return None
        since = inputs.since_progress_s
        out = np.zeros(since.shape, bool)
        for (g, p), r in list(self.released.items()):
            gi = index.get(g)
            if gi is None or p >= width or p >= since.shape[1]:
                continue
            if now_ms - since[gi, p] * 1000.0 > r.sent_at_ms:
                del self.released[(g, p)]  # committed since: someone consumes it
                continue
            out[gi, p] = True
        return out if out.any() else None

    def _moving_floor(self, reports: list[Report]) -> np.ndarray:
        """Per reported cell, its WARN floor but for a whole worker's pause: ``warn_min_s``,
        or ``moving_worker_min_s`` where another partition of the same member advanced at
        least that long after this one last did (``moved_since``)."""
        out = np.full(len(reports), self.cfg.warn_min_s)
        if self.cfg.moving_worker_min_s >= self.cfg.warn_min_s:
            return out
        gap_ms = self.cfg.moving_worker_min_s * 1000.0
        for cells in _by_member(reports):
            if len(cells) > 1:
                advanced = np.array([reports[c].progress_ms for c in cells], np.float64)
                moved = moved_since(advanced, gap_ms)
                out[[c for c, m in zip(cells, moved, strict=True) if m]] = (
                    self.cfg.moving_worker_min_s
                )
        return out

    def _whole_worker(
        self, reports: list[Report], stuck_s: np.ndarray, waiting: np.ndarray
    ) -> np.ndarray:
        """Per reported cell: has the whole worker paused? Every partition of its member
        that holds data (two at least) shows no progress for ``warn_min_s`` at once. There
        the floors are ``whole_worker_min_s`` (WARN) and ``whole_worker_stop_s`` (STALL,
        STOP) instead of ``warn_min_s`` and the model's ``stop_min_s``. One partition stuck
        while its siblings move is a stall (a heavy message, a hung handler) and keeps the
        low floors; all of them stuck at once is most often the process (GC, a starved
        host), which either resumes or goes on to STALL/STOP. One partition: no evidence
        either way, the low floors.

        A partition of the member that advanced within ``warn_min_s`` (one that had data
        now and then and just finished it) shows the process running: not a pause of the
        whole worker, whatever its partitions holding data do (two hot partitions on a
        worker whose other partitions keep up are a stall, and must not wait for the
        whole-worker floor)."""
        whole = np.zeros(len(reports), bool)
        for cells in _by_member(reports):
            paused = whole_pause_s(stuck_s[cells].tolist(), waiting[cells].tolist())
            if paused is not None and paused >= self.cfg.warn_min_s:
                whole[[i for i in cells if waiting[i]]] = True
        return whole

    def annotate(self, events: list[dict[str, Any]], now_ms: int) -> None:
        """Add ``worker`` (member, host, processed offset, report age, silent) to the
        ``partition_lag`` events of partitions a worker reports: a silent worker (its
        latest report older than the missed reports and grace allow: hung or dead) is
        named, and flagged."""
        for ev in events:
            gone = self.released.get((ev["group"], ev["partition"]))
            if gone is not None and gone.processed >= 0:
                ev["worker"] = {
                    "member": gone.member,
                    "host": gone.host,
                    "processed_offset": gone.processed,
                    "report_age_s": round((now_ms - gone.sent_at_ms) / 1000.0, 3),
                    "released": True,
                }
                continue
            r = self.reports.get((ev["group"], ev["partition"]))
            if r is not None:
                age_s = (now_ms - r.sent_at_ms) / 1000.0
                ev["worker"] = {
                    "member": r.member,
                    "host": r.host,
                    "processed_offset": r.processed,
                    "report_age_s": round(age_s, 3),
                    "silent": age_s > self.allowed_silence_s(r.interval_ms),
                }

    def allowed_silence_s(self, interval_ms: Any) -> Any:
        """How long a worker reporting every ``interval_ms`` may go unheard before its
        silence counts: ``missed_reports`` missed, one in flight, and the grace."""
        return (1 + self.cfg.missed_reports) * interval_ms / 1000.0 + self.cfg.grace_s

    def reporters(self, index: dict[str, int]) -> dict[tuple[int, int], tuple[str, str]]:
        """(group row, partition) -> (member, host) of the worker that reports it (or
        released it, no one having taken it since)."""
        return {
            (index[g], p): (r.member, r.host)
            for cells in (self.released, self.reports)
            for (g, p), r in cells.items()
            if g in index
        }
