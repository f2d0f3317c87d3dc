"""Every benchmark's result file (``bench/results/*.json``), written one way: the figures
with what says where they come from and how busy the machine was.

``run_stamp()`` is taken when a run starts; ``write_result(path, data, stamp)`` writes
``data`` with it, as indented JSON, and returns what it wrote:

- ``commit``: ``git rev-parse HEAD``, plus ``-dirty`` when the tree has changes (outside
  what the benchmarks themselves write, ``bench/results/`` and the faults' generated
  ``docs/reliability.md``: a run after another is still the commit's), or None outside a
  git clone;
- ``measured_at``: when the run started, ISO-8601 UTC;
- ``load_avg_1m_start``: the host's 1-minute load average then; ``cpus``: its CPU count
  (figures measured on a shared, loaded machine are noisy, and a result must say so).
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
from pathlib import Path
from typing import Any

import orjson

from bench.support.machine import load_avg_1m

__all__ = ["git_commit", "run_stamp", "write_result"]

ROOT = Path(__file__).resolve().parents[2]
#: what the benchmarks write themselves: their results, and the faults' table of rows
WRITTEN_BY_BENCHMARKS = ("bench/results", "docs/reliability.md")
RESULTS_DIR = ROOT / "bench" / "results"
#: the page the faults' rows and the soak are written to (``bench.faults.doc``)
RELIABILITY_MD = ROOT / "docs" / "reliability.md"


def git_commit(root: Path = ROOT) -> str | None:
    """HEAD's full hash, with ``-dirty`` when the tree has changes outside what benchmarks
    write (``WRITTEN_BY_BENCHMARKS``)."""
    try:
        git = ["git", "-C", str(root)]
        head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()  # fmt: skip
        excluded = [f":(exclude){path}" for path in WRITTEN_BY_BENCHMARKS]
        status = [*git, "status", "--porcelain", "--", ".", *excluded]
        changes = subprocess.run(status, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("-dirty" if changes else "") if head else None


def run_stamp() -> dict[str, Any]:
    """The stamp of a run, taken as it starts (``commit``, ``measured_at``,
    ``load_avg_1m_start``, ``cpus``)."""
    return {
        "commit": git_commit(),
        "measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "load_avg_1m_start": load_avg_1m(),
        "cpus": os.cpu_count(),
    }


def _default(value: Any) -> Any:
    """numpy scalars (a figure computed with numpy) as Python numbers."""
    item = getattr(value, "item", None)
    if callable(item):
        return item()
    raise TypeError(f"not JSON: {type(value).__name__}")


def write_result(
    path: str | Path, data: dict[str, Any], stamp: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Write ``data`` to ``path`` (its folder made if missing) with the run's stamp
    (``stamp``, from ``run_stamp()`` when the run began; taken now when None), which
    replaces any key of the same name in ``data``; returns what was written."""
    result = data | (stamp if stamp is not None else run_stamp())
    option = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(result, option=option, default=_default) + b"\n")
    return result
