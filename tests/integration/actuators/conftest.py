"""The actuator tests' fixture: a ``Harness`` (actuators.testing) on fresh topics."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from actuators.testing import Harness


@pytest.fixture
def harness(kafka_bootstrap: str, unique_name: str) -> Iterator[Harness]:
    h = Harness(kafka_bootstrap, unique_name)
    yield h
    for runner, _, _ in list(h.runners):
        h.stop(runner)
