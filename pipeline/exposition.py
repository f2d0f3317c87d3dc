"""The per-partition lag families as Prometheus text, written straight from the model's
(groups x partitions) arrays, and a child process that does the writing.

At 50,000 group-partitions a scrape is 400,000 lines: about a quarter of a second of
string formatting that holds the GIL, and seconds of wall time on a loaded machine. In the
model's process that time is taken from the model: the watermark samples queue up behind
it (a benchmark saw the processing delay jump from 0.3 s to 1.4 s at every scrape).
``RenderProcess`` does the formatting in a child process: the pipeline only pickles the
latest arrays (a few MB, milliseconds) and waits, GIL released, for the text.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import signal
import threading
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from pipeline.model.events import TopicObservation
from schemas import LagStatus
from schemas.runtime.errors import LagpilotError

log = logging.getLogger(__name__)

STATUS_NAMES = [s.value for s in LagStatus]

#: (name, help, TopicObservation field) of the per-partition gauges
PARTITION_GAUGES = (
    ("lagpilot_lag_offsets", "Offset lag: high watermark - committed.", "lag"),
    (
        "lagpilot_time_lag_seconds",
        "Seconds since the high watermark passed the committed offset.",
        "time_lag_s",
    ),
    (
        "lagpilot_lag_rate_messages_per_second",
        "Least-squares slope of the offset lag over the model window.",
        "lag_rate_per_s",
    ),
    (
        "lagpilot_lag_acceleration_messages_per_second_squared",
        "Second derivative of the offset lag over the model window.",
        "lag_accel_per_s2",
    ),
    (
        "lagpilot_produce_rate_messages_per_second",
        "Rate the partition's high watermark grows.",
        "produce_rate_per_s",
    ),
    (
        "lagpilot_consume_rate_messages_per_second",
        "Rate the group's committed offset grows.",
        "consume_rate_per_s",
    ),
)

#: every family ``render_lag`` writes, in order, with its help text
FAMILIES = (
    *((name, help_) for name, help_, _ in PARTITION_GAUGES),
    (
        "lagpilot_partition_status",
        "1 for the partition's current status (OK, WARN, ERR, STALL, STOP, REWIND).",
    ),
    (
        "lagpilot_group_max_time_lag_seconds",
        "Worst time lag over the group's partitions of the topic.",
    ),
    ("lagpilot_group_lag_offsets", "Total offset lag of the group on the topic."),
    (
        "lagpilot_group_status_code",
        "Worst status of the group on the topic: 0 OK, 1 WARN, 2 ERR, 3 STALL, 4 STOP, 5 REWIND.",
    ),
)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class LabelCache:
    """Label text of every (group, partition) cell and of every group, per topic, kept
    while the topic's groups and partitions stay the same."""

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

    def keep(self, topics: Iterable[str]) -> None:
        """Forget the topics not in ``topics`` (gone, or moved to another replica)."""
        alive = set(topics)
        for topic in [t for t in self._by_topic if t not in alive]:
            del self._by_topic[topic]


def render_lag(
    observations: list[TopicObservation],
    names: frozenset[str] | None = None,
    labels: LabelCache | None = None,
) -> bytes:
    """The lag families of ``observations`` in Prometheus' text format (only ``names``,
    if given: a ``/metrics?name[]=...`` scrape)."""
    wanted = [(n, h) for n, h in FAMILIES if names is None or n in names]
    if not wanted:
        return b""
    labels = labels if labels is not None else LabelCache()
    lines: dict[str, list[str]] = {name: [] for name, _ in wanted}
    for o in observations:
        if len(o):
            _render_topic(o, lines, labels)
    out: list[str] = []
    for name, help_ in wanted:
        out.append(f"# HELP {name} {help_}\n# TYPE {name} gauge")
        out.extend(lines[name])
    return ("\n".join(out) + "\n").encode()


def _render_topic(o: TopicObservation, lines: dict[str, list[str]], cache: LabelCache) -> None:
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


# --------------------------------------------------------------------------- the child


class RenderError(LagpilotError):
    """The render process failed or did not answer; ``retriable``: a new one is started
    on the next scrape, and this scrape is rendered in-process."""

    retriable = True


def _serve(conn: Any) -> None:
    """The child's loop: (observations, names) in, the text out; ends with the parent
    (its end of the pipe closes, also on kill -9)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    cache = LabelCache()
    while True:
        try:
            observations, names = conn.recv()
        except (EOFError, OSError):
            return
        try:
            cache.keep(o.topic for o in observations)
            conn.send_bytes(b"+" + render_lag(observations, names, cache))
        except Exception as exc:  # answered, so the parent never waits for nothing
            conn.send_bytes(b"-" + repr(exc).encode())


class RenderProcess:
    """``render_lag`` in a child process (started on first use, again after a failure)."""

    def __init__(self, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._proc: Any = None
        self._conn: Any = None

    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(
            target=_serve, args=(child,), name="lagpilot-metrics-render", daemon=True
        )
        self._proc.start()
        child.close()

    def render(
        self, observations: list[TopicObservation], names: frozenset[str] | None = None
    ) -> bytes:
        with self._lock:
            try:
                if self._proc is None or not self._proc.is_alive():
                    self._start()
                self._conn.send((observations, names))
                if not self._conn.poll(self.timeout_s):
                    raise RenderError(f"no answer in {self.timeout_s:.0f}s")
                reply = self._conn.recv_bytes()
            except RenderError:
                self.close()
                raise
            except (OSError, EOFError, ValueError) as exc:  # a dead child, a broken pipe
                self.close()
                raise RenderError(f"render process failed: {exc!r}") from exc
        if reply[:1] != b"+":
            raise RenderError(f"render process: {reply[1:].decode(errors='replace')}")
        return reply[1:]

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(5)
        self._proc = self._conn = None
