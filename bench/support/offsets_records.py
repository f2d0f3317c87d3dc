"""``__consumer_offsets`` records for the benchmarks: realistic offset commits, and a fuzzed
corpus grown from them.

``build_records``: the commits ``bench.perf.decode`` times both decoders on (encoded from the
stated layout table, ``bench.support.layout_codec``); the fault benchmark's decoder row
(``bench.faults.decoder``) and garbage-topic row (``bench.faults.garbage``) mutate them
with ``corpus``.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator

from bench.support.layout_codec import encode

#: one realistic record: key and value bytes
Commit = tuple[bytes, bytes]
#: one fuzzed record: either side may be missing
Record = tuple[bytes | None, bytes | None]

DOMAINS = ("orders", "payments", "documents", "agents.tasks", "inference", "audit", "tiff-ingest")
SERVICES = ("summarizer", "ocr-worker", "router", "billing", "indexer", "planner", "notifier")


def build_records(n: int, seed: int = 7) -> list[Commit]:
    """``n`` commits from ~300 groups over ~40 topics, 24 partitions each; v3 for modern
    clients, v1 for those that set an expiry (Redpanda writes v1 then)."""
    rng = random.Random(seed)
    topics = [f"{d}.v{i}" for d in DOMAINS for i in range(1, 7)]
    groups = [f"{s}-{env}-{i:03d}" for s in SERVICES for env in ("prod", "stg") for i in range(22)]
    subscriptions = {g: rng.sample(topics, rng.randint(1, 3)) for g in groups}
    next_offset: dict[tuple[str, str, int], int] = {}
    ts = 1_700_000_000_000
    out = []
    for _ in range(n):
        group = rng.choice(groups)
        topic = rng.choice(subscriptions[group])
        partition = rng.randrange(24)
        k = (group, topic, partition)
        offset = next_offset[k] = next_offset.get(k, rng.randrange(10**6)) + rng.randint(1, 5_000)
        ts += rng.randint(0, 3)
        key = encode("OffsetCommitKey", 1, group=group, topic=topic, partition=partition)
        if rng.random() < 0.3:
            value = encode(
                "OffsetCommitValue",
                1,
                offset=offset,
                metadata="",
                commit_timestamp=ts,
                expire_timestamp=ts + 7 * 86_400_000,
            )
        else:
            value = encode(
                "OffsetCommitValue",
                3,
                offset=offset,
                leader_epoch=rng.randint(0, 40),
                metadata=rng.choice(("", "", "", "worker-7", '{"lane":2}')),
                commit_timestamp=ts,
            )
        out.append((key, value))
    return out


def _seeds(rng: random.Random) -> list[Record]:
    commits: list[Record] = list(build_records(2_000, seed=rng.randrange(1 << 30)))
    group_key = struct.pack(">hh", 2, 5) + b"group"
    extra: list[Record] = [
        (group_key, None),  # group removed
        (group_key, struct.pack(">hh", 3, 8) + b"consumer" + b"\x00" * 40),
        (commits[0][0], None),  # offset deleted
    ]
    for record_type in (3, 4, 5, 6, 7, 8, 9, 12, 15, 16, 17, 99):
        extra.append((struct.pack(">hh", record_type, 5) + b"group", b"\x00\x00" + b"\x01" * 30))
    return commits + extra


def _mutate(rng: random.Random, key: bytes | None, value: bytes | None) -> Record:
    how = rng.randrange(12)
    k = bytearray(key or b"")
    v = bytearray(value or b"")
    target = k if rng.random() < 0.4 else v
    if how == 0 and target:  # flip 1..4 bytes
        for _ in range(rng.randint(1, 4)):
            target[rng.randrange(len(target))] = rng.randrange(256)
    elif how == 1 and target:  # truncate
        del target[rng.randrange(len(target)) :]
    elif how == 2:  # append junk
        target.extend(rng.randbytes(rng.randint(1, 64)))
    elif how == 3 and len(k) >= 2:  # another record type, including negative ones
        k[0:2] = struct.pack(">h", rng.choice((-1, 0, 1, 2, 3, 8, 9, 16, 40, 32767, -32768)))
    elif how == 4 and len(v) >= 2:  # another value version
        v[0:2] = struct.pack(">h", rng.choice((-1, 0, 1, 2, 3, 4, 5, 9, 32767, -32768)))
    elif how == 5 and len(target) >= 4:  # a length field set to something absurd
        at = rng.randrange(len(target) - 1)
        target[at : at + 2] = struct.pack(">h", rng.choice((-1, -2, 32767, 4096, 0)))
    elif how == 6 and len(target) >= 6:  # a varint/int32 region turned to 0xff
        at = rng.randrange(len(target) - 4)
        target[at : at + 4] = b"\xff\xff\xff\xff"
    elif how == 7:  # random bytes of a random size
        return (rng.randbytes(rng.randint(0, 80)), rng.randbytes(rng.randint(0, 120)))
    elif how == 8:  # empty key or value
        return (b"", bytes(v)) if rng.random() < 0.5 else (bytes(k), b"")
    elif how == 9:  # null key
        return (None, bytes(v))
    elif how == 10:  # invalid UTF-8 in the strings
        if len(k) > 5:
            k[4] = 0xC3
            k[5] = 0x28
    else:  # swap key and value
        return (bytes(v), bytes(k))
    return (bytes(k), None if value is None and not v else bytes(v))


def corpus(n: int, seed: int = 18) -> Iterator[Record]:
    rng = random.Random(seed)
    seeds = _seeds(rng)
    for _ in range(n):
        key, value = seeds[rng.randrange(len(seeds))]
        rec: Record = (key, value)
        for _ in range(rng.randint(0, 3)):  # 0: a well-formed record among the rest
            rec = _mutate(rng, rec[0], rec[1])
        yield rec
