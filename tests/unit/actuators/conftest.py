"""The Admin API tests' contract stubs: three nodes serving ``orders`` (no auth)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.support.redpanda_admin_stub import RedpandaAdminStub, running_stubs
from tests.support.admin_api import orders_cluster


@pytest.fixture
def stubs() -> Iterator[list[RedpandaAdminStub]]:
    """Three contract stubs of one cluster; any undeclared request fails the test."""
    with running_stubs(3, cluster=orders_cluster()) as started:
        yield started
