"""Where the upstream reference files live, for the conformance tests that read them.

The repository carries no upstream file. Apache Kafka's coordinator-record schemas, Redpanda's
Admin API description files and KEDA's scaler contract are read where they live: the
``reference/`` folder of ``shared/`` beside the project (``../shared/reference`` from the
repository root), or wherever ``LAGPILOT_REFERENCE_DIR`` points.

The project states the facts it relies on in its own code; only the conformance tests read
these files, to check those statements. Where the folder is absent (a user's clone), those
tests report that they could not run and why. In CI (``CI`` set) the folder is always there,
so its absence is a failure, never a quiet skip.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.support.reference import DEFAULT, ENV, REPO, reference_dir

__all__ = ["DEFAULT", "ENV", "REPO", "reference_dir", "require"]


def require(subdir: str) -> Path:
    """``reference_dir() / subdir``, or skip (fail under CI) saying what is missing and why."""
    path = reference_dir() / subdir
    if path.is_dir():
        return path
    why = (
        f"upstream reference folder {path} not found: conformance tests read upstream files "
        f"there (set {ENV} to the folder that holds {subdir}/)"
    )
    if os.environ.get("CI"):
        pytest.fail(why, pytrace=False)
    pytest.skip(why)
