"""A worker's metrics are read from it at scrape time: its counters, its partitions, and the
lanes a spread gave one of them; every known label value is there from the start (0), so a
rate over the first command or failure is not lost."""

from __future__ import annotations

import doctest
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import actuators.workers.metrics as metrics_module
from actuators.workers import WorkerMetrics


class FakeWorker:
    group = "parsers"
    kind = "worker"

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.assigned = {("docs", 0), ("docs", 1)}
        self.paused_now: set[tuple[str, int]] = set()
        self.spread: dict[tuple[str, int], int] = {}

    def stats(self) -> dict[str, int]:
        return dict(self.counts)

    def assignment(self) -> set[tuple[str, int]]:
        return set(self.assigned)

    def paused(self) -> set[tuple[str, int]]:
        return set(self.paused_now)

    def lanes(self, topic: str, partition: int) -> int:
        return self.spread.get((topic, partition), 1)


def _scrape(worker: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    registry.register(WorkerMetrics(worker))
    out = {}
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in fam.samples:
            labels = tuple(
                sorted((k, v) for k, v in s.labels.items() if k not in ("group", "kind"))
            )
            out[(s.name, labels)] = s.value
    return out


def test_every_family_starts_at_zero_with_its_label_values() -> None:
    got = _scrape(FakeWorker())
    for result in ("processed", "retried", "failed"):
        assert got[("lagpilot_worker_messages_total", (("result", result),))] == 0
    for kind in ("spread_partition", "restore_partition", "halt", "resume"):
        assert got[("lagpilot_worker_commands_obeyed_total", (("type", kind),))] == 0
    assert got[("lagpilot_worker_partitions", (("state", "assigned"),))] == 2
    assert got[("lagpilot_worker_partitions", (("state", "paused"),))] == 0


def test_counters_partitions_and_lanes_follow_the_worker() -> None:
    w = FakeWorker()
    w.counts = {"processed": 41, "failed": 1, "obeyed_spread_partition": 1, "commits": 9,
                "control_accepted": 2, "control_other_group": 5}  # fmt: skip
    w.paused_now = {("docs", 1), ("docs", 7)}  # 7: no longer assigned, not counted
    w.spread = {("docs", 0): 6}
    got = _scrape(w)
    assert got[("lagpilot_worker_messages_total", (("result", "processed"),))] == 41
    assert got[("lagpilot_worker_messages_total", (("result", "failed"),))] == 1
    assert got[("lagpilot_worker_commands_obeyed_total", (("type", "spread_partition"),))] == 1
    assert got[("lagpilot_worker_commits_total", (("result", "ok"),))] == 9
    assert got[("lagpilot_worker_control_events_total", (("verdict", "other_group"),))] == 5
    assert got[("lagpilot_worker_partitions", (("state", "paused"),))] == 1
    lanes = {k[1]: v for k, v in got.items() if k[0] == "lagpilot_worker_lanes"}
    assert lanes == {
        (("partition", "0"), ("topic", "docs")): 6,
        (("partition", "1"), ("topic", "docs")): 1,
    }


def test_samples_carry_the_group_and_kind() -> None:
    registry = CollectorRegistry()
    registry.register(WorkerMetrics(FakeWorker()))
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in fam.samples:
            assert s.labels["group"] == "parsers" and s.labels["kind"] == "worker", s


def test_serve_metrics_example_runs() -> None:
    assert doctest.testmod(metrics_module).failed == 0


def test_serve_metrics_is_the_house_server_with_health_and_readiness() -> None:
    import urllib.error
    import urllib.request

    from actuators.workers import MemoryDedupeStore, Worker, serve_metrics

    worker = Worker(bootstrap="127.0.0.1:1", group="parsers", topics=["docs"],
                    handler=lambda msg, ctx: None, dedupe=MemoryDedupeStore(),
                    signing_key=b"k" * 32)  # fmt: skip
    server, thread = serve_metrics(worker, port=0, host="127.0.0.1")
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with urllib.request.urlopen(base + "/metrics", timeout=3) as r:
            assert b'lagpilot_worker_messages_total{group="parsers"' in r.read()
        with urllib.request.urlopen(base + "/healthz", timeout=3) as r:
            assert r.status == 200
        try:
            urllib.request.urlopen(base + "/readyz", timeout=3)
            raise AssertionError("ready before the poll loop runs")
        except urllib.error.HTTPError as exc:
            assert exc.code == 503 and b"not started" in exc.read()
    finally:
        server.shutdown()
        thread.join(3)
    assert not thread.is_alive()
