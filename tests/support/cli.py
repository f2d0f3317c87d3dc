"""Run the installed ``lagpilot`` script as a user does, and check its one-line failures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

LAGPILOT = str(Path(sys.executable).parent / "lagpilot")


def clean_env(**env: str) -> dict[str, str]:
    """This process's environment without lagpilot's settings, plus ``env``."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith("LAGPILOT_") and k != "KAFKA_BOOTSTRAP"}  # fmt: skip
    return {**base, "LAGPILOT_CONNECT_TIMEOUT_S": "1", **env}


def lagpilot(*args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LAGPILOT, *args], env=clean_env(**env), capture_output=True, text=True, timeout=timeout
    )


def one_clean_line(r: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    """The exit code, and one line on stderr holding ``words``: no traceback, no client lines."""
    err = r.stderr
    assert r.returncode == code, (r.returncode, r.stdout, err)
    assert "Traceback" not in err and "%3|" not in err and "|FAIL|" not in err, err
    assert "FAIL [rdkafka" not in err, err  # librdkafka's line through a Python logger
    lines = [line for line in err.splitlines() if not line.startswith(("usage:", " "))]
    assert len(lines) == 1, err
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]
