"""Baseline: the lag model's tick as it was computed before issue 16.

Why it stays: it is the "before" of ``bench.perf.model`` (``make bench-model``: the
``rebuilt`` kind, ``rebuilt_*`` and ``ratio_vs_rebuilt`` in ``bench/results/model.json`` and
docs/benchmarks.md). Not shipped; no test or other benchmark uses it.

The same ``TopicModel``, with its rate window fitted from rows rebuilt every tick (the
window transposed, its masks, differences and lags derived again from the offsets, one
``Fit`` per kind of sum) and every time lag searched afresh in the HWM history. The
window's rows are kept by today's ring of slots: reading them in time order copies the
window once a tick, as the old code's per-tick copy of the whole window did (until the
second round of issue 16 the rows were one contiguous block and this baseline read them
without that copy, so its figures from before then are lower).
"""

from __future__ import annotations

import numpy as np

from pipeline.model.config import LagConfig
from pipeline.model.fits import Fit
from pipeline.model.history import time_lag_s
from pipeline.model.hw_table import HwTable
from pipeline.model.lag import TopicModel
from pipeline.model.window import Rates, RateWindow


class RebuiltWindow(RateWindow):
    def fits(
        self, now_ms: int, hw_now: np.ndarray, committed: np.ndarray, recent_s: float
    ) -> Rates:
        width = len(hw_now)
        x = (self.times - now_ms) / 1000.0
        w_c = np.ascontiguousarray(self.rows_c()[:, :, :width].transpose(0, 2, 1))
        w_hw = np.ascontiguousarray(self.rows_hw(width).T)
        valid = w_c >= 0
        m = valid.astype(np.float64)
        powers = Fit.powers_of(x)
        fit = Fit(x, m, powers)
        produce = Fit(x, np.ones_like(w_hw, np.float64), powers).slope(w_hw - hw_now[:, None])
        consume = fit.slope(np.where(valid, w_c - committed[:, :, None], 0).astype(np.float64))
        wlag = np.where(valid, np.maximum(w_hw[None, :, :] - w_c, 0), 0).astype(np.float64)
        is_recent = x >= -recent_s
        recent = Fit(x, m * is_recent, powers)
        return Rates(
            produce=produce,
            consume=consume,
            lag_rate=fit.slope(wlag),
            accel=fit.accel(wlag),
            recent_rate=np.where(recent.s[0] >= 4, recent.slope(wlag * is_recent), np.nan),
        )


class AfreshTable(HwTable):
    def time_lag(self, c: np.ndarray, now_ms: int) -> tuple[np.ndarray, np.ndarray]:
        return time_lag_s(self.t_ms, self.hw, c, now_ms)


def rebuilt_model(topic: str, cfg: LagConfig) -> TopicModel:
    """A model whose ticks compute everything from the rows, as before issue 16."""
    m = TopicModel(topic, cfg)
    m._win = RebuiltWindow()
    m.history = AfreshTable()
    return m
