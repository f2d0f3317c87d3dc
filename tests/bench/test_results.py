"""Every benchmark's result file says where its figures come from (bench/support/results.py):
the commit, when, and how busy the host was (pure: a temp file and this clone's git)."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import numpy as np
import orjson

from bench.support.results import run_stamp, write_result

ROOT = Path(__file__).resolve().parents[2]


def test_a_result_carries_its_stamp(tmp_path: Path) -> None:
    stamp = run_stamp()
    out = tmp_path / "sub" / "x.json"
    wrote = write_result(out, {"figure": np.float64(1.5), "measured_at": 0}, stamp)
    got = orjson.loads(out.read_bytes())
    assert got == wrote | {"figure": 1.5}
    assert got["measured_at"] == stamp["measured_at"]  # the stamp's keys win
    when = dt.datetime.fromisoformat(got["measured_at"])
    assert when.utcoffset() == dt.timedelta(0)
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", got["commit"])
    assert got["load_avg_1m_start"] >= 0 and got["cpus"] >= 1


def test_every_benchmark_writes_through_the_helper() -> None:
    """A module that names a file under bench/results writes it with ``write_result`` (the
    incident suite through ``merge_results``, which keeps the scenarios not run)."""
    readers = {"bench/faults/doc.py"}  # renders the page from the committed results
    missing = []
    for path in sorted((ROOT / "bench").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        writers = {"write_result", "merge_results"} & set(re.findall(r"\w+", text))
        names_a_result = re.search(r'"results"\s*/|RESULTS_DIR\s*/', text)  # a path in it
        if names_a_result and not writers and str(path.relative_to(ROOT)) not in readers:
            missing.append(str(path.relative_to(ROOT)))
    assert missing == []
