"""Fault row 6 (pure part): fuzzed and mutated ``__consumer_offsets`` records through the
decoder. Every record must come back as one of the decoder's results (an event, or
``Skipped`` with a reason): a raise is a crash, anything else is unclassified.

The corpus (``bench.support.offsets_records``) starts from real-shaped records
(``bench.perf.decode``'s commits, plus group metadata, KIP-848 and share-group keys and
tombstones) and mutates them the ways a broken
broker, a bit flip or a hostile producer would: flipped bytes, truncations, appended junk,
rewritten record types and versions, length fields set to huge or negative values, empty and
null keys and values, and plain random bytes.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any, get_args

from bench.support.offsets_records import corpus
from pipeline.read import offsets
from pipeline.read.offsets import Skipped

#: Every class ``decode_record`` may return: a result of another class is unclassified.
_DECODED_TYPES: tuple[type, ...] = tuple(
    t for t in get_args(offsets.Decoded) if isinstance(t, type)
)


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
