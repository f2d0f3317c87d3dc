"""The pictures the war story and the incident suite draw, in their shared parts: a
headless pyplot, one line of time lag per partition, and a dashed line per action."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (no display; imported only when plotting)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def time_lag_lines(
    ax: Any, timeline: Sequence[Sequence[float]], *, hot: Collection[int] | None = None,
    lw: float = 1.0,
) -> None:  # fmt: skip
    """One line per partition from ``[[ms since start, partition, time lag s], ...]``; with
    ``hot``, those partitions are drawn thick and labelled, the others thin and grey."""
    by_part: dict[int, list[tuple[float, float]]] = {}
    for t_ms, part, lag_s in timeline:
        by_part.setdefault(int(part), []).append((t_ms / 1000, lag_s))
    for part, pts in sorted(by_part.items()):
        pts.sort()
        xs, ys = zip(*pts, strict=True)
        if hot is None:
            ax.plot(xs, ys, lw=lw, label=f"p{part}")
        elif part in hot:
            ax.plot(xs, ys, lw=2.0, label=f"p{part}")
        else:
            ax.plot(xs, ys, lw=0.8, color="0.7")


def action_lines(
    ax: Any, actions: Sequence[dict[str, Any]], *, lw: float = 0.8,
    color: Callable[[dict[str, Any]], str] = lambda a: "tab:green",
) -> None:  # fmt: skip
    """A dashed vertical line at each action's ``at_ms`` (ms since the start)."""
    for a in actions:
        ax.axvline(a["at_ms"] / 1000, color=color(a), lw=lw, ls="--")
