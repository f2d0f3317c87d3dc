"""The cluster the Admin API contract stubs serve: its state, shared by every node's stub,
and the answer each stated route gets from it (Redpanda's rules: a leadership transfer runs
on the partition's leader, a replica move or a config patch on the controller, a move
already under way is a 503, errors are ``{"message", "code"}``).

The HTTP side (contract checks, scripts, redirects, recording) is ``redpanda_admin_stub``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


class StubError(Exception):
    """Answered as Redpanda does: ``{"message", "code"}`` with the HTTP status."""

    def __init__(self, status: int, message: str, body: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body if body is not None else {"message": message, "code": status}


@dataclass
class ClusterModel:
    """The state every stub node of one cluster shares. All access holds ``lock``."""

    node_ids: tuple[int, ...] = (0, 1, 2)
    num_cores: int = 2
    hold_moves: bool = False  # True: replica moves stay in_progress until finish_moves()
    known_config: tuple[str, ...] = (
        "enable_leader_balancer",
        "kafka_throughput_limit_node_in_bps",
        "kafka_throughput_limit_node_out_bps",
        "kafka_throughput_control",
    )
    lock: threading.RLock = field(default_factory=threading.RLock)
    partitions: dict[tuple[str, str, int], dict[str, Any]] = field(default_factory=dict)
    alive: dict[int, bool] = field(default_factory=dict)
    admin_urls: dict[int, str] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    config_version: int = 1
    leader_changes: int = 0  # transfers that moved a leader (a repeated one moves nothing)

    def __post_init__(self) -> None:
        for n in self.node_ids:
            self.alive.setdefault(n, True)

    @property
    def controller_id(self) -> int:
        return min(n for n in self.node_ids if self.alive[n])

    def add_topic(
        self, topic: str, partitions: int = 1, replication: int = 3, namespace: str = "kafka"
    ) -> None:
        with self.lock:
            for p in range(partitions):
                nodes = [self.node_ids[(p + i) % len(self.node_ids)] for i in range(replication)]
                self.partitions[(namespace, topic, p)] = {
                    "ns": namespace,
                    "topic": topic,
                    "partition_id": p,
                    "status": "done",
                    "leader_id": nodes[0],
                    "raft_group_id": len(self.partitions) + 1,
                    "replicas": [{"node_id": n, "core": p % self.num_cores} for n in nodes],
                    "disabled": False,
                }

    def finish_moves(self) -> None:
        with self.lock:
            for part in self.partitions.values():
                pending = part.pop("_pending", None)
                if pending is not None:
                    part["replicas"], part["status"] = pending, "done"
                    if part["leader_id"] not in {r["node_id"] for r in pending}:
                        part["leader_id"] = pending[0]["node_id"]

    def get_partition(self, ns: str, topic: str, partition: int) -> dict[str, Any]:
        part = self.partitions.get((ns, topic, partition))
        if part is None:
            raise StubError(404, f"Could not find ntp: {{{ns}/{topic}/{partition}}}")
        return part

    def public(self, part: dict[str, Any]) -> dict[str, Any]:
        return {k: json.loads(json.dumps(v)) for k, v in part.items() if not k.startswith("_")}

    def brokers(self) -> list[dict[str, Any]]:
        return [
            {
                "node_id": n,
                "num_cores": self.num_cores,
                "membership_status": "active",
                "is_alive": self.alive[n],
                "recovery_mode_enabled": False,
                "version": "v24.3.1 - stub",
                "internal_rpc_address": f"redpanda-{n}",
                "internal_rpc_port": 33145,
                "disk_space": [
                    {"path": "/var/lib/redpanda/data", "free": 1 << 30, "total": 1 << 31}
                ],
                "maintenance_status": {
                    "draining": False,
                    "finished": False,
                    "errors": False,
                    "partitions": 0,
                    "eligible": 0,
                    "transferring": 0,
                    "failed": 0,
                },
                "in_fips_mode": "disabled",
            }
            for n in self.node_ids
        ]

    def health_overview(self) -> dict[str, Any]:
        leaderless = [
            f"{ns}/{t}/{p}" for (ns, t, p), part in self.partitions.items()
            if not self.alive.get(part["leader_id"], False)
        ]  # fmt: skip
        down = [n for n in self.node_ids if not self.alive[n]]
        reasons = (["nodes_down"] if down else []) + (
            ["leaderless_partitions"] if leaderless else []
        )
        return {
            "is_healthy": not reasons,
            "unhealthy_reasons": reasons,
            "controller_id": self.controller_id,
            "all_nodes": list(self.node_ids),
            "nodes_down": down,
            "nodes_in_recovery_mode": [],
            "leaderless_partitions": leaderless[:128],
            "leaderless_count": len(leaderless),
            "under_replicated_partitions": [],
            "under_replicated_count": 0,
            "bytes_in_cloud_storage": -1,
        }


# -- the answers of the stated routes ---------------------------------------------------------


#: (HTTP status, JSON body or None for empty, extra headers)
Answer = tuple[int, Any, dict[str, str]]


class Node(Protocol):
    """What a route's answer needs of the stub node it runs on."""

    cluster: ClusterModel

    def leader_redirect(self, leader: int, raw_path: str) -> Answer | None: ...


AnswerFn = Callable[[Node, dict[str, str], dict[str, list[str]], bytes, str], Answer]


def _get_brokers(stub: Node, *_: Any) -> Answer:
    with stub.cluster.lock:
        return 200, stub.cluster.brokers(), {}


def _health_overview(stub: Node, *_: Any) -> Answer:
    with stub.cluster.lock:
        return 200, stub.cluster.health_overview(), {}


def _ready(stub: Node, *_: Any) -> Answer:
    return 200, None, {}


def _get_partition(stub: Node, params: dict[str, str], *_: Any) -> Answer:
    c = stub.cluster
    with c.lock:
        part = c.get_partition(params["namespace"], params["topic"], int(params["partition"]))
        return 200, c.public(part), {}


def _transfer_leadership(
    stub: Node,
    params: dict[str, str],
    query: dict[str, list[str]],
    _b: bytes,
    raw: str,
) -> Answer:
    c = stub.cluster
    with c.lock:
        part = c.get_partition(params["namespace"], params["topic"], int(params["partition"]))
        redirect = stub.leader_redirect(part["leader_id"], raw)
        if redirect:
            return redirect
        replicas = [r["node_id"] for r in part["replicas"]]
        raw_target = query.get("target", [""])[0]
        if "target" not in query:  # optional upstream: any other live replica
            others = [n for n in replicas if n != part["leader_id"] and c.alive[n]]
            raw_target = str(others[0]) if others else ""
        if not raw_target.isdigit():
            raise StubError(400, f"Invalid target node id: {raw_target!r}")
        target = int(raw_target)
        if target not in replicas:
            raise StubError(400, f"Target node {target} is not a replica of {replicas}")
        if not c.alive[target]:
            raise StubError(503, f"Target node {target} is not alive")
        if part["leader_id"] != target:
            c.leader_changes += 1
        part["leader_id"] = target
        return 200, None, {}


def _set_replicas(stub: Node, params: dict[str, str], _q: Any, body: bytes, raw: str) -> Answer:
    c = stub.cluster
    try:
        wanted = json.loads(body or b"null")
        ok = isinstance(wanted, list) and wanted and all(
            isinstance(r, dict) and set(r) == {"node_id", "core"}
            and all(type(v) is int for v in r.values()) for r in wanted
        )  # fmt: skip
    except json.JSONDecodeError:
        ok = False
    if not ok:
        raise StubError(400, "Replica set must be a non-empty JSON array of {node_id, core}")
    with c.lock:
        part = c.get_partition(params["namespace"], params["topic"], int(params["partition"]))
        redirect = stub.leader_redirect(c.controller_id, raw)
        if redirect:
            return redirect
        if "_pending" in part:
            raise StubError(503, "Partition update already in progress")
        for r in wanted:
            if r["node_id"] not in c.node_ids or not 0 <= r["core"] < c.num_cores:
                raise StubError(400, f"Invalid replica {r}: unknown node or core")
        if len({r["node_id"] for r in wanted}) != len(wanted):
            raise StubError(400, "Replica set contains duplicate node ids")
        part["_pending"], part["status"] = wanted, "in_progress"
        if not c.hold_moves:
            c.finish_moves()
        return 200, None, {}


def _patch_config(
    stub: Node, _p: Any, query: dict[str, list[str]], body: bytes, raw: str
) -> Answer:
    c = stub.cluster
    try:
        patch = json.loads(body or b"null")
    except json.JSONDecodeError:
        patch = None
    if not isinstance(patch, dict) or set(patch) - {"upsert", "remove"}:
        raise StubError(400, 'Body must be {"upsert": {...}, "remove": [...]}')
    upsert, remove = patch.get("upsert", {}), patch.get("remove", [])
    with c.lock:
        redirect = stub.leader_redirect(c.controller_id, raw)
        if redirect:
            return redirect
        force = query.get("force", ["0"])[0] not in ("", "0")
        unknown = [k for k in [*upsert, *remove] if k not in c.known_config]
        if unknown and not force:
            raise StubError(400, "invalid properties", {k: "Unknown property" for k in unknown})
        if query.get("dry_run", ["0"])[0] not in ("", "0"):
            return 200, None, {}
        c.config.update(upsert)
        for k in remove:
            c.config.pop(k, None)
        c.config_version += 1
        return 200, {"config_version": c.config_version}, {}


#: each stated route (by its nickname in the contract) and the answer the stub models for it
ANSWERS: dict[str, AnswerFn] = {
    "get_brokers": _get_brokers,
    "get_cluster_health_overview": _health_overview,
    "ready": _ready,
    "get_partition": _get_partition,
    "kafka_transfer_leadership": _transfer_leadership,
    "set_partition_replicas": _set_replicas,
    "patch_cluster_config": _patch_config,
}
