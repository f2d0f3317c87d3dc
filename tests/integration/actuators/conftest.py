"""The actuator tests' fixture: a ``Harness`` (bench.support.actuator_harness) on fresh topics."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.support.actuator_harness import Harness


@pytest.fixture
def harness(kafka_bootstrap: str, unique_name: str) -> Iterator[Harness]:
    h = Harness(kafka_bootstrap, unique_name)
    yield h
    for runner, _, _ in list(h.runners):
        h.stop(runner)
