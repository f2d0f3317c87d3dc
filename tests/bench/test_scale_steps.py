"""The scale benchmark's window placement against the full scrapes' grid (pure)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from bench.support.scale_steps import scrape_phase


def _replica(t0: float | None, interval_s: float = 15.0) -> Any:
    if t0 is None:
        return SimpleNamespace()  # no Prometheus loop started
    return SimpleNamespace(prom_grid_t0=t0, prom_interval_s=interval_s)


def _scrapes_in(start: float, window_s: float, t0: float, interval_s: float) -> list[float]:
    k0 = int((start - t0) // interval_s)
    points = (t0 + k * interval_s for k in range(k0, k0 + int(window_s // interval_s) + 3))
    return [t for t in points if start <= t < start + window_s]


@pytest.mark.parametrize("now", [100.0, 101.0, 107.5, 110.0, 114.99, 115.0, 200.3, 1234.5])
def test_a_window_of_k_intervals_holds_k_scrapes_away_from_its_edges(now: float) -> None:
    t0, interval, window = 100.0, 15.0, 30.0
    wait = scrape_phase([_replica(t0, interval)], window, now=now)
    assert 0 <= wait < interval
    start = now + wait
    inside = _scrapes_in(start, window, t0, interval)
    assert len(inside) == 2
    assert min(inside) - start == pytest.approx(interval / 2)
    assert start + window - max(inside) == pytest.approx(interval / 2)


def test_without_a_grid_or_with_scrapes_rarer_than_the_window_no_wait() -> None:
    assert scrape_phase([_replica(None)], 30.0, now=5.0) == 0.0
    assert scrape_phase([], 30.0, now=5.0) == 0.0
    assert scrape_phase([_replica(0.0, 1000.0)], 30.0, now=5.0) == 0.0
