"""Handlers for the process-mode broker tests, at module level: a worker process imports them
by name (a test module, imported by pytest under its own name, could not be)."""

from __future__ import annotations

import os
import time
from typing import Any

from actuators.workers import EffectGuard

EFFECTS = (
    "CREATE TABLE IF NOT EXISTS effects (topic TEXT, partition INTEGER, offset INTEGER, "
    "key TEXT, seq INTEGER, pid INTEGER, started_ns INTEGER, ended_ns INTEGER)"
)


def compute_and_record(msg: Any, ctx: EffectGuard, *, work_s: float) -> None:
    """Busy for ``work_s`` (holding the GIL, as a parsing handler does), then write the
    message's effect with ``ctx.once_sql``: the effect and its done mark in one transaction,
    so a message run again after its process died records nothing twice."""
    started = time.monotonic_ns()
    deadline = time.perf_counter() + work_s
    x = 0
    while time.perf_counter() < deadline:
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF
    key = (msg.key() or b"").decode()
    seq = int(msg.value() or b"0")
    row = (msg.topic(), msg.partition(), msg.offset(), key, seq, os.getpid(), started)

    def write(db: Any) -> None:
        db.execute(EFFECTS)
        db.execute("INSERT INTO effects VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                   (*row, time.monotonic_ns()))  # fmt: skip

    ctx.once_sql(write)
