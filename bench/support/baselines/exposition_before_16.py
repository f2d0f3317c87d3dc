"""Baseline: the lag families' text as ``pipeline.observe.exposition.render_lag`` wrote it
before issue 16's /metrics work.

Why it stays: it is the "before" of ``bench.perf.metrics_render`` (``make bench-metrics``:
the ``*_before`` figures of ``bench/results/metrics_render.json``, and the ratios to them in
docs/benchmarks.md), and the reference the unit tests
(``tests/unit/pipeline/observe/test_exposition_text.py``) hold today's renderer to: the same
bytes for the same observations. Not shipped; not to be changed but to mirror the old code.

One Python string per line (an f-string of a cached label and ``repr`` of the value), the
lines of every family joined, then encoded: at 250,000 group-partitions 1.75 million lines,
and the text copied three times on the way out. ``RenderProcessBefore`` is the child as it
was: the whole observations pickled to it on every scrape, the whole text sent back in one
message (and joined to the registry's text by the HTTP handler, one more copy).
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from pipeline.model.events import TopicObservation
from pipeline.observe.exposition import FAMILIES, PARTITION_GAUGES, STATUS_NAMES


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class LabelCacheBefore:
    """Label text of every (group, partition) cell and of every group, per topic."""

    def __init__(self) -> None:
        self._by_topic: dict[str, tuple[tuple[str, ...], int, list[str], list[str]]] = {}

    def get(self, o: TopicObservation) -> tuple[list[str], list[str]]:
        key = (tuple(o.groups), o.topic_partitions)
        cached = self._by_topic.get(o.topic)
        if cached is not None and cached[:2] == key:
            return cached[2], cached[3]
        t = _label(o.topic)
        groups = [_label(g) for g in o.groups]
        cells = [
            f'group="{g}",topic="{t}",partition="{p}"'
            for g in groups
            for p in range(o.topic_partitions)
        ]
        per_group = [f'group="{g}",topic="{t}"' for g in groups]
        self._by_topic[o.topic] = (*key, cells, per_group)
        return cells, per_group


def render_lag_before(
    observations: list[TopicObservation],
    names: frozenset[str] | None = None,
    labels: LabelCacheBefore | None = None,
) -> bytes:
    wanted = [(n, h) for n, h in FAMILIES if names is None or n in names]
    if not wanted:
        return b""
    labels = labels if labels is not None else LabelCacheBefore()
    lines: dict[str, list[str]] = {name: [] for name, _ in wanted}
    for o in observations:
        if len(o):
            _render_topic(o, lines, labels)
    out: list[str] = []
    for name, help_ in wanted:
        out.append(f"# HELP {name} {help_}\n# TYPE {name} gauge")
        out.extend(lines[name])
    return ("\n".join(out) + "\n").encode()


def _render_topic(
    o: TopicObservation, lines: dict[str, list[str]], cache: LabelCacheBefore
) -> None:
    cells, per_group = cache.get(o)
    flat = np.flatnonzero(o.mask)
    labels = [cells[i] for i in flat.tolist()]
    g_idx, p_idx = np.divmod(flat, max(1, o.topic_partitions))
    for name, _, attr in PARTITION_GAUGES:
        if name in lines:
            arr = getattr(o, attr)
            vals = arr[p_idx] if arr.ndim == 1 else arr[g_idx, p_idx]
            floats = np.nan_to_num(vals.astype(np.float64), posinf=0.0, neginf=0.0).tolist()
            lines[name].extend(
                f"{name}{{{lab}}} {v!r}" for lab, v in zip(labels, floats, strict=True)
            )
    if "lagpilot_partition_status" in lines:
        lines["lagpilot_partition_status"].extend(
            f'lagpilot_partition_status{{{lab},status="{STATUS_NAMES[st]}"}} 1.0'
            for lab, st in zip(labels, o.status[g_idx, p_idx].tolist(), strict=True)
        )
    active = o.active
    per_group_values: dict[str, Callable[[], np.ndarray]] = {
        "lagpilot_group_max_time_lag_seconds": lambda: np.where(o.mask, o.time_lag_s, 0.0)[
            active
        ].max(axis=1),
        "lagpilot_group_lag_offsets": lambda: np.where(o.mask, o.lag, 0)[active].sum(axis=1),
        "lagpilot_group_status_code": lambda: o.group_status()[active],
    }
    group_labels = [per_group[g] for g in active.tolist()]
    for name, values in per_group_values.items():
        if name in lines:
            lines[name].extend(
                f"{name}{{{lab}}} {v!r}"
                for lab, v in zip(group_labels, values().astype(np.float64).tolist(), strict=True)
            )


def _serve_before(conn: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    cache = LabelCacheBefore()
    while True:
        try:
            observations, names = conn.recv()
        except (EOFError, OSError):
            return
        try:
            conn.send_bytes(b"+" + render_lag_before(observations, names, cache))
        except Exception as exc:
            conn.send_bytes(b"-" + repr(exc).encode())


class RenderProcessBefore:
    """``render_lag_before`` in a child process, as ``RenderProcess`` was (the failure
    handling left out: the benchmark only times it)."""

    def __init__(self, timeout_s: float = 120.0) -> None:
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve_before, args=(child,), daemon=True)
        self.proc.start()
        child.close()

    def render(
        self, observations: list[TopicObservation], names: frozenset[str] | None = None
    ) -> bytes:
        with self._lock:
            self._conn.send((observations, names))
            if not self._conn.poll(self.timeout_s):
                raise TimeoutError(f"no answer in {self.timeout_s:.0f}s")
            reply: bytes = self._conn.recv_bytes()
        if reply[:1] != b"+":
            raise RuntimeError(reply[1:].decode(errors="replace"))
        return reply[1:]

    def close(self) -> None:
        self._conn.close()
        self.proc.kill()
        self.proc.join(5)
