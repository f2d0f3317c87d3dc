"""Fault row 2: on a 3-broker cluster of our own, the broker leading the ``__consumer_offsets``
partition the pipeline reads the swarm's commits from (the swarm group's coordinator) is
killed (-9) and restarted 10 s later; then the KRaft controller (the quorum's leader), the
same way. The swarm, its SDK workers, the pipeline (act) and the actuator run throughout
(``bench.support.fault_load``), their topics replicated on all 3 nodes as a 3-node cluster is
run (the actuator's outcomes topic gets the broker's default, 3); recovery is measured from
each restart.

The nodes are found, not assumed: the coordinator from DescribeConsumerGroups, the controller
from the quorum state each KRaft node keeps in its log dir (``leaderId``).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka.admin import AdminClient

from bench.support.broker import OwnBroker
from bench.support.fault_load import DOWN_S, Scene, under_load

BROKERS = 3
SETTLE_S = 8.0  # between the first node's return and the second kill


def coordinator(bootstrap: str, group: str, timeout_s: float = 20.0) -> int:
    """The node id of ``group``'s coordinator: the leader of its __consumer_offsets partition."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            desc = admin.describe_consumer_groups([group], request_timeout=5)[group].result(10)
            if desc.coordinator is not None and desc.coordinator.id >= 0:
                return int(desc.coordinator.id)
        except Exception:
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise RuntimeError(f"no coordinator for {group} in {timeout_s:g} s")
        time.sleep(0.5)


def controller(broker: OwnBroker, timeout_s: float = 30.0) -> int:
    """The KRaft quorum's leader, as the live nodes' quorum-state files say (the newest
    epoch); asked again while an election is under way (no file names a leader yet)."""
    deadline = time.monotonic() + timeout_s
    while True:
        leader = _quorum_leader(broker)
        if leader > 0:
            return leader
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"no KRaft leader in the quorum-state files under {broker.run_dir} "
                f"in {timeout_s:g} s"
            )
        time.sleep(0.5)


def _quorum_leader(broker: OwnBroker) -> int:
    best = (-1, -1)
    for i in range(1, broker.brokers + 1):
        state = Path(broker.run_dir, f"node-{i}", "data", "__cluster_metadata-0", "quorum-state")
        try:
            got = orjson.loads(state.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue
        data = got.get("data", got)
        epoch, leader = int(data.get("leaderEpoch", -1)), int(data.get("leaderId", -1))
        if leader > 0 and epoch > best[0]:
            best = (epoch, leader)
    return best[1]


def leader_then_controller(broker: OwnBroker, workdir: Path, run_s: float = 80.0) -> dict[str, Any]:
    killed: dict[str, int] = {}
    run_id = uuid.uuid4().hex[:6]

    def fault(scene: Scene) -> None:
        node = coordinator(broker.bootstrap, f"agent-workers-{run_id}")
        killed["offsets_leader"] = node
        broker.kill9(node)
        time.sleep(DOWN_S)
        broker.restart()
        scene.cleared(f"offsets leader (node {node}) restarted")
        time.sleep(SETTLE_S)
        node = controller(broker)
        killed["controller"] = node
        broker.kill9(node)
        time.sleep(DOWN_S)
        broker.restart()
        scene.cleared(f"controller (node {node}) restarted")

    got = under_load(
        broker.bootstrap, workdir, fault, run_s=run_s, run_id=run_id, replication=BROKERS
    )
    return got | {"killed": killed}
