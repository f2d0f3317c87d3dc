"""The sources' counters, carried in message headers, folded into Prometheus counters."""

from __future__ import annotations

import orjson

from pipeline.app import SourceStats
from pipeline.metrics import PipelineMetrics
from pipeline.read.commits import ALIGN_DROPS, RUN_KEY, STATS_HEADER
from pipeline.read.sampling import STATS_HEADER as SAMPLER_HEADER


def header(run: str, commits: int) -> list[tuple[str, bytes]]:
    return [(STATS_HEADER, orjson.dumps({"commit": commits, RUN_KEY: run}))]


def decoded(m: PipelineMetrics) -> float:
    return m.records.labels("commit")._value.get()


def test_headers_out_of_order_count_each_record_once_and_a_new_run_counts_from_zero():
    m = PipelineMetrics()
    stats = SourceStats(m)
    for total in (100, 300, 200, 300, 250, 400):  # batches consumed from several partitions
        stats(None, None, 0, header("a", total))
    assert decoded(m) == 400
    for total in (50, 20, 80):  # the source restarted: a new run
        stats(None, None, 0, header("b", total))
    assert decoded(m) == 480


def test_samples_dropped_while_the_commits_reader_is_behind_are_counted():
    m = PipelineMetrics()
    stats = SourceStats(m)
    for n in (1, 3, 2):
        raw = orjson.dumps({"tick": 9, "errors": n, "by_kind": {"align:commits_behind": n}})
        stats(None, None, 0, [(SAMPLER_HEADER, raw)])
    assert m.sampler_errors.labels("align", "commits_behind")._value.get() == 3


def test_samples_the_commits_reader_dropped_are_counted_from_its_own_header():
    # the reader holds the samples now: its drops reach the metric even when no sample
    # (whose header would carry them) goes out at all
    m = PipelineMetrics()
    stats = SourceStats(m)
    for n in (2, 5, 4):
        raw = orjson.dumps({"commit": 10, ALIGN_DROPS: n, RUN_KEY: "a"})
        stats(None, None, 0, [(STATS_HEADER, raw)])
    assert m.sampler_errors.labels("align", "commits_behind")._value.get() == 5
