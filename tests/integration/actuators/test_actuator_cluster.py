"""Leadership moves on a real 3-broker Apache Kafka: reorder replicas, elect the preferred."""

from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient, NewTopic

from actuators.backends import KafkaBackend
from bench.support import actuator_harness as T
from bench.support.actuator_harness import KEY, Harness, by_id


def leader_and_replicas(admin: AdminClient, topic: str) -> tuple[int, list[int]]:
    """Partition 0's leader and replicas once metadata has them (-1, [] until then: a
    just-created topic reaches each broker's metadata cache a moment later)."""
    t = admin.list_topics(topic, timeout=10).topics.get(topic)
    p = t.partitions.get(0) if t is not None and t.error is None else None
    return (p.leader, list(p.replicas)) if p is not None else (-1, [])


def test_a_leadership_move_changes_the_leader_in_metadata(
    cluster_bootstrap: str, unique_name: str
) -> None:
    harness = Harness(cluster_bootstrap, unique_name)
    admin = AdminClient({"bootstrap.servers": cluster_bootstrap})
    topic = f"{unique_name}-lead"
    deadline = time.monotonic() + 30
    while len(admin.list_topics(timeout=10).brokers) < 3:  # all three registered
        assert time.monotonic() < deadline, "the 3-broker cluster did not come up"
        time.sleep(0.2)
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(20)
    deadline = time.monotonic() + 30
    while (leader := leader_and_replicas(admin, topic)[0]) < 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    leader, replicas = leader_and_replicas(admin, topic)
    assert leader >= 0 and len(replicas) == 3, f"no leader for {topic} in 30 s: {replicas}"
    target = next(r for r in replicas if r != leader)
    harness.start(KafkaBackend(cluster_bootstrap, client_id="lagpilot-test"))
    try:
        params = {"topic": topic, "partition": 0, "target_broker": target, "from_broker": leader}
        move = T.action("transfer_leadership", f"topic:{topic}/0", params, key=KEY,
                        now_ms=int(time.time() * 1000))  # fmt: skip
        harness.send(move)
        [outcome] = by_id(harness.read_outcomes(until=1, timeout_s=30))[move["id"]]
        assert outcome["result"] == "applied", outcome
        deadline = time.monotonic() + 15  # the brokers' metadata follows the controller
        while (new_leader := leader_and_replicas(admin, topic)[0]) != target:
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        new_leader, new_replicas = leader_and_replicas(admin, topic)
        assert new_leader == target != leader
        assert new_replicas[0] == target and sorted(new_replicas) == sorted(replicas)
    finally:
        for runner, _, _ in list(harness.runners):
            harness.stop(runner)
