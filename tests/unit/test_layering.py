"""The house's layering, checked on every module's imports (docs/architecture.md):
``pipeline/`` and ``actuators/`` never import each other and share only ``schemas/`` and
``runtime/``; ``schemas/`` (the contract) imports nothing of lagpilot's but itself and
``runtime/`` only the contract; nothing shipped imports ``bench`` or ``tests``; ``bench/``
stands on its own (never the test tree, never a patched ``sys.path``).

Inside ``pipeline/`` data moves one way, read -> model -> decide: a stage imports earlier
stages and the rooms below them (``coordinator/``, the codec), never a later stage, an
operator surface (``commands/``, ``serve/``, ``observe/``) or the process root; and no two
modules import each other. Imports inside functions count too: a lazy import is still a
dependency."""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
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
        ("schemas", {"pipeline", "actuators", "runtime", "bench", "tests"}),
        ("runtime", {"pipeline", "actuators", "bench", "tests"}),
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


OURS = ("pipeline", "actuators", "schemas", "runtime")
PIPELINE_ROOT = {"pipeline", "pipeline.app", "pipeline.settings", "pipeline.__main__"}

#: room -> rooms it may not import (a room is a package prefix)
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "schemas": ("pipeline", "actuators", "runtime"),
    "runtime": ("pipeline", "actuators"),
    "pipeline.coordinator": (
        "pipeline.read",
        "pipeline.model",
        "pipeline.decide",
        "pipeline.commands",
        "pipeline.observe",
        "pipeline.serve",
        "actuators",
    ),
    "pipeline.read": (
        "pipeline.model",
        "pipeline.decide",
        "pipeline.commands",
        "pipeline.observe",
        "pipeline.serve",
        "actuators",
    ),
    "pipeline.model": (
        "pipeline.read",
        "pipeline.decide",
        "pipeline.commands",
        "pipeline.observe",
        "pipeline.serve",
        "actuators",
    ),
    "pipeline.decide": (
        "pipeline.read",
        "pipeline.commands",
        "pipeline.observe",
        "pipeline.serve",
        "actuators",
    ),
    "pipeline.observe": ("pipeline.commands", "pipeline.serve", "actuators"),
    "pipeline": ("actuators",),
    "actuators": ("pipeline",),
}


def _module(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


def _imports_of(path: Path) -> Iterator[tuple[str, bool]]:
    """(imported module, at module level?) for each absolute import in ``path``."""
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            for name in names:
                yield name, id(node) in top
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, id(node) in top


def _ours(name: str) -> bool:
    return name.split(".")[0] in OURS


def _graph() -> dict[str, set[tuple[str, bool]]]:
    graph: dict[str, set[tuple[str, bool]]] = {}
    for package in OURS:
        for path in sorted((ROOT / package).rglob("*.py")):
            graph[_module(path)] = {(n, top) for n, top in _imports_of(path) if _ours(n)}
    return graph


def _within(name: str, room: str) -> bool:
    return name == room or name.startswith(room + ".")


def _room(module: str) -> str:
    return max((r for r in FORBIDDEN if _within(module, r)), key=len)


def test_no_room_imports_a_later_stage_or_a_surface() -> None:
    wrong = []
    for module, imported in _graph().items():
        room = _room(module)
        for name, _top in imported:
            bad = [f for f in FORBIDDEN[room] if _within(name, f)]
            root = room.startswith("pipeline.") and name in PIPELINE_ROOT
            if bad or root:
                wrong.append(f"{module} imports {name}")
    assert not wrong, "imports against the flow:\n" + "\n".join(sorted(set(wrong)))


def test_no_import_cycle_between_modules() -> None:
    graph = _graph()
    modules = set(graph)
    edges = {
        m: {n for n, top in imported if top and n in modules and n != m}
        for m, imported in graph.items()
    }
    # a package's __init__ re-exporting its own modules is not a cycle of meaning
    for m in edges:
        edges[m] = {n for n in edges[m] if not _within(n, m) and not _within(m, n)}
    cycles = []
    for a, b in itertools.permutations(modules, 2):
        if b in edges[a] and _reaches(edges, b, a):
            cycles.append(f"{a} -> {b} -> ... -> {a}")
    assert not cycles, "import cycles:\n" + "\n".join(sorted(cycles)[:20])


def _reaches(edges: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = {start}, [start]
    while todo:
        for n in edges[todo.pop()]:
            if n == goal:
                return True
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return False


@pytest.mark.parametrize("package", OURS)
def test_every_package_is_a_known_room(package: str) -> None:
    """A new package under ``pipeline/`` gets a row in FORBIDDEN (its place in the flow)."""
    for path in (ROOT / package).rglob("__init__.py"):
        module = _module(path)
        if module.count(".") == 1 and module.startswith("pipeline."):
            known = module in FORBIDDEN or module in ("pipeline.commands", "pipeline.serve")
            assert known, f"{module}: add it to FORBIDDEN in {__file__}"
