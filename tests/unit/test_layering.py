"""The house's layering, checked on every module's imports (docs/architecture.md):
``pipeline/`` and ``actuators/`` never import each other and share only ``schemas/``;
``schemas/`` imports neither; nothing shipped imports ``bench`` or ``tests``; ``bench/``
stands on its own (never the test tree, never a patched ``sys.path``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _imports(package: str) -> dict[str, set[str]]:
    """{module path: top-level packages it imports} for every module of ``package``."""
    out: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
        out[str(path.relative_to(ROOT))] = names
    return out


@pytest.mark.parametrize(
    ("package", "never"),
    [
        ("pipeline", {"actuators", "bench", "tests"}),
        ("actuators", {"pipeline", "bench", "tests"}),
        ("schemas", {"pipeline", "actuators", "bench", "tests"}),
        ("bench", {"tests"}),
    ],
)
def test_a_package_imports_none_of_what_it_must_not(package: str, never: set[str]) -> None:
    found = {module: sorted(names & never) for module, names in _imports(package).items()}
    assert {m: n for m, n in found.items() if n} == {}


def test_no_benchmark_patches_the_import_path() -> None:
    patched = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "bench").rglob("*.py"))
        if "sys.path" in path.read_text(encoding="utf-8")
    ]
    assert patched == []
