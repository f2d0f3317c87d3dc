"""Worker progress in the lag model: stalls seen from the workers' reports, not commits."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.model.config import LagConfig
from pipeline.model.lag import TopicModel
from pipeline.model.progress import WorkerProgress
from schemas import LagStatus, validate

CFG = LagConfig()
STATUS = list(LagStatus)
T0 = 1_000_000


class Worker:
    """A producer at ``rate`` msgs/s on one partition, a worker that processes everything
    at once and commits every ``commit_every_ms``, optionally reporting every 250 ms
    (``report_phase_ms`` before each sample); sampled every 250 ms, in 10 ms steps."""

    def __init__(self, rate: float = 100, commit_every_ms: int = 5000, reports: bool = True):
        self.rate, self.commit_every_ms, self.reports = rate, commit_every_ms, reports
        self.model = TopicModel("t", CFG)
        self.t = T0
        self.produced = 0.0
        self.processed = 0
        self.committed = -1
        self.progress_ms = T0
        self.stalled = False
        self.silent = False
        self.report_phase_ms = 40
        self.statuses: list[tuple[int, LagStatus]] = []

    def run(self, until_ms: int) -> None:
        while self.t < until_ms:
            self.t += 10
            self.produced += self.rate * 0.01
            if not self.stalled and int(self.produced) > self.processed:
                self.processed = int(self.produced)
                self.progress_ms = self.t
            since = self.t - T0
            if since % self.commit_every_ms == 0 and self.processed > self.committed:
                # what was processed, also just before a stall: its last commit may come up
                # to one interval after the stall
                self.model.commit("g", 0, self.processed, self.t)
                self.committed = self.processed
            if self.reports and not self.silent and (since + self.report_phase_ms) % 250 == 0:
                self.model.progress.report_many(
                    [["g", 0, self.processed, self.progress_ms, self.t, 250, "w-1", "host-a"]]
                )
            if since % 250 == 0:
                self.model.add_sample(self.t, [int(self.produced)])
                obs = self.model.observe(self.t)
                if len(obs):
                    self.statuses.append((self.t, STATUS[int(obs[0].status[0])]))

    def first(self, after_ms: int, *statuses: LagStatus) -> float:
        """Seconds from ``after_ms`` to the first sample with one of ``statuses``."""
        for t, s in self.statuses:
            if t > after_ms and s in statuses:
                return (t - after_ms) / 1000.0
        return float("inf")

    def not_ok(self, between: tuple[int, int]) -> list[tuple[int, LagStatus]]:
        return [(t, s) for t, s in self.statuses if between[0] < t <= between[1] and s != "OK"]


@pytest.mark.parametrize("commit_every_ms", [100, 1000, 5000])
def test_a_healthy_reporting_worker_stays_ok_whatever_its_commit_cadence(commit_every_ms):
    w = Worker(commit_every_ms=commit_every_ms)
    w.run(T0 + 30_000)
    assert w.not_ok((T0 + 5500, T0 + 30_000)) == []


@pytest.mark.parametrize("phase_ms", [10, 120, 240])
def test_reports_at_any_phase_of_the_sample_raise_no_false_alarm(phase_ms):
    w = Worker(commit_every_ms=5000)
    w.report_phase_ms = phase_ms
    w.run(T0 + 20_000)
    assert w.not_ok((T0 + 5500, T0 + 20_000)) == []


@pytest.mark.parametrize("onset_ms", [0, 60, 130, 200])
def test_a_stall_warns_within_half_a_second_at_a_5_s_commit_cadence(onset_ms):
    w = Worker(commit_every_ms=5000)
    w.run(T0 + 12_000 + onset_ms)
    onset = w.t
    w.stalled = True
    w.run(onset + 3000)
    warn = w.first(onset, LagStatus.WARN, LagStatus.STALL, LagStatus.STOP)
    # 0.12 s without progress (the floor), then the next report (<= 250 ms) and the sample
    # 20 ms after it; the pipeline adds ~50 ms to that
    assert warn <= 0.42
    # the worker keeps reporting: STALL (error level) well before a commit is even due
    assert w.first(onset, LagStatus.STALL) <= 0.9
    assert w.first(onset, LagStatus.STOP) == float("inf")


@pytest.mark.parametrize("commit_every_ms", [100, 1000, 5000])
@pytest.mark.parametrize("phase", [0.0, 0.3, 0.6, 0.9])
def test_without_reports_a_stall_warns_within_one_and_a_half_commit_intervals(
    commit_every_ms, phase
):
    """Commits only: the stall shows once the time lag passes 1.5 intervals (+ 0.1 s), counted
    from the stall, even when the last commit came after it (with the work done before)."""
    w = Worker(commit_every_ms=commit_every_ms, reports=False)
    w.run(T0 + max(12_000, 3 * commit_every_ms) + int(phase * commit_every_ms))
    onset = w.t
    w.stalled = True
    w.run(onset + 5 * commit_every_ms + 2000)
    warn = w.first(onset, LagStatus.WARN, LagStatus.STALL, LagStatus.STOP)
    interval_s = commit_every_ms / 1000
    assert warn <= 1.5 * interval_s + 0.12 + 0.25  # + one sample
    if commit_every_ms >= 1000:
        assert warn > interval_s  # not before a healthy group's sawtooth could reach
    # STOP (error level) waits for stop_factor (4) intervals without an advance
    assert 3 * interval_s < w.first(onset, LagStatus.STOP) <= 5 * interval_s + 0.3


def test_a_worker_that_stops_reporting_while_data_waits_is_stopped():
    w = Worker(commit_every_ms=5000)
    w.run(T0 + 12_000)
    onset = w.t
    w.stalled = w.silent = True  # a hung or dead process
    w.run(onset + 3000)
    warn = w.first(onset, LagStatus.WARN, LagStatus.STOP)
    assert 0.75 <= warn <= 1.25  # silence counts only beyond three intervals + grace
    assert w.first(onset, LagStatus.STOP) <= 1.75
    assert w.first(onset, LagStatus.STALL) == float("inf")
    reporter = w.model.progress.reporters(w.model._index)[(0, 0)]
    assert reporter == ("w-1", "host-a")
    # the partition_lag event names the silent worker and how long it has been silent
    obs = w.model.observe(w.t)
    events = obs.partition_events(np.array([0]), np.array([0]))
    w.model.progress.annotate(events, w.t)
    assert events[0]["status"] == "STOP"
    assert events[0]["worker"]["member"] == "w-1" and events[0]["worker"]["host"] == "host-a"
    assert events[0]["worker"]["report_age_s"] > 2.5
    validate(events[0])


def test_a_silent_worker_on_an_idle_partition_is_ok():
    w = Worker(commit_every_ms=1000)
    w.run(T0 + 8000)
    w.rate = 0.0  # nothing new to process
    w.silent = True
    w.run(T0 + 20_000)
    assert w.not_ok((T0 + 8500, T0 + 20_000)) == []


def test_an_idle_worker_that_gets_a_message_is_not_stalled_by_its_old_progress_time():
    w = Worker(commit_every_ms=1000)
    w.run(T0 + 4000)
    w.rate = 0.0
    w.run(T0 + 14_000)  # idle for 10 s: progress_ms is 10 s old
    w.produced += 1  # one message, processed in the next step
    w.run(T0 + 20_000)
    assert w.not_ok((T0 + 4500, T0 + 20_000)) == []


def test_a_released_partition_is_judged_by_commits_again():
    w = Worker(commit_every_ms=5000)
    w.run(T0 + 12_000)
    w.model.progress.report_many([["g", 0, -1, 0, w.t + 1, 250, "w-1", "host-a"]])
    assert len(w.model.progress) == 0
    w.reports = False
    w.run(T0 + 30_000)
    assert w.not_ok((T0 + 12_000, T0 + 30_000)) == []  # 5 s commits, judged at 5 s


def test_replays_and_malformed_rows_change_nothing():
    p = WorkerProgress()
    p.report_many([["g", 0, 100, 5000, 6000, 250, "w", "h"]])
    p.report_many([["g", 0, 50, 4000, 5000, 250, "w", "h"]])  # older report: a replay
    p.report_many([["g", 0, "x", 1, 1, 1, "w", "h"], ["g", 1], None])
    assert p.reports[("g", 0)].processed == 100
    assert p.skipped == 3


def test_time_per_message_is_learned_from_consecutive_reports():
    p = WorkerProgress()
    p.report_many([["g", 0, 100, 10_000, 10_000, 250, "w", "h"]])
    p.report_many([["g", 0, 125, 10_250, 10_260, 250, "w", "h"]])
    assert p.reports[("g", 0)].gap_s == pytest.approx(0.01)


def test_overlay_leaves_cells_without_reports_and_its_inputs_alone():
    m = TopicModel("t", CFG)
    for g in ("sdk", "plain"):
        m.commit(g, 0, 10, T0)
    m.add_sample(T0, [100])
    m.progress.report_many([["sdk", 0, 100, T0, T0, 250, "w", "h"]])
    inputs = {
        "lag": np.array([[90], [90]]),
        "time_lag": np.array([[9.0], [9.0]]),
        "since_progress_s": np.array([[9.0], [9.0]]),
        "since_commit_s": np.array([[9.0], [9.0]]),
        "interval_s": np.array([[5.0], [5.0]]),
        "warn_min_s": np.array([[0.15], [0.15]]),
    }
    out = m.progress.overlay(inputs, index=m._index, t_ms=m.t_ms, hw=m.hw, now_ms=T0 + 100)
    assert out["lag"].tolist() == [[0], [90]]
    assert out["since_commit_s"].tolist() == [[pytest.approx(0.1)], [9.0]]
    assert out["warn_min_s"].tolist() == [[0.1], [0.15]]  # the lower floor: reports only
    assert inputs["lag"].tolist() == [[90], [90]]
