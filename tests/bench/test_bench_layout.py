"""bench/'s layout (bench/__init__.py): scenarios in families (``perf``, ``incidents``,
``faults``), none importing another; what two share lives in ``bench.support``, which
imports no scenario; a family's runner alone imports its scenarios (pure: reads imports)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = ("bench.perf", "bench.incidents", "bench.faults", "bench.demo")
#: the runners: each runs scenarios of its family (the demo runs the avalanche's war story)
RUNNERS = {
    "bench/demo.py",
    "bench/incidents/__main__.py",
    "bench/faults/__main__.py",
    "bench/faults/rows.py",  # the faults runner's rows, one per fault module
}
#: modules of a family that are no scenario: its runners' parts
NOT_SCENARIOS = {"bench.faults.doc", "bench.faults.rows"}


def _bench_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return {n for n in names if n.startswith("bench.")}


def _scenario(name: str) -> bool:
    return (
        name.startswith(FAMILIES)
        and name not in FAMILIES[:3]
        and not any(name == m or name.startswith(m + ".") for m in NOT_SCENARIOS)
    )


def test_no_scenario_imports_another_and_support_imports_none() -> None:
    found = {}
    for path in sorted((ROOT / "bench").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel in RUNNERS:
            continue
        scenarios = sorted(n for n in _bench_imports(path) if _scenario(n))
        if scenarios:
            found[rel] = scenarios
    assert found == {}


def test_no_flat_scenario_left_at_the_top() -> None:
    assert sorted(p.name for p in (ROOT / "bench").glob("*.py")) == ["__init__.py", "demo.py"]
