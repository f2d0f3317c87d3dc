"""The latest commit of every group-partition read from ``__consumer_offsets`` (pure).

Offset commits are nearly all of the topic's traffic: at 250,000 group-partitions
committing every 5 s, 50,000 records a second. A Python object per commit (decoded,
put in a dictionary, kept until the next flush) is too dear at that rate, most of it in
cache misses on a working set of that many entries. So the usual record (an
OffsetCommitKey, type 1, with a v1 or v3 value and no metadata) is taken by
:meth:`CommitTable.take_many` as bytes: the key is looked up (decoded once, the
first time: its *slot*), and the slot and the value's bytes are appended to two lists.
Nothing else happens per record. At a flush, the values are decoded at once
(``numpy.frombuffer`` over their join: the layout is fixed), the latest of each slot is
kept (the last in the log, as compaction keeps it), and the commits come out as columns
per topic. Anything the fast path does not take is decoded the careful way
(``pipeline.read.offsets.decode_record``) and comes back through :meth:`add`, in order.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from schemas.topics import OWN_GROUP_PREFIX

#: (topic, group, partition): a group-partition
GroupPartition = tuple[str, str, int]

_KEY_HEAD = struct.Struct(">hh")  # record type, group length
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
#: OffsetCommitValue v3 with no metadata, and v1 with none: fixed layouts
V3_EMPTY = np.dtype(
    [("v", ">i2"), ("offset", ">i8"), ("epoch", ">i4"), ("mlen", ">i2"), ("ts", ">i8")]
)
V1_EMPTY = np.dtype(
    [("v", ">i2"), ("offset", ">i8"), ("mlen", ">i2"), ("ts", ">i8"), ("expire", ">i8")]
)
OWN = -1  # the slot of a key of one of lagpilot's own groups: counted and dropped
DELETED = -2  # an offset column entry: the group-partition's offset was deleted
#: slots kept before the table keeps only the live ones (a deleted group-partition's slot
#: stays until then, so a cluster that churns through groups is bounded: by this, or by
#: twice the live ones)
MAX_SLOTS = 2_000_000


def commit_key(group: str, topic: str, partition: int) -> bytes:
    """An OffsetCommitKey (record type 1) as Kafka writes it: int16 type, group and topic
    as int16-length strings, int32 partition."""
    g, t = group.encode(), topic.encode()
    return b"".join(
        (_INT16.pack(1), _INT16.pack(len(g)), g, _INT16.pack(len(t)), t, _INT32.pack(partition))
    )


def parse_key(key: bytes) -> GroupPartition | None:
    """(topic, group, partition) of a type 1 key, None if it is not one (or malformed)."""
    try:
        ktype, glen = _KEY_HEAD.unpack_from(key)
        if ktype != 1 or glen < 0:
            return None
        p = 4 + glen
        (tlen,) = _INT16.unpack_from(key, p)
        p2 = p + 2 + tlen
        (partition,) = _INT32.unpack_from(key, p2)
        if tlen < 0 or p2 + 4 != len(key):
            return None
        return key[p + 2 : p2].decode(), key[4:p].decode(), partition
    except (struct.error, UnicodeDecodeError):
        return None


class Record(NamedTuple):
    """A record as ``take_many`` reads a confluent-kafka message: its key and value."""

    k: Any
    v: Any

    def key(self) -> Any:
        return self.k

    def value(self) -> Any:
        return self.v


class TopicCommits(NamedTuple):
    """One topic's commits of a drain, as columns (``group`` indexes ``groups``), and its
    deleted ``[group, partition]``."""

    groups: list[str]
    group: list[int]
    partition: list[int]
    offset: list[int]
    commit_ts_ms: list[int]
    deleted: list[list[Any]]


class _Columns:
    """Per-slot numpy columns, grown by doubling."""

    def __init__(self) -> None:
        self.topic = np.zeros(0, np.int32)
        self.group = np.zeros(0, np.int32)
        self.partition = np.zeros(0, np.int64)
        self.known_offset = np.zeros(0, np.int64)  # -1: none (never, or deleted)
        self.known_ts = np.zeros(0, np.int64)

    def grow(self, n: int) -> None:
        size = max(1024, 2 * n)
        for name, fill in (("topic", 0), ("group", 0), ("partition", 0)):
            old = getattr(self, name)
            new = np.full(size, fill, old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)
        for name in ("known_offset", "known_ts"):
            old = getattr(self, name)
            new = np.full(size, -1, np.int64)
            new[: len(old)] = old
            setattr(self, name, new)


class CommitTable:
    """Latest commit per group-partition since the last drain, and the last known one of
    every live group-partition (to re-send). See the module's docstring."""

    def __init__(self, own_prefix: str = OWN_GROUP_PREFIX) -> None:
        self.own_prefix = own_prefix
        self._slot: dict[bytes, int] = {}  # key bytes -> slot (OWN for own groups)
        self._key_of: list[bytes] = []  # slot -> key bytes
        self._cols = _Columns()
        self._topics: list[str] = []
        self._topic_id: dict[str, int] = {}
        self._groups: list[str] = []
        self._group_id: dict[str, int] = {}
        # what was read since the last drain, in log order: the fast path's slots and
        # value bytes, then (materialized) chunks of (slots, offsets, commit ts)
        self._slots: list[int] = []
        self._values: list[bytes] = []
        self._chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._compact_at = MAX_SLOTS
        self._resend_at = 0  # the next slot a partial re-send starts at
        self.taken = 0  # commits taken by the fast path, since ``take_counts``
        self.own = 0  # own groups' commits dropped, since ``take_counts``
        #: names of the groups whose commits are handed on (group health's ``groups``)
        self.tracked: Any = None
        self._for_tracked: list[tuple[GroupPartition, int, int]] = []

    # -- slots

    def known(self) -> dict[GroupPartition, tuple[int, int]]:
        """The last known commit of every live group-partition (as of the last drain)."""
        n = len(self._key_of)
        live = np.flatnonzero(self._cols.known_offset[:n] >= 0).tolist()
        c = self._cols
        return {self._gp(i): (int(c.known_offset[i]), int(c.known_ts[i])) for i in live}

    def _new_slot(self, key: bytes, gp: GroupPartition) -> int:
        if len(self._key_of) >= self._compact_at:
            self._compact()
        topic, group, partition = gp
        t = self._topic_id.get(topic)
        if t is None:
            t = self._topic_id[topic] = len(self._topics)
            self._topics.append(topic)
        g = self._group_id.get(group)
        if g is None:
            g = self._group_id[group] = len(self._groups)
            self._groups.append(group)
        slot = len(self._key_of)
        if slot >= len(self._cols.topic):
            self._cols.grow(slot + 1)
        self._cols.topic[slot], self._cols.group[slot] = t, g
        self._cols.partition[slot] = partition
        self._key_of.append(key)
        self._slot[key] = slot
        return slot

    def _learn(self, key: Any) -> int | None:
        """The slot of a type 1 key seen for the first time; None: not one."""
        if type(key) is not bytes or len(key) < 4 or key[1] != 1 or key[0] != 0:
            return None
        gp = parse_key(key)
        if gp is None:
            return None
        if self.own_prefix and gp[1].startswith(self.own_prefix):
            self._slot[key] = OWN
            return OWN
        return self._new_slot(key, gp)

    def _slot_of(self, topic: str, group: str, partition: int) -> int:
        key = commit_key(group, topic, partition)
        slot = self._slot.get(key)
        return self._new_slot(key, (topic, group, partition)) if slot is None else slot

    def _compact(self) -> None:
        """Keep only the slots of live group-partitions (what is pending is folded in
        first), numbered anew."""
        self._materialize()
        pending = self._pending_columns()
        cols, n = self._cols, len(self._key_of)
        live = np.flatnonzero(cols.known_offset[:n] >= 0)
        if pending is not None:
            live = np.union1d(live, pending[0])
        remap = np.full(n, -1, np.int64)
        remap[live] = np.arange(len(live))
        keys = [self._key_of[i] for i in live.tolist()]
        new = _Columns()
        new.grow(len(live) + 1)
        for name in ("topic", "group", "partition", "known_offset", "known_ts"):
            getattr(new, name)[: len(live)] = getattr(cols, name)[live]
        self._cols, self._key_of = new, keys
        self._slot = {k: i for i, k in enumerate(keys)}
        self._compact_at = max(MAX_SLOTS, 2 * len(keys))  # not again before it doubles
        if pending is not None:
            s, o, t = pending
            self._chunks = [(remap[s], o, t)]

    # -- reading

    def take_many(self, msgs: Sequence[Any], start: int, now_ms: int = 0) -> int:
        """Take the plain offset commits of ``msgs`` (messages: ``key()``, ``value()``)
        from ``start`` on; returns the index of the first one that is not (``len(msgs)``
        when all were): decode that one the careful way, ``add`` it, and call again
        after it, so records apply in their order."""
        slot_of, slots, values = self._slot, self._slots, self._values
        learn = self._learn
        taken = own = 0
        i, n = start, len(msgs)
        while i < n:
            m = msgs[i]
            key = m.key()
            slot = slot_of.get(key)
            if slot is None:
                slot = learn(key)
                if slot is None:
                    break
                # a new slot may have compacted the table (its lists and numbering anew)
                slot_of, slots, values = self._slot, self._slots, self._values
            value = m.value()
            if type(value) is not bytes:  # a tombstone (a deletion), an error
                break
            size = len(value)
            if size == 24:  # v3: metadata length at 14..15 must be 0
                if value[1] != 3 or value[0] or value[14] or value[15]:
                    break
            elif size == 28:  # v1: at 10..11
                if value[1] != 1 or value[0] or value[10] or value[11]:
                    break
            else:
                break
            i += 1
            if slot < 0:
                own += 1
                continue
            slots.append(slot)
            values.append(value)
            taken += 1
        self.taken += taken
        self.own += own
        return i

    def add(self, topic: str, group: str, partition: int, offset: int, ts_ms: int) -> None:
        """A commit decoded the careful way (``offset`` DELETED: its deletion)."""
        if self.own_prefix and group.startswith(self.own_prefix):
            return
        self._materialize()
        slot = self._slot_of(topic, group, partition)
        self._chunks.append(
            (np.array([slot], np.int64), np.array([offset], np.int64), np.array([ts_ms], np.int64))
        )  # (not handed on: the caller gave the record to group health itself)

    def resend_known(self, share: float = 1.0) -> int:
        """Queue live known commits again: all of them, or the next ``share`` of the
        group-partitions (a cursor goes round them, so calls with ``share`` 1/60 once a
        second re-send each one every minute, evenly); returns how many."""
        self._materialize()
        n = len(self._key_of)
        cols = self._cols
        pending = self._pending_columns()
        if pending is not None:  # the pending ones first become known
            self._fold_known(*_last_of_each(*pending))
            self._chunks = [pending]
        if share >= 1.0 or not n:
            live = np.flatnonzero(cols.known_offset[:n] >= 0)
        else:
            k = min(n, max(1, math.ceil(n * share)))
            at = self._resend_at % n
            self._resend_at = at + k
            slots = (at + np.arange(k)) % n
            live = slots[cols.known_offset[slots] >= 0]
        if len(live):
            self._chunks.append((live, cols.known_offset[live], cols.known_ts[live]))
        return len(live)

    def take_counts(self) -> tuple[int, int]:
        """(commits taken fast, own groups' commits dropped) since the last call."""
        counts = self.taken, self.own
        self.taken = self.own = 0
        return counts

    def take_tracked(self) -> list[tuple[GroupPartition, int, int]]:
        """The commits of ``tracked`` groups read since the last call, in read order."""
        self._materialize()
        out, self._for_tracked = self._for_tracked, []
        return out

    # -- turning bytes into columns

    def _materialize(self) -> None:
        """The fast path's bytes since the last call, decoded into one chunk."""
        if not self._slots:
            return
        slots = np.array(self._slots, np.int64)
        values = self._values
        self._slots, self._values = [], []
        blob = b"".join(values)
        if len(blob) == 24 * len(values):
            rows = np.frombuffer(blob, V3_EMPTY)
            offsets, ts = rows["offset"].astype(np.int64), rows["ts"].astype(np.int64)
        elif len(blob) == 28 * len(values):
            rows = np.frombuffer(blob, V1_EMPTY)
            offsets, ts = rows["offset"].astype(np.int64), rows["ts"].astype(np.int64)
        else:  # both versions in one batch (a broker upgrade): each by its own layout
            offsets, ts = np.zeros(len(values), np.int64), np.zeros(len(values), np.int64)
            for j, v in enumerate(values):
                row = np.frombuffer(v, V3_EMPTY if len(v) == 24 else V1_EMPTY)[0]
                offsets[j], ts[j] = row["offset"], row["ts"]
        self._chunks.append((slots, offsets, ts))
        self._hand_on(slots, offsets, ts)

    def _hand_on(self, slots: np.ndarray, offsets: np.ndarray, ts: np.ndarray) -> None:
        """The commits of tracked groups in a chunk, for ``take_tracked``."""
        tracked = self.tracked
        if not tracked:
            return
        ids = [g for name in tracked if (g := self._group_id.get(name)) is not None]
        if not ids:
            return
        hits = np.flatnonzero(np.isin(self._cols.group[slots], ids))
        for j in hits.tolist():
            slot = int(slots[j])
            self._for_tracked.append((self._gp(slot), int(offsets[j]), int(ts[j])))

    def _gp(self, slot: int) -> GroupPartition:
        c = self._cols
        return (
            self._topics[int(c.topic[slot])],
            self._groups[int(c.group[slot])],
            int(c.partition[slot]),
        )

    def _pending_columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        if not self._chunks:
            return None
        if len(self._chunks) == 1:
            return self._chunks[0]
        s, o, t = zip(*self._chunks, strict=True)
        return np.concatenate(s), np.concatenate(o), np.concatenate(t)

    def _fold_known(self, slots: np.ndarray, offsets: np.ndarray, ts: np.ndarray) -> None:
        cols = self._cols
        gone = offsets == DELETED
        cols.known_offset[slots] = np.where(gone, -1, offsets)
        cols.known_ts[slots] = np.where(gone, -1, ts)

    @property
    def pending(self) -> bool:
        return bool(self._slots or self._chunks)

    def drain(self) -> dict[str, TopicCommits]:
        """The latest commit of each group-partition read since the last drain, as
        columns per topic, and the deletions; known commits are updated."""
        self._materialize()
        pending = self._pending_columns()
        self._chunks = []
        if pending is None:
            return {}
        slots, offsets, ts = _last_of_each(*pending)
        self._fold_known(slots, offsets, ts)
        cols = self._cols
        topic_ids = cols.topic[slots]
        order = np.argsort(topic_ids, kind="stable")
        slots, offsets, ts, topic_ids = slots[order], offsets[order], ts[order], topic_ids[order]
        firsts = np.flatnonzero(np.r_[True, topic_ids[1:] != topic_ids[:-1]])
        ends = np.r_[firsts[1:], len(slots)]
        out = {}
        for a, b in zip(firsts.tolist(), ends.tolist(), strict=True):
            s, o, t = slots[a:b], offsets[a:b], ts[a:b]
            gone = o == DELETED
            live = ~gone
            names = self._groups
            ids, local = np.unique(cols.group[s[live]], return_inverse=True)
            deleted = sorted(
                [names[g], p]
                for g, p in zip(
                    cols.group[s[gone]].tolist(), cols.partition[s[gone]].tolist(), strict=True
                )
            )
            out[self._topics[int(topic_ids[a])]] = TopicCommits(
                groups=[names[g] for g in ids.tolist()],
                group=local.tolist(),
                partition=cols.partition[s[live]].tolist(),
                offset=o[live].tolist(),
                commit_ts_ms=t[live].tolist(),
                deleted=deleted,
            )
        return out


def _last_of_each(
    slots: np.ndarray, offsets: np.ndarray, ts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Of entries in log order, the last of each slot (sorted by slot)."""
    n = len(slots)
    _, first_from_end = np.unique(slots[::-1], return_index=True)
    last = n - 1 - first_from_end
    return slots[last], offsets[last], ts[last]
