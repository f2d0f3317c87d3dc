"""Masked least squares for many series at once: the lag model's rates and acceleration."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# by power of x: a sequence, or a matrix's rows
Sums = Sequence[np.ndarray] | Sequence[float] | np.ndarray


class Fit:
    """Least-squares fits of many series at once, each over its own rows.

    ``x``: row times in seconds (R,); ``m``: 1.0 where a series has a value in a row, else
    0.0, shaped (..., R) with the rows LAST, like the series. Every sum over the rows is one
    matrix product with the powers of ``x``, so the window of every group x partition of a
    topic is fitted in a few BLAS calls instead of a dozen numpy calls per group (numpy's
    per-call overhead, not arithmetic, is the cost).
    """

    def __init__(
        self, x: np.ndarray, m: np.ndarray, powers: dict[int, np.ndarray] | None = None
    ) -> None:
        self.m = m
        self.powers = powers if powers is not None else self.powers_of(x)
        moments = self._sums(m, 5)
        self.s = [moments[..., k] for k in range(5)]  # s[k] = sum of x^k over a series' rows

    @staticmethod
    def powers_of(x: np.ndarray) -> dict[int, np.ndarray]:
        """(R, k): 1, x .. x^(k-1), contiguous (a sliced operand takes numpy off BLAS);
        computed once for the fits that share the rows' times."""
        x5 = np.vander(x, 5, increasing=True)
        return {k: np.ascontiguousarray(x5[:, :k]) for k in (2, 3, 5)}

    def _sums(self, a: np.ndarray, k: int) -> np.ndarray:
        rows = a.shape[-1]
        return (a.reshape(-1, rows) @ self.powers[k]).reshape(*a.shape[:-1], k)

    def _t(self, y: np.ndarray, k: int) -> list[np.ndarray]:
        t = self._sums(y, k)
        return [t[..., i] for i in range(k)]

    def slope(self, y: np.ndarray) -> np.ndarray:
        """Slope per second of each series ``y``, which must be 0 outside ``m`` (callers mask
        once for several fits); 0 where fewer than two rows or a single time."""
        return slope_of(self.s, self._t(y, 2))

    def accel(self, y: np.ndarray) -> np.ndarray:
        """Second derivative (per s^2) of the least-squares parabola through each series
        (``y`` masked as for ``slope``):
        the normal equations of [x^2, x, 1] solved by Cramer's rule for every series at once
        (np.polyfit does an SVD per series)."""
        return accel_of(self.s, self._t(y, 3))


def slope_of(s: Sums, t: Sums) -> np.ndarray:
    """The least-squares slope from the sums: ``s[k]`` = sum of x^k over a series' rows,
    ``t[k]`` = sum of x^k y (``Fit.slope``; the rate window feeds its own sums). Where the
    ``s`` are scalars (every series over the same rows), the arithmetic on them is done
    once and each series costs three operations."""
    n, s1, s2 = s[:3]
    t0, t1 = t[:2]
    den = n * s2 - s1 * s1
    if np.ndim(den) == 0:
        if n >= 2 and den > 1e-12:
            return np.asarray((n / den) * t1 - (s1 / den) * t0, np.float64)
        return np.zeros(np.broadcast(t0, t1).shape)
    ok = (n >= 2) & (den > 1e-12)
    return np.where(ok, (n * t1 - s1 * t0) / np.where(ok, den, 1.0), 0.0)


def accel_of(s: Sums, t: Sums) -> np.ndarray:
    """The second derivative of the least-squares parabola from the sums (``Fit.accel``);
    scalar ``s`` as for ``slope_of``."""
    s0, s1, s2, s3, s4 = s[:5]
    t0, t1, t2 = t[:3]
    minor = s2 * s0 - s1 * s1
    det = s4 * minor - s3 * (s3 * s0 - s1 * s2) + s2 * (s3 * s1 - s2 * s2)
    if np.ndim(det) == 0:
        if s0 >= 3 and abs(det) > 1e-12:
            # 2 det_a / det, det_a = t2 minor - s3 (t1 s0 - s1 t0) + s2 (t1 s1 - s2 t0)
            k = 2.0 / det
            a, b, c = k * minor, k * (s2 * s1 - s3 * s0), k * (s3 * s1 - s2 * s2)
            return np.asarray(a * t2 + b * t1 + c * t0, np.float64)
        return np.zeros(np.broadcast(t0, t1, t2).shape)
    det_a = t2 * minor - s3 * (t1 * s0 - s1 * t0) + s2 * (t1 * s1 - s2 * t0)
    ok = (s0 >= 3) & (np.abs(det) > 1e-12)
    return np.where(ok, 2.0 * det_a / np.where(ok, det, 1.0), 0.0)
