"""The contract stub itself: it must refuse what upstream's api-docs do not declare.

If the stub accepted anything, the client's tests would pass against an API that does not
exist; these tests show each kind of undeclared request is caught and reported.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from support.redpanda_admin_contract import Contract
from support.redpanda_admin_stub import ClusterModel, RedpandaAdminStub, running_stubs


@pytest.fixture(scope="module")
def contract() -> Contract:
    return Contract()


@pytest.fixture
def stub(contract: Contract) -> Iterator[RedpandaAdminStub]:
    cluster = ClusterModel(node_ids=(0, 1, 2))
    cluster.add_topic("orders", partitions=2)
    s = RedpandaAdminStub(0, cluster, contract).start()
    yield s
    s.stop()


def test_contract_reads_swagger12_files_and_swagger2_fragments(contract: Contract) -> None:
    declared = {(r.method, r.template, r.source) for r in contract.routes}
    assert ("GET", "/v1/brokers", "broker.json") in declared
    assert ("GET", "/v1/cluster/health_overview", "cluster.json") in declared
    assert ("PUT", "/v1/cluster_config", "cluster_config.json") in declared
    assert ("GET", "/v1/status/ready", "status.json") in declared  # a 2.0 fragment
    transfer = "/v1/partitions/{namespace}/{topic}/{partition}/transfer_leadership"
    route = next(r for r in contract.routes if r.template == transfer)
    assert route.query_params == {"target": False}
    assert route.path_params["partition"] == "integer"
    retired = [r for r in contract.routes if r.retired]
    assert [r.template for r in retired] == ["/v1/kafka/{topic}/{partition}/transfer_leadership"]


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("GET", "/v1/consumer_groups/lag", "no such path"),
        ("DELETE", "/v1/brokers", "method not declared"),
        ("GET", "/v1/partitions/kafka/orders/abc", "no such path"),  # partition is an integer
        ("POST", "/v1/partitions/kafka/orders/0/transfer_leadership?node=1", "undeclared query"),
        ("POST", "/v1/kafka/orders/0/transfer_leadership?target=1", "deleted upstream"),
        ("GET", "/v1/partitions/majority_lost", "missing required query parameters"),
    ],
)
def test_stub_rejects_and_records_undeclared_requests(
    stub: RedpandaAdminStub, method: str, path: str, expected: str
) -> None:
    response = httpx.request(method, stub.url + path)
    assert response.status_code == 404
    assert "contract violation" in response.json()["message"]
    assert len(stub.violations) == 1
    assert expected in stub.violations[0]


def test_declared_requests_leave_no_violation(stub: RedpandaAdminStub) -> None:
    assert httpx.get(stub.url + "/v1/brokers").status_code == 200
    assert httpx.get(stub.url + "/v1/partitions/kafka/orders/1").json()["partition_id"] == 1
    assert httpx.get(stub.url + "/v1/status/ready").status_code == 200
    assert stub.violations == []


def test_running_stubs_fails_the_test_on_any_violation() -> None:
    with (
        pytest.raises(AssertionError, match="outside the Redpanda Admin API contract"),
        running_stubs(1) as (stub,),
    ):
        httpx.get(stub.url + "/v1/not_an_endpoint")


def test_declared_but_unmodelled_route_is_reported_not_faked(stub: RedpandaAdminStub) -> None:
    response = httpx.get(stub.url + "/v1/cluster/uuid")
    assert response.status_code == 501
    assert "not modelled" in stub.violations[0]


def test_stub_answers_use_only_documented_fields(
    stub: RedpandaAdminStub, contract: Contract
) -> None:
    brokers = httpx.get(stub.url + "/v1/brokers").json()
    health = httpx.get(stub.url + "/v1/cluster/health_overview").json()
    part = httpx.get(stub.url + "/v1/partitions/kafka/orders/0").json()
    assert all(contract.undocumented_fields("broker", b) == [] for b in brokers)
    assert contract.undocumented_fields("cluster_health_overview", health) == []
    assert contract.undocumented_fields("partition", part) == []
    assert {"leader_id", "replicas", "status"} <= set(part)
    assert {"is_healthy", "controller_id", "nodes_down", "leaderless_count"} <= set(health)
    # ...and the check is able to fail:
    assert contract.undocumented_fields("partition", {"leader": 1}) == ["leader"]
    bad = {"replicas": [{"node_id": 1, "shard": 0}]}
    assert contract.undocumented_fields("partition", bad) == ["replicas[0].shard"]


def test_transfer_leadership_answers_empty_200_and_moves_the_leader(
    stub: RedpandaAdminStub,
) -> None:
    response = httpx.post(stub.url + "/v1/partitions/kafka/orders/0/transfer_leadership?target=2")
    assert (response.status_code, response.content) == (200, b"")
    assert httpx.get(stub.url + "/v1/partitions/kafka/orders/0").json()["leader_id"] == 2


def test_errors_are_message_and_code(stub: RedpandaAdminStub) -> None:
    response = httpx.get(stub.url + "/v1/partitions/kafka/nope/0")
    assert response.status_code == 404
    assert set(response.json()) == {"message", "code"}
    assert response.json()["code"] == 404


def test_scripts_apply_the_given_number_of_times(stub: RedpandaAdminStub) -> None:
    stub.script("GET", "/v1/brokers", times=2, status=503)
    codes = [httpx.get(stub.url + "/v1/brokers").status_code for _ in range(3)]
    assert codes == [503, 503, 200]


def test_auth_is_required_when_configured(contract: Contract) -> None:
    s = RedpandaAdminStub(0, ClusterModel(node_ids=(0,)), contract, require_auth=("u", "p"))
    s.start()
    try:
        assert httpx.get(s.url + "/v1/brokers").status_code == 401
        assert httpx.get(s.url + "/v1/brokers", auth=("u", "wrong")).status_code == 401
        assert httpx.get(s.url + "/v1/brokers", auth=("u", "p")).status_code == 200
    finally:
        s.stop()
