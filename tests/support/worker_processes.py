"""Handlers for the process-mode tests, at module level: a worker process imports them by
name (a test module, imported by pytest under a name of its own, could not be). Each records
its effect with ``ctx.once_sql`` in the worker's SQLite dedupe store, in table ``effects``:
the effect and its done mark in one transaction, so a message run again after its process
died records nothing twice."""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

from actuators.workers import EffectGuard

EFFECTS = (
    "CREATE TABLE IF NOT EXISTS effects (topic TEXT, partition INTEGER, offset INTEGER, "
    "key TEXT, value TEXT, pid INTEGER, started_ns INTEGER, ended_ns INTEGER)"
)


def _record(msg: Any, ctx: EffectGuard, started_ns: int) -> None:
    row = (msg.topic(), msg.partition(), msg.offset(), (msg.key() or b"").decode(),
           (msg.value() or b"").decode(), os.getpid(), started_ns)  # fmt: skip

    def write(db: Any) -> None:
        db.execute(EFFECTS)
        db.execute("INSERT INTO effects VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                   (*row, time.monotonic_ns()))  # fmt: skip

    ctx.once_sql(write)


def spin(work_s: float) -> int:
    """Pure-Python arithmetic for ``work_s``: it holds the GIL, as parsing or OCR does."""
    deadline = time.perf_counter() + work_s
    x = 0
    while time.perf_counter() < deadline:
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF
    return x


def compute_and_record(msg: Any, ctx: EffectGuard, *, work_s: float = 0.0) -> None:
    """Busy for ``work_s``, then record the message's effect."""
    started = time.monotonic_ns()
    spin(work_s)
    _record(msg, ctx, started)


def fail(msg: Any, ctx: EffectGuard) -> None:
    raise ValueError(f"cannot handle offset {msg.offset()}")


def die_once(msg: Any, ctx: EffectGuard, *, flags: str) -> None:
    """A message whose value is ``die`` kills its process the first time it runs (a flag file
    in ``flags`` remembers it across the restart); every message records its effect."""
    flag = Path(flags) / f"{msg.topic()}-{msg.partition()}-{msg.offset()}"
    if msg.value() == b"die" and not flag.exists():
        flag.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    compute_and_record(msg, ctx, work_s=0.01)


def always_die(msg: Any, ctx: EffectGuard) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def effects(path: str | Path) -> list[tuple[Any, ...]]:
    """The recorded effects, in the order they were written."""
    db = sqlite3.connect(path)
    try:
        db.execute(EFFECTS)
        return db.execute("SELECT * FROM effects ORDER BY rowid").fetchall()
    finally:
        db.close()
