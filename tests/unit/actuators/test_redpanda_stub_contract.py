"""The contract stub itself: it must refuse what lagpilot's statement of the Admin API
contract does not declare, and answer only what it states.

If the stub accepted anything, the client's tests would pass against an API that does not
exist; these tests show each kind of undeclared request, and each kind of wrong answer, is
caught and reported. (That the statement matches Redpanda's own API description is checked
in ``tests/conformance/test_redpanda_admin_contract.py``.)
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from actuators.redpanda_admin import RedpandaAdmin, RedpandaAdminError
from bench.support.redpanda_admin_cluster import ANSWERS, ClusterModel
from bench.support.redpanda_admin_contract import ROUTES, Contract, Param, Route
from bench.support.redpanda_admin_stub import RedpandaAdminStub, running_stubs
from tests.support.admin_api import requests_to


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


def test_the_contract_states_the_routes_lagpilot_uses(contract: Contract) -> None:
    stated = {(r.method, r.template) for r in contract.routes if not r.retired}
    assert ("GET", "/v1/brokers") in stated
    assert ("GET", "/v1/cluster/health_overview") in stated
    assert ("PUT", "/v1/cluster_config") in stated
    assert ("GET", "/v1/status/ready") in stated
    transfer = "/v1/partitions/{namespace}/{topic}/{partition}/transfer_leadership"
    route = next(r for r in contract.routes if r.template == transfer)
    assert route.query_params == {"target": Param("integer", required=False)}
    assert route.path_params["partition"] == "integer"
    retired = [r for r in contract.routes if r.retired]
    assert [r.template for r in retired] == ["/v1/kafka/{topic}/{partition}/transfer_leadership"]


def test_the_stub_models_every_stated_route() -> None:
    assert {r.nickname for r in ROUTES} == set(ANSWERS)


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("GET", "/v1/consumer_groups/lag", "no such path"),
        ("DELETE", "/v1/brokers", "method not declared"),
        ("GET", "/v1/partitions/kafka/orders/abc", "no such path"),  # partition is an integer
        ("POST", "/v1/partitions/kafka/orders/0/transfer_leadership?node=1", "undeclared query"),
        ("POST", "/v1/kafka/orders/0/transfer_leadership?target=1", "deleted upstream"),
        ("POST", "/v1/partitions/kafka/orders/0/transfer_leadership?target=x", "not integer"),
        ("PUT", "/v1/cluster_config?dry_run=yes", "not integer"),
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


def test_missing_required_query_parameters_are_violations() -> None:
    route = Route("GET", "/v1/partitions/majority_lost", "majority_lost",
                  query_params={"dead_nodes": Param("string", required=True)})  # fmt: skip
    contract = Contract(routes=(route,))
    _, _, violation = contract.resolve("GET", "/v1/partitions/majority_lost", {})
    assert violation is not None and "missing required query parameters" in violation
    assert contract.resolve("GET", route.template, {"dead_nodes": ["1"]})[2] is None


def test_stated_but_unmodelled_route_is_reported_not_faked() -> None:
    uuid = Route("GET", "/v1/cluster/uuid", "get_cluster_uuid")
    s = RedpandaAdminStub(0, ClusterModel(node_ids=(0,)), Contract(routes=(*ROUTES, uuid)))
    s.start()
    try:
        response = httpx.get(s.url + "/v1/cluster/uuid")
    finally:
        s.stop()
    assert response.status_code == 501
    assert "not modelled" in s.violations[0]


def test_stub_answers_match_the_stated_models(stub: RedpandaAdminStub, contract: Contract) -> None:
    brokers = httpx.get(stub.url + "/v1/brokers").json()
    health = httpx.get(stub.url + "/v1/cluster/health_overview").json()
    part = httpx.get(stub.url + "/v1/partitions/kafka/orders/0").json()
    written = httpx.put(stub.url + "/v1/cluster_config", json={"upsert": {}}).json()
    assert len(brokers) == 3
    assert all(contract.answer_problems("broker", b) == [] for b in brokers)
    assert contract.answer_problems("cluster_health_overview", health) == []
    assert contract.answer_problems("partition", part) == []
    assert contract.answer_problems("cluster_config_write_result", written) == []
    assert {"leader_id", "replicas", "status"} <= set(part)
    assert stub.violations == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda p: p.update(leader=1), "leader: not in partition"),  # extra
        (lambda p: p.pop("leader_id"), "leader_id: missing from partition"),  # missing
        (lambda p: p.update(leader_id="1"), "leader_id: '1' is not integer"),  # mistyped
        (lambda p: p.update(disabled=0), "disabled: 0 is not boolean"),
        (lambda p: p.update(partition_id=True), "partition_id: True is not integer"),
        (lambda p: p.update(replicas={}), "replicas: not an array"),
        (lambda p: p["replicas"][0].pop("core"), "replicas[0].core: missing from assignment"),
        (lambda p: p["replicas"][0].update(shard=0), "replicas[0].shard: not in assignment"),
    ],
)
def test_the_answer_check_catches_extra_missing_and_mistyped_fields(
    stub: RedpandaAdminStub, contract: Contract, change: object, expected: str
) -> None:
    part = httpx.get(stub.url + "/v1/partitions/kafka/orders/0").json()
    change(part)  # type: ignore[operator]
    assert expected in contract.answer_problems("partition", part)


def test_optional_fields_may_be_absent_but_not_mistyped(contract: Contract) -> None:
    broker = ClusterModel(node_ids=(0,)).brokers()[0]
    assert "rack" not in broker and contract.answer_problems("broker", broker) == []
    del broker["maintenance_status"]
    assert contract.answer_problems("broker", broker) == []
    assert contract.answer_problems("broker", {**broker, "rack": 7}) == ["rack: 7 is not string"]


def test_a_wrong_stub_answer_is_a_violation(
    stub: RedpandaAdminStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    brokers = stub.cluster.brokers
    monkeypatch.setattr(
        stub.cluster, "brokers", lambda: [{**b, "num_cores": "2"} for b in brokers()]
    )
    httpx.get(stub.url + "/v1/brokers")
    assert stub.violations and all("num_cores: '2' is not integer" in v for v in stub.violations)


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


# -- the stub's scripts and counters, which the fault benchmark reads -----------------------


def test_a_timed_outage_answers_every_request_until_it_clears(
    stubs: list[RedpandaAdminStub],
) -> None:
    """The stub's ``for_s`` script (an Admin API answering 503 for a while, as the fault
    benchmark uses it): every request fails during it, the first one after it succeeds."""
    outage = stubs[0].script("GET", "/v1/brokers", times=0, for_s=0.4, status=503)
    with RedpandaAdmin(stubs[0].url, max_retries=0) as admin:
        for _ in range(3):
            with pytest.raises(RedpandaAdminError) as err:
                admin.brokers()
            assert err.value.status == 503 and err.value.retriable
        time.sleep(0.45)
        assert len(admin.brokers()) == 3
    assert outage.hits == 3
    assert len(requests_to(stubs, "GET", "/v1/brokers")) == 4


def test_the_cluster_counts_transfers_that_moved_a_leader(
    stubs: list[RedpandaAdminStub],
) -> None:
    with RedpandaAdmin(stubs[0].url) as admin:
        admin.transfer_leadership("orders", 0, 1)
        admin.transfer_leadership("orders", 0, 1)  # a repeat moves nothing
    assert stubs[0].cluster.leader_changes == 1
