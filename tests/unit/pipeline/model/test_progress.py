"""Worker progress in the lag model: stalls seen from the workers' reports, not commits."""

from __future__ import annotations

import numpy as np
import pytest
from prometheus_client import generate_latest

from pipeline.model.config import LagConfig
from pipeline.model.lag import TopicModel
from pipeline.model.progress import ProgressConfig, WorkerProgress, moved_since
from pipeline.model.status import StatusInputs
from schemas import LagStatus, validate

CFG = LagConfig()
STATUS = list(LagStatus)
T0 = 1_000_000


class Worker:
    """A producer at ``rate`` msgs/s on one partition, a worker that processes everything
    at once and commits every ``commit_every_ms``, optionally reporting every
    ``report_every_ms`` (``report_phase_ms`` before each sample); sampled every 250 ms, in
    5 ms steps."""

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
        self.report_every_ms = 125  # the SDK's default
        self.judge_on_arrival = True
        self.judged = 0  # reports judged on arrival (a stalled worker's only)
        self.statuses: list[tuple[int, LagStatus]] = []

    def run(self, until_ms: int) -> None:
        while self.t < until_ms:
            self.t += 5
            self.produced += self.rate * 0.005
            if not self.stalled and int(self.produced) > self.processed:
                self.processed = int(self.produced)
                self.progress_ms = self.t
            since = self.t - T0
            if since % self.commit_every_ms == 0 and self.processed > self.committed:
                # what was processed, also just before a stall: its last commit may come up
                # to one interval after the stall
                self.model.commit("g", 0, self.processed, self.t)
                self.committed = self.processed
            if (
                self.reports
                and not self.silent
                and (since + self.report_phase_ms) % self.report_every_ms == 0
            ):
                keys = self.model.progress.report_many(
                    [
                        [
                            "g",
                            0,
                            self.processed,
                            self.progress_ms,
                            self.t,
                            self.report_every_ms,
                            "w-1",
                            "host-a",
                            int(self.produced) - self.processed,  # held: fetched, not done
                        ]
                    ]
                )
                # as the operator does: a report that shows a stalled worker is judged
                # the moment it lands, not at the next sample
                judged = self.model.judge_reports(keys) if self.judge_on_arrival else None
                self.judged += judged is not None
                if judged is not None and len(judged):
                    self.statuses.append((self.t, STATUS[int(judged[0].status[0])]))
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


@pytest.mark.parametrize("report_every_ms", [125, 250])
@pytest.mark.parametrize("onset_ms", [0, 60, 130, 200])
def test_a_stall_warns_one_report_after_the_floor_at_a_5_s_commit_cadence(
    onset_ms, report_every_ms
):
    w = Worker(commit_every_ms=5000)
    w.report_every_ms = report_every_ms
    w.run(T0 + 12_000 + onset_ms)
    onset = w.t
    w.stalled = True
    w.run(onset + 3000)
    warn = w.first(onset, LagStatus.WARN, LagStatus.STALL, LagStatus.STOP)
    # 0.17 s without progress (the floor and the slack), then the next report: judged as it
    # lands, so neither the sampler's phase nor the report's lead adds anything (the
    # pipeline adds ~30-50 ms to that)
    assert 0.17 < warn <= 0.17 + report_every_ms / 1000 + 0.01
    # the worker keeps reporting: STALL (error level) once stop_min_s (0.5 s) passed, at
    # the next report, well before a commit is even due
    assert 0.52 < w.first(onset, LagStatus.STALL) <= 0.52 + report_every_ms / 1000 + 0.01
    assert w.first(onset, LagStatus.STOP) == float("inf")


def test_judged_only_at_samples_a_stall_waits_for_the_tick():
    """What judging on arrival takes out: the sampler's phase and the report's lead."""
    w = Worker(commit_every_ms=5000)
    w.judge_on_arrival = False
    w.run(T0 + 12_000 + 130)
    onset = w.t
    w.stalled = True
    w.run(onset + 3000)
    warn = w.first(onset, LagStatus.WARN)
    assert warn == pytest.approx(0.37)  # the report at +0.205 s is first seen at +0.37 s
    on_arrival = Worker(commit_every_ms=5000)
    on_arrival.run(T0 + 12_000 + 130)
    on_arrival.stalled = True
    on_arrival.run(onset + 3000)
    assert on_arrival.first(onset, LagStatus.WARN) == pytest.approx(0.205)


@pytest.mark.parametrize("rate", [200.0, 20.0, 3.0])
def test_healthy_and_slow_but_moving_workers_are_never_judged_between_samples(rate):
    """A worker that keeps up, at 200 msgs/s or one message every 330 ms, never makes the
    model judge between samples (only a stalled worker's report does), nor alarms."""
    w = Worker(rate=rate, commit_every_ms=1000)
    w.run(T0 + 30_000)
    assert w.not_ok((T0 + 5500, T0 + 30_000)) == []
    assert w.judged <= 2  # the first reports, before the time per message is learned


def test_a_burst_after_idleness_is_judged_ok():
    """An idle worker's prefix is old; a burst makes its reports suspects (data waits, the
    prefix has not moved for seconds) until it is worked off: judged, and OK (the data is
    young), since the rules look at the time lag too."""
    w = Worker(commit_every_ms=1000)
    w.run(T0 + 4000)
    w.rate = 0.0
    w.run(T0 + 14_000)
    w.produced += 500  # a burst, worked off at once
    w.rate = 100.0
    w.run(T0 + 20_000)
    assert w.not_ok((T0 + 4500, T0 + 20_000)) == []


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
    # silence counts only beyond three report intervals + grace (0.775 s), and then WARNs
    # once it passes the floor (0.17 s), at the next sample (no report comes)
    assert 0.9 <= warn <= 1.2
    assert 1.25 <= w.first(onset, LagStatus.STOP) <= 1.6
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
    assert events[0]["worker"]["silent"] is True
    validate(events[0])
    # the metric and `lagpilot status` name it too
    from prometheus_client.parser import text_string_to_metric_families

    from pipeline.commands.status import render
    from pipeline.observe.metrics import PipelineMetrics

    metrics = PipelineMetrics()
    metrics.events_published(events)
    assert "w-1@host-a SILENT" in render({}, {"g|t|0": events[0]})

    def silent() -> dict[tuple[str, str, str], float]:
        text = generate_latest(metrics.registry).decode()
        return {
            (s.labels["group"], s.labels["member"], s.labels["host"]): s.value
            for f in text_string_to_metric_families(text)
            if f.name == "lagpilot_silent_worker_partitions"
            for s in f.samples
        }

    assert silent() == {("g", "w-1", "host-a"): 1.0}
    metrics.events_published([events[0] | {"status": "OK"}])  # back: reporting, caught up
    assert silent() == {("g", "w-1", "host-a"): 0.0}


def test_a_reporting_worker_is_not_flagged_silent():
    w = Worker(commit_every_ms=1000)
    w.run(T0 + 8000)
    obs = w.model.observe(w.t)
    events = obs.partition_events(np.array([0]), np.array([0]))
    w.model.progress.annotate(events, w.t)
    assert events[0]["worker"]["silent"] is False
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


def test_a_partition_handed_to_a_pool_is_judged_by_commits_again():
    w = Worker(commit_every_ms=5000)
    w.run(T0 + 12_000)
    w.model.progress.report_many([["g", 0, -2, 0, w.t + 1, 250, "w-1", "host-a"]])
    assert len(w.model.progress) == 0
    w.reports = False  # the owner mirrors the pool's position in its commits
    w.run(T0 + 30_000)
    assert w.not_ok((T0 + 12_000, T0 + 30_000)) == []  # 5 s commits, judged at 5 s


def release(w: Worker, member: str = "w-1") -> None:
    """The worker gives partition 0 up (a rebalance, its shutdown): it commits what it
    processed, then says so in its last report."""
    if w.processed > w.committed:
        w.model.commit("g", 0, w.processed, w.t)
        w.committed = w.processed
    keys = w.model.progress.report_many([["g", 0, -1, 0, w.t + 1, 125, member, "host-a"]])
    judged = w.model.judge_reports(keys)
    if judged is not None and len(judged):
        w.statuses.append((w.t + 1, STATUS[int(judged[0].status[0])]))


def test_a_released_partition_with_data_waiting_is_stop_at_once_never_warn_first():
    w = Worker(commit_every_ms=5000)
    w.run(T0 + 12_000)
    at = w.t
    release(w)
    w.reports, w.stalled = False, True  # no one has taken it: nothing is processed
    w.run(T0 + 14_000)
    (first, *_), stop = w.not_ok((at, T0 + 14_000)), w.first(at, LagStatus.STOP)
    assert first[1] == LagStatus.STOP and stop <= 0.25  # judged as the release lands
    assert {s for _, s in w.not_ok((at, T0 + 14_000))} == {LagStatus.STOP}
    obs = w.model.observe(w.t)
    events = obs.partition_events(*np.nonzero(obs.mask))
    w.model.progress.annotate(events, w.t)
    assert events[0]["worker"]["released"] is True and events[0]["worker"]["member"] == "w-1"
    validate(events[0])  # the partition_lag schema's worker.released


def test_a_released_partition_is_judged_by_its_new_owners_reports():
    w = Worker(commit_every_ms=5000)
    w.run(T0 + 12_000)
    release(w)
    w.model.progress.report_many([["g", 0, w.processed, w.progress_ms, w.t + 20, 125, "w-2",
                                   "host-b", 0]])  # fmt: skip
    assert not w.model.progress.released
    w.run(T0 + 20_000)
    assert w.not_ok((T0 + 12_000, T0 + 20_000)) == []


def test_a_released_partition_is_commits_to_judge_once_its_offset_moves():
    w = Worker(commit_every_ms=1000)
    w.run(T0 + 12_100)
    release(w)
    w.reports = False  # a plain consumer takes it: it commits, and reports nothing
    w.run(T0 + 20_000)
    assert not w.model.progress.released
    assert w.not_ok((T0 + 13_100, T0 + 20_000)) == []  # from its first commit on, OK
    assert w.first(T0 + 12_100, LagStatus.STOP) < 1.0  # until then, no one consumed it


def test_a_released_partition_with_nothing_waiting_is_ok():
    w = Worker(rate=0, commit_every_ms=5000)
    w.run(T0 + 12_000)
    release(w)
    w.run(T0 + 20_000)
    assert w.not_ok((T0 + 12_000, T0 + 20_000)) == []


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
    m = TopicModel("t", LagConfig(progress=ProgressConfig(warn_min_s=0.12)))
    for g in ("sdk", "plain"):
        m.commit(g, 0, 10, T0)
    m.add_sample(T0, [100])
    m.progress.report_many([["sdk", 0, 100, T0, T0, 250, "w", "h"]])
    inputs = StatusInputs(
        lag_offsets=np.array([[90], [90]]),
        time_lag_s=np.array([[9.0], [9.0]]),
        since_progress_s=np.array([[9.0], [9.0]]),
        since_commit_s=np.array([[9.0], [9.0]]),
        interval_s=np.array([[5.0], [5.0]]),
        warn_min_s=np.array([[0.15], [0.15]]),
    )
    out = m.progress.overlay(inputs, index=m._index, t_ms=m.t_ms, hw=m.hw, now_ms=T0 + 100)
    assert out.lag_offsets.tolist() == [[0], [90]]
    assert out.since_commit_s.tolist() == [[pytest.approx(0.1)], [9.0]]
    assert out.warn_min_s is not None
    assert out.warn_min_s.tolist() == [[0.12], [0.15]]  # its own floor: reports only
    assert inputs.lag_offsets.tolist() == [[90], [90]]


class TwoPartitions:
    """The reports of one worker holding two partitions of a topic at 200 msgs/s each,
    one event every 125 ms (both rows sent at once, as the SDK does), straight into
    ``WorkerProgress``; ``pause`` holds the listed partitions back for a while."""

    def __init__(self, t_ms: int = T0) -> None:
        self.p = WorkerProgress()
        self.t = t_ms
        self.processed = [0, 0]
        self.progress_ms = [t_ms, t_ms]
        for _ in range(40):  # 5 s of healthy work: the time per message is learned
            self.step()

    def step(self, held: tuple[int, ...] = ()) -> None:
        self.t += 125
        for q in (0, 1):
            if q not in held:
                self.processed[q] += 25
                self.progress_ms[q] = self.t - 3
        self.p.report_many(
            [
                ["g", q, self.processed[q], self.progress_ms[q], self.t, 125, "w-1", "h", 5]
                for q in (0, 1)
            ]
        )

    def pause(self, ms: int, partitions: tuple[int, ...] = (0, 1)) -> None:
        """No progress on ``partitions`` for ``ms`` (the reports show it), then moving."""
        for _ in range(ms // 125):
            self.step(held=partitions)
        self.step()
        self.step()

    def learned(self, q: int = 0) -> float:
        return self.p.reports[("g", q)].pause_s

    def suspect(self, ms: int) -> bool:
        """Would a report showing partition 0 alone ``ms`` without progress be judged
        at once (``suspects``: the WARN rule's threshold for a report)?"""
        r = self.p.reports[("g", 0)]
        row = ["g", 0, r.processed, r.progress_ms, self.t + ms, 125, "w-1", "h", 5]
        keys = self.p.report_many([row])
        return self.p.suspects(keys, np.array([10**9, 10**9]), CFG.warn_factor) > 0


def test_a_worker_on_a_busy_host_learns_its_whole_pauses_instead_of_alarming():
    """Healthy pauses of the whole worker (every partition holding work, at once: a
    starved process, GC) below the threshold become its usual interval; a longer pause
    then is not judged a stall. The same pause on a worker that never paused before is
    (the test can fail)."""
    busy = TwoPartitions()
    for _ in range(10):
        busy.pause(125)  # 0.12 s shown by both partitions' reports
    assert 0.1 <= busy.learned(0) <= 0.15 and busy.learned(1) == busy.learned(0)
    assert not busy.suspect(170)  # under 1.5 x the learned pause, over the 0.15 s floor
    assert TwoPartitions().suspect(170)


def test_one_partitions_slow_work_is_not_learned_as_a_pause():
    """A partition that does not move while its sibling does (an avalanche's heavy
    message, a hung handler) is the stall detection is for: learning it would raise the
    threshold at the avalanche's first heavy message. Nor is a pause on a worker with
    one partition holding work: no evidence that it was the process."""
    w = TwoPartitions()
    for _ in range(10):
        w.pause(125, partitions=(0,))
    assert w.learned(0) < 0.01  # the few ms between progress and report, nothing more
    assert w.suspect(250)

    one = WorkerProgress()
    for i in range(20):
        t = T0 + i * 125
        moved = i % 2 == 0  # 0.12 s pauses, every other report
        one.report_many([["g", 0, i // 2 * 25, t - (3 if moved else 123), t, 125, "w", "h", 5]])
    assert one.reports[("g", 0)].pause_s == 0.0


def test_a_stall_that_ends_does_not_raise_the_threshold_and_pauses_are_forgotten():
    w = TwoPartitions()
    w.pause(2000)  # a real stall of the whole worker: past every threshold, then moving
    assert w.learned(0) < 0.01  # the few ms between progress and report, not the stall
    for _ in range(5):
        w.pause(125)
    assert w.learned(0) >= 0.1
    r = w.p.reports[("g", 0)]
    later = r.sent_at_ms + 300_000  # five half-lives without a pause
    w.p.report_many([["g", 0, r.processed + 10, later, later, 125, "w-1", "h", 1]])
    assert w.learned(0) == pytest.approx(r.pause_s / 32)


def test_a_stall_after_one_that_ended_is_detected_as_fast_as_the_first():
    w = Worker(rate=200, commit_every_ms=1000)
    w.run(T0 + 5000)
    w.stalled = True
    w.run(w.t + 2000)  # WARN, STALL
    w.stalled = False
    w.run(w.t + 1000)  # moving again
    onset = w.t
    w.stalled = True
    w.run(w.t + 600)
    assert w.first(onset, LagStatus.WARN) <= 0.17 + 0.125 + 0.01


@pytest.mark.parametrize(
    ("stuck_ms", "expected"),
    [
        ((250, 5), ["WARN", "OK"]),  # one partition stuck while its sibling moves: a stall
        ((250, 250), ["OK", "OK"]),  # the whole worker paused: the process, not yet a stall
        ((450, 450), ["WARN", "WARN"]),  # past the whole-worker floor (0.4 s + slack)
        ((700, 5), ["STALL", "OK"]),  # a stall: error level after 0.5 s
        ((700, 700), ["WARN", "WARN"]),  # a frozen worker: error level only after 1 s
        ((1100, 1100), ["STALL", "STALL"]),
    ],
)
def test_a_pause_of_the_whole_worker_waits_for_its_own_floor(stuck_ms, expected):
    m = TopicModel("t", CFG)
    t = T0
    for i in range(41):  # 10 s at 200 msgs/s on two partitions, a worker that keeps up
        t = T0 + i * 250
        m.add_sample(t, [i * 50, i * 50])
        rows = [["g", p, i * 50, t - 5, t, 125, "w-1", "host-a", 1] for p in (0, 1)]
        m.progress.report_many(rows)
        m.observe(t)
    for p in (0, 1):
        m.commit("g", p, 40 * 50, t)
    now = t + 250 + 450
    m.add_sample(t + 250, [41 * 50, 41 * 50])
    # each partition processed everything produced until its pause began (200/s), and holds
    # what came since (beyond the last sample: its reports say so)
    m.progress.report_many(
        [
            ["g", p, (now - stuck_ms[p] - T0) // 5, now - stuck_ms[p], now, 125, "w", "h", 10]
            for p in (0, 1)
        ]
    )
    obs = m.observe(now)
    assert [STATUS[int(s)] for s in obs[0].status] == expected


@pytest.mark.parametrize(
    ("light_idle_ms", "expected"),
    [
        (20, ["WARN", "WARN", "OK"]),  # the light partition just finished a message: running
        (5000, ["OK", "OK", "OK"]),  # idle for 5 s: no evidence against a whole pause
    ],
)
def test_two_hot_partitions_on_a_worker_whose_other_partition_moves_are_a_stall(
    light_idle_ms, expected
):
    """An avalanche's shape: partitions 0 and 1 hold heavy work and have not advanced for
    250 ms, partition 2 gets a message now and then and finishes it at once (nothing
    waits there). If partition 2 advanced 20 ms ago the process is running, so 0 and 1
    are stalled (the low floors: WARN); if it has been idle, 0 and 1 may be the whole
    process paused (the 0.4 s floor: not yet)."""
    m = TopicModel("t", CFG)
    t = T0
    for i in range(41):  # 10 s at 200 msgs/s on three partitions, a worker that keeps up
        t = T0 + i * 250
        m.add_sample(t, [i * 50] * 3)
        m.progress.report_many(
            [["g", p, i * 50, t - 5, t, 125, "w-1", "host-a", 1] for p in range(3)]
        )
        m.observe(t)
    for p in range(3):
        m.commit("g", p, 40 * 50, t)
    now = t + 250 + 450
    m.add_sample(t + 250, [41 * 50, 41 * 50, 40 * 50])
    rows = [["g", p, (now - 250 - T0) // 5, now - 250, now, 125, "w", "h", 10] for p in (0, 1)]
    rows.append(["g", 2, 40 * 50, now - light_idle_ms, now, 125, "w", "h", 0])
    m.progress.report_many(rows)
    obs = m.observe(now)
    assert [STATUS[int(s)] for s in obs[0].status] == expected


def test_two_hot_partitions_pausing_while_a_sibling_moves_teach_no_pause():
    """The same shape, repeated while healthy enough (0.12 s, under the floor): the
    partition that keeps moving shows it was the work, not the process, so no pause is
    learned; with that partition idle it is learned (the test can fail)."""
    learned = {}
    for light_moves in (True, False):
        p = WorkerProgress()
        done = [0, 0, 0]
        for i in range(60):
            t = T0 + i * 125
            stuck = i % 2 == 1  # every other report: 0 and 1 held back 0.12 s
            if not stuck:
                done[0] += 25
                done[1] += 25
            rows = [
                ["g", q, done[q], t - (123 if stuck else 3), t, 125, "w", "h", 5] for q in (0, 1)
            ]
            done[2] += light_moves
            light_at = t - 10 if light_moves else T0
            rows.append(["g", 2, done[2], light_at, t, 125, "w", "h", 0])
            p.report_many(rows)
        learned[light_moves] = p.reports[("g", 0)].pause_s
    assert learned[True] < 0.02
    assert learned[False] >= 0.1


def test_a_report_newer_than_the_sample_judged_is_not_taken_for_time_lag():
    """A sample held back (the commits source behind) while a later report went ahead: the
    report's negative age is not time the data waited."""
    w = Worker(rate=200, commit_every_ms=1000)
    w.run(T0 + 6000)
    r = w.model.progress.reports[("g", 0)]
    ahead = r.sent_at_ms + 240
    w.model.progress.report_many(
        [["g", 0, r.processed + 48, ahead - 5, ahead, 125, "w-1", "host-a", 1]]
    )
    obs = w.model.observe(w.model.last_sample_ms, slide=False)
    assert STATUS[int(obs[0].status[0])] == "OK"


def _one_hot_partition(stuck_ms: int, sibling_advanced_ms: int | None) -> list[str]:
    """Partition 0 holds work and has not advanced for ``stuck_ms``; partition 1 of the same
    worker (None: no partition 1 in its report) keeps up, its last message finished
    ``sibling_advanced_ms`` ago (nothing waits there)."""
    m = TopicModel("t", CFG)
    t = T0
    for i in range(41):  # 10 s at 200 msgs/s on two partitions, a worker that keeps up
        t = T0 + i * 250
        m.add_sample(t, [i * 50, i * 50])
        m.progress.report_many([["g", p, i * 50, t - 5, t, 125, "w", "h", 1] for p in (0, 1)])
        m.observe(t)
    for p in (0, 1):
        m.commit("g", p, 40 * 50, t)
    now = t + 250 + 450
    m.add_sample(t + 250, [41 * 50, 40 * 50])
    rows = [["g", 0, (now - stuck_ms - T0) // 5, now - stuck_ms, now, 125, "w", "h", 10]]
    if sibling_advanced_ms is None:
        del m.progress.reports[("g", 1)]
    else:
        rows.append(["g", 1, 40 * 50, now - sibling_advanced_ms, now, 125, "w", "h", 0])
    m.progress.report_many(rows)
    return [STATUS[int(s)] for s in m.observe(now)[0].status]


@pytest.mark.parametrize(
    ("stuck_ms", "sibling_advanced_ms", "expected"),
    [
        # the sibling finished a message 100+ ms after partition 0 last moved: the process
        # runs, partition 0's own work is slow (a heavy message): the 0.1 s floor
        (140, 20, ["WARN", "OK"]),
        (110, 5, ["OK", "OK"]),  # under that floor (0.1 s + 0.02 s slack) even so
        # the sibling last moved 60 ms ago, only 80 ms after partition 0: no evidence
        (140, 60, ["OK", "OK"]),
        # ...or before partition 0 stopped: what a pause of the whole process shows
        (140, 150, ["OK", "OK"]),
        (180, 150, ["WARN", "OK"]),  # past the 0.15 s floor, whatever the sibling did
    ],
)
def test_a_partition_stuck_while_its_worker_moves_elsewhere_warns_at_the_lower_floor(
    stuck_ms, sibling_advanced_ms, expected
):
    assert _one_hot_partition(stuck_ms, sibling_advanced_ms) == expected


def test_a_worker_reporting_one_partition_keeps_the_floor_a_process_pause_needs():
    assert _one_hot_partition(140, None)[0] == "OK"
    assert _one_hot_partition(180, None)[0] == "WARN"


def test_moved_since_compares_each_partition_with_the_latest_of_the_others():
    advanced = np.array([1000.0, 1150.0, 1090.0])
    assert moved_since(advanced, 100.0).tolist() == [True, False, False]
    assert moved_since(advanced, 50.0).tolist() == [True, False, True]
    assert moved_since(np.array([1000.0]), 1.0).tolist() == [False]


def test_a_report_stuck_while_its_sibling_moved_is_judged_as_it_lands():
    """``suspects`` uses the same lower floor, so detection waits for no sample."""
    for sibling_at, expected in ((-20, True), (-150, False)):
        p = WorkerProgress()
        now = T0 + 10_000
        p.report_many(
            [
                ["g", 0, 100, now - 130, now, 125, "w", "h", 3],
                ["g", 1, 100, now + sibling_at, now, 125, "w", "h", 0],
            ]
        )
        assert (p.suspects([("g", 0)], np.array([200, 100]), CFG.warn_factor) > 0) is expected


def test_the_lower_floor_is_off_when_set_to_the_usual_one():
    p = WorkerProgress(ProgressConfig(moving_worker_min_s=0.15))
    now = T0 + 10_000
    p.report_many(
        [
            ["g", 0, 100, now - 130, now, 125, "w", "h", 3],
            ["g", 1, 100, now - 5, now, 125, "w", "h", 0],
        ]
    )
    assert p.suspects([("g", 0)], np.array([200, 100]), CFG.warn_factor) == 0
