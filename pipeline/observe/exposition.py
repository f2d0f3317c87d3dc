"""The per-partition lag families as Prometheus text, written straight from the model's
(groups x partitions) arrays (pure; ``pipeline.observe.render_process`` runs it in a child).

At 250,000 group-partitions a full scrape is 1.75 million lines. What keeps it cheap
(``make bench-metrics`` measures it):

- no Python string per line: a (family, topic) is one ``bytes.join`` of three pieces per
  line: the line up to its partition (``\\nNAME{group="G",topic="T",partition="``, built
  once per topic, group and family), the partition's ``P"} `` (shared by every topic) and
  the value;
- values formatted a column at a time by orjson: its shortest round-trip digits are
  ``repr``'s, and so is its text wherever ``repr`` writes no exponent (``1e-4 <= |v| <
  1e16``, and 0); the few values outside that range, NaN and infinities go through
  ``repr``. The same bytes as one ``repr`` per value, several times faster;
- the text is yielded in chunks and relayed as it comes: neither process holds it whole.

``pipeline.observe.render_process.RenderProcess`` runs the formatting in a child process, off the
model's interpreter.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from schemas import LagStatus

if TYPE_CHECKING:
    from pipeline.model.events import TopicObservation

log = logging.getLogger(__name__)

#: a piece of the exposition text as it is written or relayed (a relayed one is a view of
#: the message it came in, not a copy)
Chunk = bytes | memoryview

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
_GAUGE_FIELDS = {name: attr for name, _, attr in PARTITION_GAUGES}

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

#: where ``repr`` writes a float without an exponent, and orjson writes the same text
_POSITIONAL_FROM, _POSITIONAL_BELOW = 1e-4, 1e16


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _objects(items: Sequence[Any]) -> np.ndarray:
    """A 1-d object array of ``items`` (fancy indexing it gathers references in C)."""
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


def format_floats(values: np.ndarray) -> list[bytes]:
    """``repr(float(v)).encode()`` of every value, in bulk.

    orjson writes the column (its digits are the shortest that round-trip, as ``repr``'s,
    and where ``repr`` writes no exponent its text is the same); the values outside that
    range (``|v| < 1e-4`` but not 0, ``|v| >= 1e16``, NaN, infinities) are then written by
    ``repr`` one at a time: orjson spells them differently (``1e-5``, ``null``).
    """
    a = np.ascontiguousarray(values, dtype=np.float64).ravel()
    if not a.size:
        return []
    out = orjson.dumps(a, option=orjson.OPT_SERIALIZE_NUMPY)[1:-1].split(b",")
    mag = np.abs(a)
    odd = np.flatnonzero(~((mag >= _POSITIONAL_FROM) & (mag < _POSITIONAL_BELOW)) & (a != 0))
    for i, v in zip(odd.tolist(), a[odd].tolist(), strict=True):
        out[i] = repr(v).encode()
    return out


def _finite(values: np.ndarray) -> np.ndarray:
    """A per-partition gauge's values as written: NaN and infinities as 0."""
    return np.nan_to_num(values.astype(np.float64), posinf=0.0, neginf=0.0)


@dataclass(frozen=True)
class LagColumns:
    """What the lag families show of a ``TopicObservation``: 8 of its 16 arrays, and the
    names. What crosses the pipe to the render process."""

    topic: str
    groups: list[str]
    mask: np.ndarray
    lag: np.ndarray
    time_lag_s: np.ndarray
    lag_rate_per_s: np.ndarray
    lag_accel_per_s2: np.ndarray
    produce_rate_per_s: np.ndarray  # (P,)
    consume_rate_per_s: np.ndarray
    status: np.ndarray

    @classmethod
    def of(cls, o: TopicObservation | LagColumns) -> LagColumns:
        if isinstance(o, LagColumns):
            return o
        return cls(
            topic=o.topic,
            groups=o.groups,
            mask=o.mask,
            lag=o.lag,
            time_lag_s=o.time_lag_s,
            lag_rate_per_s=o.lag_rate_per_s,
            lag_accel_per_s2=o.lag_accel_per_s2,
            produce_rate_per_s=o.produce_rate_per_s,
            consume_rate_per_s=o.consume_rate_per_s,
            status=o.status,
        )


class _TopicLabels:
    """One topic's line starts, per family and group (built on first use), as bytes."""

    def __init__(self, topic: str, groups: Sequence[str]) -> None:
        self.groups = tuple(groups)
        t = _label(topic)
        self._labels = [f'group="{_label(g)}",topic="{t}"' for g in groups]
        self._starts: dict[str, np.ndarray] = {}

    def starts(self, name: str, per_partition: bool) -> np.ndarray:
        """``\\nNAME{group="G",topic="T",partition="`` per group (``per_partition``), or
        ``\\nNAME{group="G",topic="T"} ``."""
        got = self._starts.get(name)
        if got is None:
            end = ',partition="' if per_partition else "} "
            got = _objects([f"\n{name}{{{lab}{end}".encode() for lab in self._labels])
            self._starts[name] = got
        return got


class LabelCache:
    """The label text of the lag families as pieces of bytes: per topic, the start of a
    line up to its partition for each family and group (kept while the topic's groups stay
    the same); per partition, shared by every topic, ``P"} `` and ``P",status="S"} 1.0``.

    At 50 topics x 100 groups x 50 partitions that is 50,000 short bytes for the 10
    families (5,000 topic-groups each), where one label string per group-partition would
    be 250,000. Safe to share between threads:
    an entry is built whole before it is stored and never changed after.
    """

    def __init__(self) -> None:
        self._by_topic: dict[str, _TopicLabels] = {}
        self._partitions = _objects([])
        self._statuses = np.empty((0, len(STATUS_NAMES)), dtype=object)

    def topic(self, topic: str, groups: Sequence[str]) -> _TopicLabels:
        cached = self._by_topic.get(topic)
        if cached is not None and cached.groups == tuple(groups):
            return cached
        self._by_topic[topic] = entry = _TopicLabels(topic, groups)
        return entry

    def partitions(self, width: int) -> np.ndarray:
        """``P"} `` for every partition below ``width`` (at least)."""
        got = self._partitions
        if len(got) < width:
            self._partitions = got = _objects([f'{p}"}} '.encode() for p in range(width)])
        return got

    def statuses(self, width: int) -> np.ndarray:
        """(partitions x status codes): ``P",status="S"} 1.0``."""
        got = self._statuses
        if len(got) < width:
            got = np.empty((width, len(STATUS_NAMES)), dtype=object)
            for p in range(width):
                got[p] = [f'{p}",status="{s}"}} 1.0'.encode() for s in STATUS_NAMES]
            self._statuses = got
        return got

    def keep(self, topics: Iterable[str]) -> None:
        """Forget the topics not in ``topics`` (gone, or moved to another replica)."""
        alive = set(topics)
        for topic in [t for t in self._by_topic if t not in alive]:
            self._by_topic.pop(topic, None)


class _Cells:
    """One topic's modelled group-partitions, indexed once for every family of a render."""

    def __init__(self, c: LagColumns, labels: LabelCache) -> None:
        self.c = c
        self._cache = labels
        self.labels = labels.topic(c.topic, c.groups)
        self.width = c.mask.shape[1] if c.mask.ndim == 2 else 0
        self.flat = np.flatnonzero(c.mask)
        self.g, self.p = np.divmod(self.flat, max(1, self.width))

    def __len__(self) -> int:
        return len(self.flat)

    @functools.cached_property
    def partition_ends(self) -> list[bytes]:
        return self._cache.partitions(self.width)[self.p].tolist()

    @functools.cached_property
    def active(self) -> np.ndarray:
        return np.flatnonzero(self.c.mask.any(axis=1))

    def gauge(self, name: str) -> bytes:
        arr = getattr(self.c, _GAUGE_FIELDS[name])
        if arr.ndim == 1:  # per partition: each value written once, then gathered
            values = _objects(format_floats(_finite(arr)))[self.p].tolist()
        else:
            values = format_floats(_finite(arr[self.g, self.p]))
        parts: list[bytes] = [b""] * (3 * len(values))
        parts[0::3] = self.labels.starts(name, True)[self.g].tolist()
        parts[1::3] = self.partition_ends
        parts[2::3] = values
        return b"".join(parts)

    def status(self) -> bytes:
        name = "lagpilot_partition_status"
        ends = self._cache.statuses(self.width)[self.p, self.c.status[self.g, self.p]].tolist()
        parts: list[bytes] = [b""] * (2 * len(ends))
        parts[0::2] = self.labels.starts(name, True)[self.g].tolist()
        parts[1::2] = ends
        return b"".join(parts)

    def per_group(self, name: str) -> bytes:
        c, active = self.c, self.active
        if name == "lagpilot_group_max_time_lag_seconds":
            values = np.where(c.mask, c.time_lag_s, 0.0)[active].max(axis=1)
        elif name == "lagpilot_group_lag_offsets":
            values = np.where(c.mask, c.lag, 0)[active].sum(axis=1)
        else:  # lagpilot_group_status_code: the worst status of each group
            values = np.where(c.mask, c.status, 0).max(axis=1).astype(np.int8)[active]
        text = format_floats(values)
        parts: list[bytes] = [b""] * (2 * len(text))
        parts[0::2] = self.labels.starts(name, False)[active].tolist()
        parts[1::2] = text
        return b"".join(parts)

    def family(self, name: str) -> bytes:
        if name in _GAUGE_FIELDS:
            return self.gauge(name)
        if name == "lagpilot_partition_status":
            return self.status()
        return self.per_group(name)


def render_chunks(
    observations: Sequence[TopicObservation | LagColumns],
    names: frozenset[str] | None = None,
    labels: LabelCache | None = None,
) -> Iterator[bytes]:
    """The lag families of ``observations`` in Prometheus' text format (only ``names``,
    if given: a ``/metrics?name[]=...`` scrape), a (family, topic) at a time."""
    wanted = [(n, h) for n, h in FAMILIES if names is None or n in names]
    if not wanted:
        return
    labels = labels if labels is not None else LabelCache()
    topics = [c for o in observations if len(c := _Cells(LagColumns.of(o), labels))]
    for i, (name, help_) in enumerate(wanted):
        header = f"# HELP {name} {help_}\n# TYPE {name} gauge".encode()
        yield b"\n" + header if i else header
        for cells in topics:
            yield cells.family(name)
    yield b"\n"


def render_lag(
    observations: Sequence[TopicObservation | LagColumns],
    names: frozenset[str] | None = None,
    labels: LabelCache | None = None,
) -> bytes:
    """``render_chunks`` as one text (the tests' and small callers' form)."""
    return b"".join(render_chunks(observations, names, labels))
