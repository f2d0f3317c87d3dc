"""RedpandaAdmin against the contract stub (a real HTTP server serving the stated contract).

Every test that talks to the stub runs inside ``running_stubs``, which fails the test if the
client sent any request the Admin API does not declare.
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from actuators.redpanda_admin import (
    RedpandaAdmin,
    RedpandaAdminError,
    backoff_delay_s,
    parse_error_body,
)
from bench.support.redpanda_admin_stub import (
    ClusterModel,
    RecordedRequest,
    RedpandaAdminStub,
    running_stubs,
)

CREDS = ("lagpilot", "s3cret")


class Sleeps(list[float]):
    """Records backoff sleeps instead of waiting them out."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def _cluster() -> ClusterModel:
    cluster = ClusterModel(node_ids=(0, 1, 2))
    cluster.add_topic("orders", partitions=3)  # leaders: p0 -> 0, p1 -> 1, p2 -> 2
    return cluster


@pytest.fixture
def stubs() -> Iterator[list[RedpandaAdminStub]]:
    with running_stubs(3, cluster=_cluster()) as started:
        yield started


def _requests(stubs: list[RedpandaAdminStub], method: str, suffix: str) -> list[RecordedRequest]:
    return [r for s in stubs for r in s.requests if r.method == method and r.path.endswith(suffix)]


def _dead_url() -> str:
    """A local port nobody listens on: connecting is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


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
    with RedpandaAdmin(_dead_url(), max_retries=0) as admin:
        assert admin.is_ready() is False


def test_transfer_leadership_follows_307_to_the_leader(stubs: list[RedpandaAdminStub]) -> None:
    # Sent to node 0; partition 1 is led by node 1, which alone may transfer it.
    with RedpandaAdmin(stubs[0].url) as admin:
        admin.transfer_leadership("orders", 1, target=2)
        assert admin.partition("orders", 1)["leader_id"] == 2
    sent = _requests(stubs, "POST", "/transfer_leadership")
    assert [r.node_id for r in sent] == [0, 1]
    assert all(r.query == {"target": ["2"]} for r in sent)


def test_redirect_resends_basic_auth_to_the_leader() -> None:
    with running_stubs(3, cluster=_cluster(), require_auth=CREDS) as stubs:
        with RedpandaAdmin(stubs[0].url, username=CREDS[0], password=CREDS[1]) as admin:
            admin.transfer_leadership("orders", 1, target=0)
            assert admin.partition("orders", 1)["leader_id"] == 0
        sent = _requests(stubs, "POST", "/transfer_leadership")
        assert [(r.node_id, r.auth) for r in sent] == [(0, CREDS), (1, CREDS)]


def test_move_replicas_changes_the_assignment(stubs: list[RedpandaAdminStub]) -> None:
    with RedpandaAdmin(stubs[1].url) as admin:  # moves run on the controller (node 0)
        admin.move_replicas("orders", 0, [{"node_id": 1, "core": 1}, {"node_id": 2, "core": 0}])
        part = admin.partition("orders", 0)
    assert part["replicas"] == [{"node_id": 1, "core": 1}, {"node_id": 2, "core": 0}]
    assert part["leader_id"] in (1, 2)
    body = _requests(stubs, "POST", "/replicas")[-1].body
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


# -- retries, errors, timeouts, failover ----------------------------------------------------


@pytest.mark.parametrize("status", [503, 504, 429])
def test_busy_answers_are_retried_then_succeed(stubs: list[RedpandaAdminStub], status: int) -> None:
    stubs[0].script("GET", "/v1/brokers", times=2, status=status)
    sleeps = Sleeps()
    with RedpandaAdmin(stubs[0].url, max_retries=4, sleep=sleeps) as admin:
        assert len(admin.brokers()) == 3
    assert len(_requests(stubs, "GET", "/v1/brokers")) == 3
    assert len(sleeps) == 2


def test_move_in_progress_is_retried_with_bounded_backoff_then_retriable_error() -> None:
    cluster = _cluster()
    cluster.hold_moves = True
    with running_stubs(1, cluster=cluster) as (stub,):
        sleeps = Sleeps()
        admin = RedpandaAdmin(
            stub.url, max_retries=3, backoff_base_s=0.1, backoff_max_s=0.3, sleep=sleeps
        )
        with admin:
            admin.move_replicas("orders", 0, [{"node_id": 1, "core": 0}])
            assert admin.partition("orders", 0)["status"] == "in_progress"
            with pytest.raises(RedpandaAdminError) as err:
                admin.move_replicas("orders", 0, [{"node_id": 2, "core": 0}])
        assert len(_requests([stub], "POST", "/replicas")) == 1 + 4
    exc = err.value
    assert (exc.status, exc.code, exc.retriable) == (503, 503, True)
    assert "Partition update already in progress" in exc.message
    assert "gave up after 4 attempts" in str(exc)
    assert len(sleeps) == 3
    assert all(0 <= s <= cap for s, cap in zip(sleeps, [0.1, 0.2, 0.3], strict=True))


def test_4xx_is_not_retried_and_carries_redpandas_message(
    stubs: list[RedpandaAdminStub],
) -> None:
    sleeps = Sleeps()
    with RedpandaAdmin(stubs[1].url, sleep=sleeps) as admin, pytest.raises(RedpandaAdminError) as e:
        admin.transfer_leadership("orders", 1, target=7)  # 7 holds no replica
    assert (e.value.status, e.value.code, e.value.retriable) == (400, 400, False)
    assert "Target node 7 is not a replica" in e.value.message
    assert sleeps == []
    text = str(e.value)
    assert text.startswith("POST http://127.0.0.1:")
    assert "HTTP 400, Redpanda code 400" in text
    assert e.value.to_dict()["message"] == e.value.message


def test_unknown_partition_says_what_to_check(stubs: list[RedpandaAdminStub]) -> None:
    with RedpandaAdmin(stubs[0].url) as admin, pytest.raises(RedpandaAdminError) as err:
        admin.partition("missing-topic", 0)
    assert err.value.status == 404
    assert "Could not find ntp" in err.value.message
    assert "check the topic" in str(err.value)


def test_missing_credentials_say_how_to_fix() -> None:
    with (
        running_stubs(1, require_auth=CREDS) as (stub,),
        RedpandaAdmin(stub.url) as admin,
        pytest.raises(RedpandaAdminError) as err,
    ):
        admin.brokers()
    assert (err.value.status, err.value.retriable) == (401, False)
    assert "admin_api_require_auth" in str(err.value)


def test_redirects_are_bounded(stubs: list[RedpandaAdminStub]) -> None:
    stubs[0].script("GET", "/v1/brokers", times=10, redirect_to=stubs[0].url)
    with (
        RedpandaAdmin(stubs[0].url, max_retries=0, max_redirects=3) as admin,
        pytest.raises(RedpandaAdminError, match="more than 3 redirects") as err,
    ):
        admin.brokers()
    assert err.value.retriable is True
    assert len(_requests(stubs, "GET", "/v1/brokers")) == 4


def test_slow_answer_times_out_then_retry_succeeds(stubs: list[RedpandaAdminStub]) -> None:
    stubs[0].script("GET", "/v1/cluster/health_overview", times=1, delay_s=0.6)
    with RedpandaAdmin(stubs[0].url, timeout_s=0.2, sleep=Sleeps()) as admin:
        assert admin.health_overview()["is_healthy"] is True


def test_timeouts_are_bounded_and_retriable(stubs: list[RedpandaAdminStub]) -> None:
    stubs[0].script("GET", "/v1/brokers", times=2, delay_s=0.6)
    started = time.monotonic()
    with (
        RedpandaAdmin(stubs[0].url, timeout_s=0.2, max_retries=1, sleep=Sleeps()) as admin,
        pytest.raises(RedpandaAdminError) as err,
    ):
        admin.brokers()
    assert time.monotonic() - started < 0.6 * 2
    assert err.value.retriable is True
    assert err.value.status is None
    assert "timeout_s=0.2" in str(err.value)


def test_failover_to_the_next_url_on_connection_errors(stubs: list[RedpandaAdminStub]) -> None:
    sleeps = Sleeps()
    with RedpandaAdmin([_dead_url(), stubs[1].url], max_retries=0, sleep=sleeps) as admin:
        assert len(admin.brokers()) == 3
        assert admin.partition("orders", 2)["leader_id"] == 2
    assert sleeps == []  # failover is immediate; backoff is for when every URL failed
    assert {r.node_id for s in stubs for r in s.requests} == {1}


def test_dropped_connection_is_retried(stubs: list[RedpandaAdminStub]) -> None:
    stubs[0].script("GET", "/v1/brokers", times=1, drop=True)
    with RedpandaAdmin(stubs[0].url, sleep=Sleeps()) as admin:
        assert len(admin.brokers()) == 3


def test_no_url_answering_is_a_retriable_error_after_the_retries() -> None:
    sleeps = Sleeps()
    with (
        RedpandaAdmin([_dead_url(), _dead_url()], max_retries=2, sleep=sleeps) as admin,
        pytest.raises(RedpandaAdminError) as err,
    ):
        admin.brokers()
    assert err.value.retriable is True
    assert "no admin URL answered" in err.value.message
    assert "gave up after 3 attempts" in err.value.message
    assert len(sleeps) == 2


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


def test_https_to_http_redirect_is_refused() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(307, headers={"Location": "http://leader:9644/v1/brokers"})

    admin = RedpandaAdmin(
        "https://admin:9644", username="u", password="p", transport=httpx.MockTransport(answer)
    )
    with admin, pytest.raises(RedpandaAdminError, match="credentials would go in clear") as err:
        admin.brokers()
    assert err.value.retriable is False


def test_redirects_that_may_change_the_method_are_not_followed() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(302, headers={"Location": "http://leader:9644/v1/brokers"})

    with (
        RedpandaAdmin("http://admin:9644", transport=httpx.MockTransport(answer)) as admin,
        pytest.raises(RedpandaAdminError) as err,
    ):
        admin.transfer_leadership("t", 0, target=1)
    assert (err.value.status, err.value.retriable) == (302, False)


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
    ("retry", "unit", "expected"),
    [
        (0, 0.0, 0.0),
        (0, 0.5, 0.05),
        (1, 0.5, 0.1),
        (3, 0.5, 0.4),
        (5, 0.5, 1.0),  # 0.1 * 32 = 3.2, capped at 2.0
        (60, 0.999, 1.998),  # large exponents stay capped
    ],
)
def test_backoff_is_full_jitter_under_an_exponential_cap(
    retry: int, unit: float, expected: float
) -> None:
    assert backoff_delay_s(retry, 0.1, 2.0, unit) == pytest.approx(expected)


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


# -- TLS: a real handshake with certificates made for the test ------------------------------


def _issue(name: str, issuer: tuple[Any, Any] | None, *, ca: bool) -> tuple[Any, Any]:
    """(certificate, key) for ``name``; self-signed when ``issuer`` is None.

    cryptography is imported here, not at the top, so that without it only the TLS tests
    fail (loudly) and the rest of this module still runs.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    signer_cert, signer_key = issuer if issuer else (None, key)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(signer_cert.subject if signer_cert else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        usage = x509.KeyUsage(False, False, False, False, False, True, True, False, False)
        builder = builder.add_extension(usage, critical=True)
    else:
        san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
        builder = builder.add_extension(san, critical=False)
    return builder.sign(signer_key, hashes.SHA256()), key


def _write_pem(directory: Path, name: str, cert: Any, key: Any) -> tuple[str, str]:
    from cryptography.hazmat.primitives import serialization

    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_path), str(key_path)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, as PEM files."""
    directory = tmp_path_factory.mktemp("pki")
    ca = _issue("lagpilot-test-ca", None, ca=True)
    return {
        "ca": _write_pem(directory, "ca", *ca),
        "server": _write_pem(directory, "server", *_issue("redpanda-0", ca, ca=False)),
        "client": _write_pem(directory, "client", *_issue("lagpilot", ca, ca=False)),
    }


def _tls_stub(pki: dict[str, tuple[str, str]], *, mutual: bool) -> RedpandaAdminStub:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(*pki["server"])
    if mutual:
        ctx.load_verify_locations(cafile=pki["ca"][0])
        ctx.verify_mode = ssl.CERT_REQUIRED
    return RedpandaAdminStub(0, ClusterModel(node_ids=(0,)), ssl_context=ctx).start()


def test_tls_verifies_the_server_against_the_given_ca(pki: dict[str, tuple[str, str]]) -> None:
    stub = _tls_stub(pki, mutual=False)
    try:
        with RedpandaAdmin(stub.url, tls_verify=pki["ca"][0]) as admin:
            assert [b["node_id"] for b in admin.brokers()] == [0]
        with RedpandaAdmin(stub.url, tls_verify=False) as admin:
            assert len(admin.brokers()) == 1
        sleeps = Sleeps()
        with (
            RedpandaAdmin(stub.url, sleep=sleeps) as admin,  # system CAs do not know ours
            pytest.raises(RedpandaAdminError, match="not trusted") as err,
        ):
            admin.brokers()
        assert err.value.retriable is False
        assert sleeps == []  # a trust failure is not retried
        assert "tls_verify" in str(err.value)
    finally:
        stub.stop()
    assert stub.violations == []


def test_tls_client_certificate_is_presented(pki: dict[str, tuple[str, str]]) -> None:
    stub = _tls_stub(pki, mutual=True)
    try:
        with RedpandaAdmin(
            stub.url, tls_verify=pki["ca"][0], tls_client_cert=pki["client"]
        ) as admin:
            assert len(admin.brokers()) == 1
        with (
            RedpandaAdmin(stub.url, tls_verify=pki["ca"][0], max_retries=0) as admin,
            pytest.raises(RedpandaAdminError) as err,
        ):
            admin.brokers()  # the server refuses a client without a certificate
        assert err.value.status is None
    finally:
        stub.stop()
    assert stub.violations == []


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
    assert len(_requests(stubs, "GET", "/v1/brokers")) == 4


def test_the_cluster_counts_transfers_that_moved_a_leader(
    stubs: list[RedpandaAdminStub],
) -> None:
    with RedpandaAdmin(stubs[0].url) as admin:
        admin.transfer_leadership("orders", 0, 1)
        admin.transfer_leadership("orders", 0, 1)  # a repeat moves nothing
    assert stubs[0].cluster.leader_changes == 1
