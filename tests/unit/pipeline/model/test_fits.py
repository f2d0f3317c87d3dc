"""Masked least squares (``pipeline.model.fits``) against numpy's polyfit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.model.fits import Fit


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(-1e6, 1e6), min_size=8, max_size=8),
    st.lists(st.booleans(), min_size=8, max_size=8),
)
def test_masked_fits_match_numpy_polyfit_over_the_rows_kept(ys, keep):
    x = np.arange(-7, 1) * 0.25
    y = np.array(ys)
    m = np.array(keep, dtype=np.float64)
    fit = Fit(x, m[None, :])
    slope, accel = fit.slope((m * y)[None, :])[0], fit.accel((m * y)[None, :])[0]
    xs, ysk = x[m > 0], y[m > 0]
    want_slope = np.polyfit(xs, ysk, 1)[0] if len(xs) >= 2 else 0.0
    want_accel = 2 * np.polyfit(xs, ysk, 2)[0] if len(xs) >= 3 else 0.0
    assert slope == pytest.approx(want_slope, rel=1e-6, abs=1e-3)
    assert accel == pytest.approx(want_accel, rel=1e-5, abs=1e-2)
