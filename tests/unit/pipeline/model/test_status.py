"""The status rules (pipeline/model/status.py), one cell at a time and at their edges.

With a usual progress interval of 1 s and the default knobs: STOP/STALL after 4.02 s
without progress (4 intervals + the 0.02 s commit visibility), WARN after 1.52 s without
progress or once the oldest waiting message waited 1.62 s (1.5 intervals + 0.1 s), ERR at
30 s beyond the cadence, REWIND for 5 s after an offset went back.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from pipeline.model.config import LagConfig
from pipeline.model.status import STATUS_BY_CODE, StatusInputs, classify
from schemas.lag import LagStatus

CFG = LagConfig()
NEVER = 1e9  # seconds since an event that never happened
#: a caught-up, steady group-partition committing every second
BASE: dict[str, Any] = {
    "lag_offsets": 0,
    "time_lag_s": 0.0,
    "since_progress_s": 0.0,
    "since_commit_s": 0.0,
    "since_rewind_s": NEVER,
    "interval_s": 1.0,
}


def status(cfg: LagConfig = CFG, **cell: Any) -> LagStatus:
    """The status of one group-partition; unnamed inputs as in ``BASE``."""
    arrays = {k: np.array([v], dtype=float) for k, v in (BASE | cell).items()}
    return STATUS_BY_CODE[int(classify(StatusInputs(**arrays), cfg)[0])]


def waiting(**cell: Any) -> dict[str, Any]:
    """Data waits (lag 10); ``cell`` says for how long and what moved."""
    return {"lag_offsets": 10, **cell}


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        # 1. REWIND, whatever else holds, for rewind_hold_s
        ({"since_rewind_s": 4.9, **waiting(time_lag_s=60.0, since_progress_s=60.0)}, "REWIND"),
        ({"since_rewind_s": 5.0}, "OK"),
        # 2. STALL: committing (recently), the offset not moving
        (waiting(time_lag_s=4.1, since_progress_s=4.1, since_commit_s=1.0), "STALL"),
        # 3. STOP: not moving and not committing either
        (waiting(time_lag_s=4.1, since_progress_s=4.1, since_commit_s=4.1), "STOP"),
        (waiting(time_lag_s=4.0, since_progress_s=4.0, since_commit_s=4.0), "WARN"),
        # stuck = min(no progress, time lag): a long-idle partition whose data just arrived
        (waiting(time_lag_s=0.1, since_progress_s=600.0, since_commit_s=600.0), "OK"),
        # 4. ERR: 30 s beyond the cadence while still progressing
        (waiting(time_lag_s=31.0, since_progress_s=0.5), "ERR"),
        (waiting(time_lag_s=30.9, since_progress_s=0.5), "WARN"),  # 29.9 s beyond: WARN's 5 s
        # 5. WARN: no progress for 1.52 s ...
        (waiting(time_lag_s=1.55, since_progress_s=1.55), "WARN"),
        # ... or the oldest message waited past 1.62 s while progress goes on (a hotspot)
        (waiting(time_lag_s=1.63, since_progress_s=0.1), "WARN"),
        (waiting(time_lag_s=1.6, since_progress_s=0.1), "OK"),
        # 6. OK: a caught-up consumer, however long idle (no false alarm on idle topics)
        (
            {
                "lag_offsets": 0,
                "time_lag_s": 0.0,
                "since_progress_s": 3600.0,
                "since_commit_s": 3600.0,
            },
            "OK",
        ),
    ],
)
def test_each_rule_at_its_edges(cell: dict[str, Any], expected: str) -> None:
    assert status(**cell) is LagStatus(expected)


def test_the_most_severe_rule_that_holds_wins() -> None:
    # stalled and 40 s behind: STALL (rule 2), not ERR (rule 4)
    assert status(**waiting(time_lag_s=40.0, since_progress_s=40.0, since_commit_s=0.5)) is (
        LagStatus.STALL
    )
    # stopped and 40 s behind: STOP (rule 3), not ERR
    assert status(**waiting(time_lag_s=40.0, since_progress_s=40.0, since_commit_s=40.0)) is (
        LagStatus.STOP
    )


def test_an_unknown_interval_is_the_initial_one_and_a_long_one_is_capped() -> None:
    # no interval learned yet: 5 s, so WARN after 7.52 s without progress
    assert status(**waiting(time_lag_s=7.5, since_progress_s=7.5, interval_s=np.nan)) is (
        LagStatus.OK
    )
    assert status(**waiting(time_lag_s=7.7, since_progress_s=7.7, interval_s=np.nan)) is (
        LagStatus.WARN
    )
    # a 10-minute cadence counts as 60 s: STOP after 240 s, not 40 minutes
    assert status(**waiting(time_lag_s=241.0, since_progress_s=241.0, since_commit_s=241.0,
                            interval_s=600.0)) is LagStatus.STOP  # fmt: skip


def test_growing_lag_warns_only_over_a_span_of_more_than_two_intervals() -> None:
    # a 6 s cadence: 9.05 s behind is under every time rule (WARN at 9.02 s without progress
    # is not met: progress 0.1 s ago; behind at 9.12 s), so only the growth rule can warn
    cell = waiting(time_lag_s=9.05, since_progress_s=0.1, interval_s=6.0)
    rates = {"lag_rate_per_s": np.array([100.0]), "produce_rate_per_s": np.array([100.0])}
    arrays = {k: np.array([v], dtype=float) for k, v in
              ({"since_commit_s": 0.0, "since_rewind_s": NEVER} | cell).items()}  # fmt: skip

    def judged(cfg: LagConfig, **more: Any) -> LagStatus:
        return STATUS_BY_CODE[int(classify(StatusInputs(**arrays, **more), cfg)[0])]

    assert judged(CFG) is LagStatus.OK  # no rates: nothing grows
    assert judged(CFG, **rates) is LagStatus.OK  # 10 s window < 2 x 6 s: the slope is the cadence
    assert judged(replace(CFG, window_s=20.0), **rates) is LagStatus.WARN
    slow = {
        "lag_rate_per_s": np.array([4.0]),
        "produce_rate_per_s": np.array([100.0]),
    }  # 4/s <= 5/s
    assert judged(replace(CFG, window_s=20.0), **slow) is LagStatus.OK


def test_the_last_second_alone_warns_of_an_avalanche_for_fast_committers() -> None:
    # 0.25 s cadence: the recent rule applies (2 x 0.25 < 1 s); 0.2 s behind is under the
    # time rules (0.495 s) but over warn_min_s (0.17 s)
    cell = {"lag_offsets": np.array([10.0]), "time_lag_s": np.array([0.2]),
            "since_progress_s": np.array([0.05]), "since_commit_s": np.array([0.0]),
            "since_rewind_s": np.array([NEVER]), "interval_s": np.array([0.25]),
            "lag_rate_per_s": np.array([0.0]), "produce_rate_per_s": np.array([10.0])}  # fmt: skip
    # 6/s > max(2, 5): growing; 4/s is not
    fast = classify(StatusInputs(recent_lag_rate_per_s=np.array([6.0]), **cell), CFG)
    calm = classify(StatusInputs(recent_lag_rate_per_s=np.array([4.0]), **cell), CFG)
    assert STATUS_BY_CODE[int(fast[0])] is LagStatus.WARN
    assert STATUS_BY_CODE[int(calm[0])] is LagStatus.OK


def test_worker_progress_floors_apply_per_cell() -> None:
    """Where a worker's progress reports judge, its own floors replace the commit ones."""
    n = 2
    cells = {"lag_offsets": np.full(n, 10.0), "time_lag_s": np.full(n, 0.45),
             "since_progress_s": np.full(n, 0.45), "since_commit_s": np.full(n, 10.0),
             "since_rewind_s": np.full(n, NEVER), "interval_s": np.full(n, 0.1)}  # fmt: skip
    codes = classify(StatusInputs(stop_min_s=np.array([0.2, CFG.stop_min_s]), **cells), CFG)
    # STOP after max(0.2, 0.4) + 0.02 = 0.42 s where the report's floor is 0.2 s; the
    # commit floor (0.5 s) keeps the other cell at WARN
    assert [STATUS_BY_CODE[int(c)] for c in codes] == [LagStatus.STOP, LagStatus.WARN]


def test_cells_are_judged_independently_in_one_call() -> None:
    cells = [
        {"since_rewind_s": 1.0},
        waiting(time_lag_s=4.1, since_progress_s=4.1, since_commit_s=1.0),
        waiting(time_lag_s=4.1, since_progress_s=4.1, since_commit_s=4.1),
        waiting(time_lag_s=31.0, since_progress_s=0.5),
        waiting(time_lag_s=1.63, since_progress_s=0.1),
        {},
    ]
    rows = [BASE | c for c in cells]
    arrays = {k: np.array([r[k] for r in rows], dtype=float) for k in BASE}
    codes = classify(StatusInputs(**arrays), CFG)
    assert codes.dtype == np.int8
    assert [STATUS_BY_CODE[int(c)].value for c in codes] == [
        "REWIND", "STALL", "STOP", "ERR", "WARN", "OK"
    ]  # fmt: skip
