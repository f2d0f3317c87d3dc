"""Where the upstream reference files live: ``$LAGPILOT_REFERENCE_DIR`` or ../shared/reference.

The repository carries no upstream file; the conformance tests (``tests/support/reference.py``)
and ``bench/perf/decode.py``'s baseline read them in place.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "LAGPILOT_REFERENCE_DIR"
REPO = Path(__file__).resolve().parents[2]
DEFAULT = REPO.parent / "shared" / "reference"


def reference_dir() -> Path:
    """The reference folder: ``$LAGPILOT_REFERENCE_DIR``, else ``../shared/reference``."""
    configured = os.environ.get(ENV)
    return Path(configured).expanduser().resolve() if configured else DEFAULT
