"""What the Admin API client's tests share: credentials, recorded sleeps, a dead URL, the
requests a set of contract stubs received, and a three-node cluster with one topic."""

from __future__ import annotations

import socket

from bench.support.redpanda_admin_cluster import ClusterModel
from bench.support.redpanda_admin_stub import RecordedRequest, RedpandaAdminStub

CREDS = ("lagpilot", "s3cret")


class Sleeps(list[float]):
    """Records backoff sleeps instead of waiting them out."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def dead_url() -> str:
    """A local port nobody listens on: connecting is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def requests_to(stubs: list[RedpandaAdminStub], method: str, suffix: str) -> list[RecordedRequest]:
    """Every request the stubs recorded with ``method`` and a path ending in ``suffix``."""
    return [r for s in stubs for r in s.requests if r.method == method and r.path.endswith(suffix)]


def orders_cluster() -> ClusterModel:
    """Nodes 0, 1, 2 and topic ``orders`` of 3 partitions, led by 0, 1 and 2 in turn."""
    cluster = ClusterModel(node_ids=(0, 1, 2))
    cluster.add_topic("orders", partitions=3)
    return cluster
