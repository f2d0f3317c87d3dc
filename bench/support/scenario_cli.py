"""The command line every incident scenario module shares when run alone:

    .venv/bin/python -m bench.incidents.<name> [--bootstrap HOST:PORT] [--smoke] [--parallel]
        [--out bench/results/incidents_<name>.json]

``--smoke`` runs the shape's smoke variant, its arms at once (the mechanics, not the
figures); ``--parallel`` runs the full shape's arms at once too. Writes the scenario's
summary as JSON to ``--out`` and its plot beside it (``.png``), and prints the headline keys.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.support import broker
from bench.support.results import run_stamp, write_result

ROOT = Path(__file__).resolve().parents[2]

HEADLINE = (
    "remedy",
    "wrong_actions",
    "applied_actions",
    "verified",
    "dropped",
    "lost",
    "duplicates",
    "policy_sha256",
)


def scenario_main(
    argv: list[str] | None,
    *,
    name: str,
    doc: str | None,
    shape: Any,
    run: Callable[..., tuple[dict[str, Any], dict[str, Any]]],
    plot: Callable[[dict[str, Any], Path], None],
    headline: Sequence[str] = (),
) -> int:
    ap = argparse.ArgumentParser(
        prog=f"python -m bench.incidents.{name}",
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--smoke", action="store_true", help="the smoke variant, arms at once")
    ap.add_argument("--parallel", action="store_true", help="arms at once")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / f"incidents_{name}.json"))
    args = ap.parse_args(argv)
    stamp = run_stamp()
    bootstrap = broker.bootstrap(args.bootstrap)
    chosen = shape.smoke() if args.smoke else shape()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        summary, runs = run(bootstrap, chosen, Path(tmp), parallel=args.smoke or args.parallel)
    summary["took_s"] = round(time.monotonic() - t0, 1)
    out = Path(args.out)
    summary = write_result(out, summary, stamp)
    plot(runs, out.with_suffix(".png"))
    keys = [*HEADLINE, *headline, "took_s"]
    print(f"{name}: " + orjson.dumps({k: summary.get(k) for k in keys}).decode())
    return 0


def shape_dict(shape: Any) -> dict[str, Any]:
    """A scenario's shape as its results record it (nested dataclasses as tables)."""

    def flat(obj: Any) -> Any:
        if hasattr(obj, "__dataclass_fields__"):
            return {k: flat(getattr(obj, k)) for k in obj.__dataclass_fields__}
        return list(obj) if isinstance(obj, tuple) else obj

    return dict(flat(shape))
