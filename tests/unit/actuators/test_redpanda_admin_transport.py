"""One action through the actuator's own path (make_backend -> dispatch -> with_retries)
against the Admin API contract stub: the transport follows the leader's 307, fails over
from a dead host, and the runner's retry budget is the only one, so an action never makes
more than ``max_retries + 1`` tries however the cluster answers."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from actuators.backends import RedpandaBackend, make_backend
from actuators.dispatch import dispatch, with_retries
from actuators.errors import ActuatorError
from actuators.redpanda_admin import AdminTransport, RedpandaAdmin, RedpandaAdminError
from actuators.settings import Settings
from bench.support.actuator_harness import action
from bench.support.redpanda_admin_stub import ClusterModel, RedpandaAdminStub, running_stubs
from schemas.runtime.errors import LagpilotError

CREDS = ("lagpilot", "s3cret")


def _dead_url() -> str:
    """A local port nobody listens on: connecting is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def stubs() -> Iterator[list[RedpandaAdminStub]]:
    cluster = ClusterModel(node_ids=(0, 1, 2))
    cluster.add_topic("orders", partitions=3, replication=2)  # p0: [0, 1], p1: [1, 2]
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


def _posts(stubs: list[RedpandaAdminStub]) -> list[int]:
    return [r.node_id for s in stubs for r in s.requests if r.method == "POST"]


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


def test_a_307_to_the_leader_is_followed_with_credentials(stubs: list[RedpandaAdminStub]) -> None:
    # Sent to node 0; partition 1 is led by node 1, which alone may transfer it.
    done = _apply([stubs[0].url], _move(1, 2))
    assert "leader 1 -> 2" in done
    assert stubs[0].cluster.leader_changes == 1
    sent = [(r.node_id, r.auth) for s in stubs for r in s.requests if r.method == "POST"]
    assert sent == [(0, CREDS), (1, CREDS)]
    assert all(s.violations == [] for s in stubs)


def test_a_dead_host_is_skipped_at_once(stubs: list[RedpandaAdminStub]) -> None:
    done = _apply([_dead_url(), stubs[1].url], _move(1, 2))
    assert "leader 1 -> 2" in done
    assert _posts(stubs) == [1]  # one POST, on the live host that leads partition 1


def test_503_then_success_is_one_runner_retry(stubs: list[RedpandaAdminStub]) -> None:
    stubs[1].script("POST", None, times=1, status=503,
                    body={"message": "Partition move in progress", "code": 503})  # fmt: skip
    done = _apply([stubs[1].url], _move(1, 2), max_retries=3)
    assert "leader 1 -> 2" in done
    assert _posts(stubs) == [1, 1]  # the 503, then the retry that moved it
    assert stubs[0].cluster.leader_changes == 1


@pytest.mark.parametrize("max_retries", [0, 2])
def test_an_action_never_makes_more_than_the_configured_tries(
    stubs: list[RedpandaAdminStub], max_retries: int
) -> None:
    stubs[1].script("POST", None, times=0, for_s=30.0, status=503)
    with pytest.raises(ActuatorError) as err:
        _apply([_dead_url(), stubs[1].url], _move(1, 2), max_retries=max_retries)
    assert err.value.retriable is True
    assert _posts(stubs) == [1] * (max_retries + 1)
    assert stubs[0].cluster.leader_changes == 0


def test_a_4xx_is_final_and_carries_status_url_and_hint(stubs: list[RedpandaAdminStub]) -> None:
    # Partition 0's replicas are nodes 0 and 1: node 2 cannot lead it. Sent to node 2,
    # redirected to the leader (node 0), refused there.
    stubs[0].script("POST", None, times=1, status=400,
                    body={"message": "Target node 2 is not a replica", "code": 400})  # fmt: skip
    admin = RedpandaAdmin(stubs[2].url, username=CREDS[0], password=CREDS[1], max_retries=0)
    with admin, pytest.raises(LagpilotError) as err:
        admin.transfer_leadership("orders", 0, target=2)
    e = err.value
    assert isinstance(e, RedpandaAdminError) and isinstance(e, ActuatorError)
    assert (e.status, e.code, e.retriable) == (400, 400, False)
    assert e.url.startswith(stubs[0].url + "/v1/partitions/kafka/orders/0/transfer_leadership")
    assert "fix the arguments" in e.hint
    assert sorted(_posts(stubs)) == [0, 2]  # node 2 redirected, node 0 refused: no retry
    outcome_error = e.as_outcome_error()
    assert outcome_error["retriable"] is False and outcome_error["code"] == 400
    assert stubs[0].url in outcome_error["message"] and "HTTP 400" in outcome_error["message"]
