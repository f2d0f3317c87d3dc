"""The commits source's counters (and its sampler's), folded into Prometheus counters."""

from __future__ import annotations

import threading
import time
from typing import Any

from pipeline.app import SourceStats
from pipeline.observe.metrics import PipelineMetrics
from pipeline.read.commits import ALIGN_DROPS
from pipeline.read.counters import CounterChannel


def decoded(m: PipelineMetrics) -> float:
    return m.records.labels("commit")._value.get()


def dropped(m: PipelineMetrics, kind: str = "commits_behind") -> float:
    return m.sampler_errors.labels("align", kind)._value.get()


def test_totals_count_by_their_increase_and_a_new_run_counts_from_zero():
    m = PipelineMetrics()
    stats = SourceStats(m)
    for total in (100, 300, 300, 400):
        stats.fold("a", {"commit": total})
    assert decoded(m) == 400
    for total in (50, 20, 80):  # the source restarted: a new run (a lower total adds nothing)
        stats.fold("b", {"commit": total})
    assert decoded(m) == 480


def test_samples_the_commits_reader_dropped_and_the_samplers_errors_are_counted_once():
    m = PipelineMetrics()
    stats = SourceStats(m)
    for n in (2, 5, 5):
        stats.fold("a", {ALIGN_DROPS: n, "sampler|align:reader_busy": n - 1})
    assert dropped(m) == 5
    assert dropped(m, "reader_busy") == 4


def test_the_pump_folds_what_the_channel_brings_from_another_thread():
    m = PipelineMetrics()
    channel = CounterChannel()
    threading.Thread(target=SourceStats(m).pump, args=(channel,), daemon=True).start()
    channel.send("a", {"commit": 7, ALIGN_DROPS: 1})
    channel.send("a", {"commit": 9, ALIGN_DROPS: 1})
    deadline = time.monotonic() + 10
    while decoded(m) < 9 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert decoded(m) == 9
    assert dropped(m) == 1


def test_the_pump_ends_quietly_when_the_channel_closes():
    # at a process's end the queue closes under the waiting pump: it returns, where it
    # raised in its thread (a traceback printed as the interpreter exits)
    m = PipelineMetrics()
    channel = CounterChannel()
    errors: list[BaseException] = []
    thread = threading.Thread(
        target=lambda: _run_recording(SourceStats(m).pump, channel, errors), daemon=True
    )
    thread.start()
    channel.send("a", {"commit": 3})
    deadline = time.monotonic() + 10
    while decoded(m) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    channel.close()
    thread.join(5)
    assert not thread.is_alive()
    assert errors == []
    assert decoded(m) == 3


def _run_recording(pump: Any, channel: CounterChannel, errors: list[BaseException]) -> None:
    try:
        pump(channel)
    except BaseException as exc:  # the test reports it
        errors.append(exc)


def test_the_readers_gauges_are_set_to_their_value_not_added_up():
    m = PipelineMetrics()
    stats = SourceStats(m)
    for behind in (12.5, 3.0):
        stats.fold("a", {"gauge|input_behind_seconds": behind, "gauge|input_backlog_records": 9})
    assert m.input_behind._value.get() == 3.0
    assert m.input_backlog._value.get() == 9
