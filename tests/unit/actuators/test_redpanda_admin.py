"""RedpandaAdmin's endpoints against the contract stub (a real HTTP server serving the
stated contract), and the edges that need no server (answers of the wrong shape, settings
and arguments refused before any request).

Every test that talks to the stub runs inside ``running_stubs``, which fails the test if the
client sent any request the Admin API does not declare. The transport under the client
(failover, redirects, retries) is tested in test_redpanda_admin_transport.py, TLS in
test_redpanda_admin_tls.py.
"""

from __future__ import annotations

import httpx
import pytest

from actuators.redpanda_admin import RedpandaAdmin, RedpandaAdminError, parse_error_body
from bench.support.redpanda_admin_stub import RedpandaAdminStub, running_stubs
from tests.support.admin_api import CREDS, dead_url, orders_cluster, requests_to

# -- every method ---------------------------------------------------------------------------


def test_brokers_lists_every_node(stubs: list[RedpandaAdminStub]) -> None:
    with RedpandaAdmin(stubs[0].url) as admin:
        brokers = admin.brokers()
    assert [b["node_id"] for b in brokers] == [0, 1, 2]
    assert all(b["is_alive"] for b in brokers)


def test_health_overview_reports_nodes_down(stubs: list[RedpandaAdminStub]) -> None:
    with RedpandaAdmin(stubs[0].url) as admin:
        assert admin.health_overview()["is_healthy"] is True
        stubs[0].cluster.alive[2] = False
        health = admin.health_overview()
    assert health["is_healthy"] is False
    assert health["nodes_down"] == [2]
    assert health["leaderless_partitions"] == ["kafka/orders/2"]


def test_partition_gives_leader_and_replicas(stubs: list[RedpandaAdminStub]) -> None:
    with RedpandaAdmin(stubs[2].url) as admin:
        part = admin.partition("orders", 1)
    assert part["leader_id"] == 1
    assert [r["node_id"] for r in part["replicas"]] == [1, 2, 0]


def test_is_ready(stubs: list[RedpandaAdminStub]) -> None:
    with RedpandaAdmin(stubs[0].url, max_retries=0) as admin:
        assert admin.is_ready() is True
    with RedpandaAdmin(dead_url(), max_retries=0) as admin:
        assert admin.is_ready() is False


def test_transfer_leadership_follows_307_to_the_leader(stubs: list[RedpandaAdminStub]) -> None:
    # Sent to node 0; partition 1 is led by node 1, which alone may transfer it.
    with RedpandaAdmin(stubs[0].url) as admin:
        admin.transfer_leadership("orders", 1, target=2)
        assert admin.partition("orders", 1)["leader_id"] == 2
    sent = requests_to(stubs, "POST", "/transfer_leadership")
    assert [r.node_id for r in sent] == [0, 1]
    assert all(r.query == {"target": ["2"]} for r in sent)


def test_redirect_resends_basic_auth_to_the_leader() -> None:
    with running_stubs(3, cluster=orders_cluster(), require_auth=CREDS) as stubs:
        with RedpandaAdmin(stubs[0].url, username=CREDS[0], password=CREDS[1]) as admin:
            admin.transfer_leadership("orders", 1, target=0)
            assert admin.partition("orders", 1)["leader_id"] == 0
        sent = requests_to(stubs, "POST", "/transfer_leadership")
        assert [(r.node_id, r.auth) for r in sent] == [(0, CREDS), (1, CREDS)]


def test_move_replicas_changes_the_assignment(stubs: list[RedpandaAdminStub]) -> None:
    with RedpandaAdmin(stubs[1].url) as admin:  # moves run on the controller (node 0)
        admin.move_replicas("orders", 0, [{"node_id": 1, "core": 1}, {"node_id": 2, "core": 0}])
        part = admin.partition("orders", 0)
    assert part["replicas"] == [{"node_id": 1, "core": 1}, {"node_id": 2, "core": 0}]
    assert part["leader_id"] in (1, 2)
    body = requests_to(stubs, "POST", "/replicas")[-1].body
    assert body == b'[{"node_id":1,"core":1},{"node_id":2,"core":0}]'


def test_patch_cluster_config_returns_the_new_version(stubs: list[RedpandaAdminStub]) -> None:
    with RedpandaAdmin(stubs[2].url) as admin:
        result = admin.patch_cluster_config(
            {"kafka_throughput_limit_node_in_bps": 10_000_000}, ["kafka_throughput_control"]
        )
        assert admin.patch_cluster_config({"enable_leader_balancer": False}, dry_run=True) == {}
    assert result == {"config_version": 2}
    assert stubs[0].cluster.config == {"kafka_throughput_limit_node_in_bps": 10_000_000}


def test_cluster_config_400_names_each_refused_property(stubs: list[RedpandaAdminStub]) -> None:
    with RedpandaAdmin(stubs[0].url) as admin, pytest.raises(RedpandaAdminError) as err:
        admin.patch_cluster_config({"no_such_property": 1})
    assert err.value.status == 400
    assert err.value.retriable is False
    assert "no_such_property: Unknown property" in err.value.message


# -- edges that need no server: injected transport, config errors, pure helpers -------------


def test_non_json_success_body_is_an_error_naming_the_port() -> None:
    transport = httpx.MockTransport(lambda req: httpx.Response(200, text="<html>hi</html>"))
    with (
        RedpandaAdmin("http://admin:9644", transport=transport) as admin,
        pytest.raises(RedpandaAdminError, match="not JSON") as err,
    ):
        admin.brokers()
    assert err.value.retriable is False
    assert "9644" in str(err.value)


def test_unexpected_shape_is_an_error() -> None:
    transport = httpx.MockTransport(lambda req: httpx.Response(200, json={"brokers": []}))
    with (
        RedpandaAdmin("http://admin:9644", transport=transport) as admin,
        pytest.raises(RedpandaAdminError, match="expected a list of objects"),
    ):
        admin.brokers()


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"urls": "redpanda-0:9644"}, "http://redpanda-0:9644"),
        ({"urls": []}, "no admin URL"),
        ({"urls": "http://a:9644", "username": "u"}, "username and password"),
        ({"urls": "http://a:9644", "timeout_s": 0}, "timeout_s=0"),
        ({"urls": "http://a:9644", "max_retries": -1}, "max_retries"),
        ({"urls": "https://a:9644", "tls_verify": "/nonexistent/ca.pem"}, "tls_verify="),
        ({"urls": "https://a:9644", "tls_client_cert": ("/no/c.pem", "/no/k.pem")}, "tls_client"),
    ],
)
def test_config_errors_name_the_key_and_the_fix(kwargs: dict[str, object], expected: str) -> None:
    with pytest.raises(RedpandaAdminError) as err:
        RedpandaAdmin(**kwargs)  # type: ignore[arg-type]
    assert expected in str(err.value)
    assert err.value.retriable is False


def test_bad_arguments_are_refused_before_any_request() -> None:
    calls: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(200)

    transport = httpx.MockTransport(answer)
    with RedpandaAdmin("http://a:9644", transport=transport) as admin:
        with pytest.raises(RedpandaAdminError, match="replicas\\[0\\]"):
            admin.move_replicas("t", 0, [{"node": 1}])
        with pytest.raises(RedpandaAdminError, match="target=-1"):
            admin.transfer_leadership("t", 0, target=-1)
        with pytest.raises(RedpandaAdminError, match="partition=True"):
            admin.partition("t", True)
    assert calls == []


def test_comma_separated_urls_and_topic_quoting() -> None:
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, json={"leader_id": 0, "replicas": []})

    urls = " http://a:9644/ , http://b:9644"
    with RedpandaAdmin(urls, transport=httpx.MockTransport(answer)) as admin:
        assert admin.urls == ["http://a:9644", "http://b:9644"]
        admin.partition("a/b", 3)
    assert seen == ["http://a:9644/v1/partitions/kafka/a%2Fb/3"]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"message": "Not leader", "code": 503}', ("Not leader", 503)),
        (b'{"message": "x"}', ("x", None)),
        (b'{"a": "Unknown property", "b": "x"}', ("invalid properties: a: Unknown property; b: x",
                                                   None)),
        (b"<html>bad gateway</html>", ("<html>bad gateway</html>", None)),
        (b"", ("empty error body", None)),
        (b'[1, 2]', ("[1, 2]", None)),
    ],
)  # fmt: skip
def test_parse_error_body(body: bytes, expected: tuple[str, int | None]) -> None:
    assert parse_error_body(body) == expected
