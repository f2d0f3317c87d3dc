"""The pipeline process as integration tests start it: one helper instead of a copy each.

``module_pipeline`` makes the module-scoped fixture most broker tests share (one
``python -m pipeline`` for a module, watching the module's topic prefix, ready before the
first test); ``running_pipeline`` is the same for a test or fixture that sets up more around
it; ``wait_ready`` waits for /readyz.
"""

from __future__ import annotations

import contextlib
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bench.support.harness import PipelineProcess

__all__ = ["module_pipeline", "running_pipeline", "wait_ready"]


def wait_ready(p: PipelineProcess, timeout_s: float = 60) -> None:
    """Until the pipeline's /readyz answers 200; fails with its log's tail."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{p.metrics_port}/readyz", timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"pipeline never became ready:\n{p.log_tail()}")


@contextlib.contextmanager
def running_pipeline(
    bootstrap: str, include: str, state_dir: Path, **env: str
) -> Iterator[PipelineProcess]:
    """A pipeline watching ``include``, ready when this yields, stopped (SIGTERM) after."""
    p = PipelineProcess(bootstrap, include, state_dir, **env).start()
    try:
        wait_ready(p)
        yield p
    finally:
        p.stop()


def module_pipeline(include: str, **env: str) -> Callable[..., Iterator[PipelineProcess]]:
    """A module-scoped ``pipeline`` fixture; assign it in the test module::

    pipeline = module_pipeline(f"{PREFIX}.*", LAGPILOT_WINDOW_S="4")
    """

    @pytest.fixture(scope="module")
    def pipeline(
        kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[PipelineProcess]:
        state_dir = tmp_path_factory.mktemp("pipe") / "state"
        with running_pipeline(kafka_bootstrap, include, state_dir, **env) as p:
            yield p

    return pipeline
