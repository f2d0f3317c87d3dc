"""The Admin API's transport: failover, 307 redirects with credentials, and retries.

First the client's own requests against the contract stub (busy answers, timeouts, dead
hosts, redirect loops; redirects that would drop TLS or change the method, on an injected
transport). Then one action through the actuator's own path (make_backend -> dispatch ->
with_retries): the transport follows the leader's 307 and fails over from a dead host, and
the runner's retry budget is the only one, so an action never makes more than
``max_retries + 1`` tries however the cluster answers.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from actuators.backends import RedpandaBackend, make_backend
from actuators.dispatch import dispatch, with_retries
from actuators.errors import ActuatorError
from actuators.redpanda_admin import AdminTransport, RedpandaAdmin, RedpandaAdminError
from actuators.settings import Settings
from bench.support.actuator_harness import action
from bench.support.redpanda_admin_cluster import ClusterModel
from bench.support.redpanda_admin_stub import RedpandaAdminStub, running_stubs
from schemas.errors import LagpilotError
from tests.support.admin_api import CREDS, Sleeps, dead_url, orders_cluster, requests_to

# -- the client's requests: retries, errors, timeouts, failover, redirects ----------------


@pytest.mark.parametrize("status", [503, 504, 429])
def test_busy_answers_are_retried_then_succeed(stubs: list[RedpandaAdminStub], status: int) -> None:
    stubs[0].script("GET", "/v1/brokers", times=2, status=status)
    sleeps = Sleeps()
    with RedpandaAdmin(stubs[0].url, max_retries=4, sleep=sleeps) as admin:
        assert len(admin.brokers()) == 3
    assert len(requests_to(stubs, "GET", "/v1/brokers")) == 3
    assert len(sleeps) == 2


def test_move_in_progress_is_retried_with_bounded_backoff_then_retriable_error() -> None:
    cluster = orders_cluster()
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
        assert len(requests_to([stub], "POST", "/replicas")) == 1 + 4
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
    assert len(requests_to(stubs, "GET", "/v1/brokers")) == 4


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
    with RedpandaAdmin([dead_url(), stubs[1].url], max_retries=0, sleep=sleeps) as admin:
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
        RedpandaAdmin([dead_url(), dead_url()], max_retries=2, sleep=sleeps) as admin,
        pytest.raises(RedpandaAdminError) as err,
    ):
        admin.brokers()
    assert err.value.retriable is True
    assert "no admin URL answered" in err.value.message
    assert "gave up after 3 attempts" in err.value.message
    assert len(sleeps) == 2


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


# -- one action through the actuator's path ------------------------------------------------


@pytest.fixture
def secured() -> Iterator[list[RedpandaAdminStub]]:
    """Three nodes with basic auth on; ``orders`` replicated twice (p0: [0, 1], p1: [1, 2])."""
    cluster = ClusterModel(node_ids=(0, 1, 2))
    cluster.add_topic("orders", partitions=3, replication=2)
    with running_stubs(3, cluster=cluster, require_auth=CREDS) as started:
        yield started


def _move(partition: int, target: int) -> dict[str, object]:
    return action("transfer_leadership", f"orders/{partition}",
                  {"topic": "orders", "partition": partition, "target_broker": target},
                  key=b"k" * 16, now_ms=0)  # fmt: skip


def _apply(urls: list[str], move: dict[str, object], max_retries: int = 3) -> str:
    """The action as the runner applies it, with the backend `lagpilot-actuate` builds."""
    settings = Settings(backend="redpanda", redpanda_admin_urls=tuple(urls),
                        redpanda_admin_username=CREDS[0], redpanda_admin_password=CREDS[1],
                        max_retries=max_retries, backoff_base_s=0.001,
                        backoff_max_s=0.001).validated()  # fmt: skip
    backend = make_backend(settings)
    try:
        return with_retries(lambda: dispatch(backend, move), max_retries=settings.max_retries,
                            base_s=0.001, cap_s=0.001)  # fmt: skip
    finally:
        backend.close()


def _posts(secured: list[RedpandaAdminStub]) -> list[int]:
    return [r.node_id for s in secured for r in s.requests if r.method == "POST"]


def test_the_backend_builds_its_client_on_the_transport_without_retries_of_its_own() -> None:
    settings = Settings(backend="redpanda", redpanda_admin_urls=("http://a:9644",)).validated()
    backend = make_backend(settings)
    try:
        assert isinstance(backend, RedpandaBackend)
        admin = backend.admin
        assert isinstance(admin, RedpandaAdmin)
        assert isinstance(admin.transport, AdminTransport)
        assert admin.transport.max_retries == 0  # the runner owns the action's budget
    finally:
        backend.close()


def test_a_307_to_the_leader_is_followed_with_credentials(secured: list[RedpandaAdminStub]) -> None:
    # Sent to node 0; partition 1 is led by node 1, which alone may transfer it.
    done = _apply([secured[0].url], _move(1, 2))
    assert "leader 1 -> 2" in done
    assert secured[0].cluster.leader_changes == 1
    sent = [(r.node_id, r.auth) for s in secured for r in s.requests if r.method == "POST"]
    assert sent == [(0, CREDS), (1, CREDS)]
    assert all(s.violations == [] for s in secured)


def test_a_dead_host_is_skipped_at_once(secured: list[RedpandaAdminStub]) -> None:
    done = _apply([dead_url(), secured[1].url], _move(1, 2))
    assert "leader 1 -> 2" in done
    assert _posts(secured) == [1]  # one POST, on the live host that leads partition 1


def test_503_then_success_is_one_runner_retry(secured: list[RedpandaAdminStub]) -> None:
    secured[1].script("POST", None, times=1, status=503,
                    body={"message": "Partition move in progress", "code": 503})  # fmt: skip
    done = _apply([secured[1].url], _move(1, 2), max_retries=3)
    assert "leader 1 -> 2" in done
    assert _posts(secured) == [1, 1]  # the 503, then the retry that moved it
    assert secured[0].cluster.leader_changes == 1


@pytest.mark.parametrize("max_retries", [0, 2])
def test_an_action_never_makes_more_than_the_configured_tries(
    secured: list[RedpandaAdminStub], max_retries: int
) -> None:
    secured[1].script("POST", None, times=0, for_s=30.0, status=503)
    with pytest.raises(ActuatorError) as err:
        _apply([dead_url(), secured[1].url], _move(1, 2), max_retries=max_retries)
    assert err.value.retriable is True
    assert _posts(secured) == [1] * (max_retries + 1)
    assert secured[0].cluster.leader_changes == 0


def test_a_4xx_is_final_and_carries_status_url_and_hint(secured: list[RedpandaAdminStub]) -> None:
    # Partition 0's replicas are nodes 0 and 1: node 2 cannot lead it. Sent to node 2,
    # redirected to the leader (node 0), refused there.
    secured[0].script("POST", None, times=1, status=400,
                    body={"message": "Target node 2 is not a replica", "code": 400})  # fmt: skip
    admin = RedpandaAdmin(secured[2].url, username=CREDS[0], password=CREDS[1], max_retries=0)
    with admin, pytest.raises(LagpilotError) as err:
        admin.transfer_leadership("orders", 0, target=2)
    e = err.value
    assert isinstance(e, RedpandaAdminError) and isinstance(e, ActuatorError)
    assert (e.status, e.code, e.retriable) == (400, 400, False)
    assert e.url.startswith(secured[0].url + "/v1/partitions/kafka/orders/0/transfer_leadership")
    assert "fix the arguments" in e.hint
    assert sorted(_posts(secured)) == [0, 2]  # node 2 redirected, node 0 refused: no retry
    outcome_error = e.as_outcome_error()
    assert outcome_error["retriable"] is False and outcome_error["code"] == 400
    assert secured[0].url in outcome_error["message"] and "HTTP 400" in outcome_error["message"]
