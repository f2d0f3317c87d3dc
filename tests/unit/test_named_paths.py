"""Every file and module that code, comments and docs name exists.

A comment or a page that names a module after it moved sends a reader
to nothing; this reads the names out of the text (paths ending in a known suffix, and
dotted module names under lagpilot's packages) and looks each one up in the tree.
"""

from __future__ import annotations

import re
from pathlib import Path

from support.repository import REPO, repository_files

PACKAGES = ("pipeline", "actuators", "schemas", "runtime", "bench", "tests")
ROOTS = (*PACKAGES, "docs", "deploy")
SUFFIXES = ("py", "md", "toml", "json", "yaml", "yml", "sh", "proto")
#: a path under one of our roots, ending in a known suffix (globs and placeholders skipped)
PATH = re.compile(
    r"(?<![\w./-])((?:" + "|".join(ROOTS) + r")/[\w./-]+?\.(?:" + "|".join(SUFFIXES) + r"))\b"
)
#: a dotted module name under a package, in backticks (an attribute after it is allowed)
DOTTED = re.compile(r"`((?:pipeline|actuators|schemas|runtime|bench)(?:\.\w+)+)[`(:]")
TEXT = (".py", ".md", ".toml", ".yaml", ".yml", ".sh", ".proto", ".txt")


def _texts() -> list[Path]:
    return [
        p
        for p in repository_files()
        if (p.suffix in TEXT or p.name in ("Makefile", "Dockerfile"))
        and not p.name.endswith("_pb2.py")
        and not p.name.endswith("_pb2_grpc.py")
        and "results" not in p.relative_to(REPO).parts
    ]


def _module_exists(dotted: str) -> bool:
    """Some prefix of ``dotted`` is a module or package of ours, and the next part (if any)
    is an attribute or a submodule: ``pipeline.decide.rules.recent_growth`` holds."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        base = REPO.joinpath(*parts[:n])
        source = (
            base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        )
        if not source.is_file():
            continue
        if n == len(parts):
            return True
        return re.search(rf"\b{re.escape(parts[n])}\b", source.read_text()) is not None
    return False


def test_every_named_path_exists() -> None:
    missing = []
    for path in _texts():
        text = path.read_text(errors="replace")
        for m in PATH.finditer(text):
            name = m.group(1).rstrip(".")
            if any(c in name for c in "*{}<>") or (REPO / name).exists():
                continue
            missing.append(f"{path.relative_to(REPO)}: {name}")
    assert not missing, "named but absent:\n" + "\n".join(sorted(set(missing)))


def test_every_named_module_exists() -> None:
    missing = []
    for path in _texts():
        if path.suffix not in (".py", ".md", ".toml") and path.name != "Makefile":
            continue
        text = path.read_text(errors="replace")
        for m in DOTTED.finditer(text):
            name = m.group(1).rstrip(".")
            if name.endswith((".py", ".md", ".json", ".toml")) or _module_exists(name):
                continue
            missing.append(f"{path.relative_to(REPO)}: {name}")
    assert not missing, "named but absent:\n" + "\n".join(sorted(set(missing)))
