"""One capped exponential backoff, for every retry loop in lagpilot.

``backoff_s(attempt, base_s, cap_s, unit)`` is ``unit x min(cap_s, base_s x 2**attempt)``:
with ``unit`` a draw from [0, 1) it is full jitter (what spreads a herd of actuators
retrying one broker best), with ``unit=1`` the plain capped schedule (one sampler waiting
for its one broker). Pure: the draw is passed in, so a schedule is testable.
"""

from __future__ import annotations

import random

_MAX_DOUBLINGS = 62  # 2**62 x any base is past any cap; keeps a long outage from overflowing


def backoff_s(attempt: int, base_s: float, cap_s: float, unit: float = 1.0) -> float:
    """The wait before retry number ``attempt`` (0 = the first retry), times ``unit``."""
    doublings = min(max(attempt, 0), _MAX_DOUBLINGS)
    return max(0.0, min(cap_s, base_s * 2**doublings) * unit)


def jittered_s(attempt: int, base_s: float, cap_s: float) -> float:
    """Full jitter: uniform in [0, min(cap_s, base_s x 2**attempt))."""
    return backoff_s(attempt, base_s, cap_s, random.random())
