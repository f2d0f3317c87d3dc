"""What a fresh clone gets: files of this project only, no links into one engineer's machine."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_repository_holds_no_symbolic_links() -> None:
    # A link committed from a worktree (its jar cache pointing at another checkout) turned
    # into a loop in a fresh clone, and `make test` failed at its first mkdir.
    listed = subprocess.run(
        ["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert listed, "not a git checkout?"
    links = [line.split("\t", 1)[1] for line in listed if line.startswith("120000 ")]
    assert links == [], f"symbolic links in the repository: {links}"
