"""Fault row 6 (pure part): fuzzed and mutated ``__consumer_offsets`` records through the
decoder. Every record must come back as one of the decoder's results (an event, or
``Skipped`` with a reason): a raise is a crash, anything else is unclassified.

The corpus starts from real-shaped records (``bench/decode.py``'s commits, plus group
metadata, KIP-848 and share-group keys and tombstones) and mutates them the ways a broken
broker, a bit flip or a hostile producer would: flipped bytes, truncations, appended junk,
rewritten record types and versions, length fields set to huge or negative values, empty and
null keys and values, and plain random bytes.
"""

from __future__ import annotations

import random
import struct
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any, get_args

from bench.decode import build_records
from pipeline.read import offsets
from pipeline.read.offsets import Skipped

Record = tuple[bytes | None, bytes | None]

#: Every class ``decode_record`` may return: a result of another class is unclassified.
_DECODED_TYPES: tuple[type, ...] = tuple(
    t for t in get_args(offsets.Decoded) if isinstance(t, type)
)


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


def run(n: int) -> dict[str, Any]:
    """Decode ``n`` mutated records; count crashes, unclassified results and classes."""
    crashes = 0
    unclassified = 0
    first_crash = ""
    classes: Counter[str] = Counter()
    decode = offsets.decode_record
    t0 = time.perf_counter()
    for key, value in corpus(n):
        try:
            got = decode(key, value)
        except Exception as exc:  # the fault this row looks for
            crashes += 1
            first_crash = first_crash or f"{type(exc).__name__}: {exc}"
            continue
        if isinstance(got, Skipped):
            classes[f"skipped:{got.reason}"] += 1
        elif isinstance(got, _DECODED_TYPES):
            classes[type(got).__name__] += 1
        else:
            unclassified += 1
    elapsed_s = time.perf_counter() - t0
    return {
        "records": n,
        "crashes": crashes,
        "unclassified": unclassified,
        "first_crash": first_crash or None,
        "classes": dict(sorted(classes.items())),
        "elapsed_s": round(elapsed_s, 2),
        "records_per_s": round(n / elapsed_s),
    }
