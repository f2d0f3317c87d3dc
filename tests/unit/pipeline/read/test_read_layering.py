"""The read stage stands before the model: ``pipeline/read`` never imports ``pipeline.model``
(group health reaches the reader as a protocol and a factory: ``pipeline.read.health``)."""

from __future__ import annotations

import ast
from pathlib import Path

READ = Path(__file__).resolve().parents[4] / "pipeline" / "read"


def test_no_read_module_imports_the_model() -> None:
    found = {}
    for path in sorted(READ.rglob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
        bad = sorted(n for n in names if n == "pipeline.model" or n.startswith("pipeline.model."))
        if bad:
            found[path.name] = bad
    assert found == {}
