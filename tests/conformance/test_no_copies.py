"""No file in the repository is a copy of a file in the upstream reference folder.

Byte for byte, against every file the folder holds (Kafka's coordinator-record schemas,
Redpanda's api-doc files, KEDA's contract notes): the repository states upstream facts in its
own code and reads upstream files only where they live.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from support.reference import reference_dir, require
from support.repository import REPO, repository_files


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_no_repository_file_is_a_copy_of_a_reference_file() -> None:
    for subdir in ("kafka-coordinator-records", "redpanda-admin-api", "keda"):
        require(subdir)
    upstream = {
        _digest(p): p.relative_to(reference_dir())
        for p in reference_dir().rglob("*")
        if p.is_file() and p.stat().st_size > 0
    }
    copies = [
        f"{f.relative_to(REPO)} = {upstream[d]}"
        for f in repository_files()
        if (d := _digest(f)) in upstream
    ]
    assert copies == []
