"""The machine's load during a benchmark, written into its result: figures measured on a
shared, loaded machine are noisy, and a result must say so itself."""

from __future__ import annotations

import os

__all__ = ["load_avg_1m"]


def load_avg_1m() -> float:
    """The 1-minute load average (runnable processes; compare with the cores: 2 here)."""
    return round(os.getloadavg()[0], 2)
