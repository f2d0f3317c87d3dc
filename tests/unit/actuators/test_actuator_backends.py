"""Backends without a broker: dry-run's durable record, Redpanda leadership against the
Admin API contract stub, retries, error translation, and the metrics endpoints."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from actuators.backends import DryRunBackend, RedpandaBackend, make_backend
from actuators.dispatch import dispatch, with_retries
from actuators.errors import ActuatorError
from actuators.metrics import Metrics, MetricsServer
from actuators.quotas import broker_error
from actuators.redpanda_admin import RedpandaAdmin
from actuators.settings import Settings
from bench.support.actuator_harness import action
from bench.support.redpanda_admin_cluster import ClusterModel
from bench.support.redpanda_admin_stub import running_stubs

KEY = b"unit-test-signing-key-0123456789"


def test_dry_run_appends_every_call_durably_and_reads_past_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "record.jsonl"
    backend = DryRunBackend(str(path))
    backend.throttle("client-id", "a", 100)
    backend.add_partitions("orders", 6)
    backend.close()
    with path.open("ab") as f:
        f.write(b'["release", "client-id"')  # a write cut by SIGKILL
    assert DryRunBackend.read_record(path) == [["throttle", "client-id", "a", 100],
                                               ["add_partitions", "orders", 6]]  # fmt: skip


def test_dispatch_calls_the_operation_the_action_names() -> None:
    backend = DryRunBackend()
    params = {"topic": "orders", "partition": 1, "target_broker": 2}
    move = action("transfer_leadership", "topic:orders/1", params, key=KEY, now_ms=1)
    dispatch(backend, move)
    dispatch(backend, action("release_producer", "client-id:a",
                             {"entity": "client-id", "name": "a"}, key=KEY, now_ms=1))  # fmt: skip
    assert backend.calls == [("transfer_leadership", "orders", 1, 2), ("release", "client-id", "a")]
    with pytest.raises(ActuatorError, match="no backend operation"):
        dispatch(backend, action("halt", "scope:all", {"scope": "all"}, key=KEY, now_ms=1))


def test_retries_are_bounded_and_only_for_retriable_errors() -> None:
    sleeps: list[float] = []
    calls = []

    def flaky() -> str:
        calls.append(1)
        raise ActuatorError("busy", code=503, retriable=True)

    with pytest.raises(ActuatorError, match="busy"):
        with_retries(flaky, max_retries=3, base_s=0.1, cap_s=0.25, sleep=sleeps.append)
    assert len(calls) == 4 and len(sleeps) == 3
    assert all(0 <= s <= cap for s, cap in zip(sleeps, [0.1, 0.2, 0.25], strict=True))

    calls.clear()

    def refused() -> str:
        calls.append(1)
        raise ActuatorError("no", retriable=False)

    with pytest.raises(ActuatorError):
        with_retries(refused, max_retries=3, base_s=0.1, cap_s=1, sleep=sleeps.append)
    assert len(calls) == 1

    answers: Iterator[ActuatorError | str] = iter([ActuatorError("busy", retriable=True), "done"])

    def then_ok() -> str:
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a

    assert (
        with_retries(then_ok, max_retries=1, base_s=0.01, cap_s=0.01, sleep=sleeps.append) == "done"
    )


def test_broker_quota_errors_keep_code_and_retriability_and_explain_prefix_on_kafka() -> None:
    err = broker_error("AlterClientQuotas(set)", "client-id-prefix", "agent-", 42,
                       "Unhandled client quota entity type: client-id-prefix")  # fmt: skip
    assert err.code == 42 and err.retriable is False
    assert "InvalidRequestError" in err.message and "throttle by client-id" in err.message
    assert broker_error("x", "client-id", "a", 7, None).retriable is True  # RequestTimedOut


def _cluster() -> ClusterModel:
    cluster = ClusterModel(node_ids=(0, 1, 2))
    cluster.add_topic("orders", partitions=3, replication=2)  # p0: [0, 1], p1: [1, 2]
    return cluster


def test_redpanda_backend_moves_leadership_through_the_admin_api() -> None:
    with running_stubs(3, cluster=_cluster()) as stubs:
        admin = RedpandaAdmin([s.url for s in stubs], max_retries=1, backoff_base_s=0.01)
        kafka = DryRunBackend()
        backend = RedpandaBackend(admin, kafka)
        assert "leader 0 -> 1" in backend.transfer_leadership("orders", 0, 1)
        assert admin.partition("orders", 0)["leader_id"] == 1
        assert "already leads" in backend.transfer_leadership("orders", 0, 1)
        with pytest.raises(ActuatorError, match="not a replica") as not_replica:
            backend.transfer_leadership("orders", 0, 2)
        assert not_replica.value.retriable is False
        backend.throttle("client-id", "a", 100)  # quotas go over the Kafka protocol
        assert kafka.calls == [("throttle", "client-id", "a", 100)]
        backend.close()


def test_redpanda_errors_surface_message_code_and_retriability() -> None:
    with running_stubs(1, cluster=_cluster()) as [stub]:
        admin = RedpandaAdmin(stub.url, max_retries=1, backoff_base_s=0.01, backoff_max_s=0.01)
        backend = RedpandaBackend(admin, DryRunBackend())
        stub.script("POST", None, times=5, status=503,
                    body={"message": "Partition move in progress", "code": 503})  # fmt: skip
        with pytest.raises(ActuatorError, match="Partition move in progress") as busy:
            backend.transfer_leadership("orders", 1, 2)
        assert busy.value.retriable is True and busy.value.code == 503
        with pytest.raises(ActuatorError, match="Could not find ntp") as missing:
            backend.transfer_leadership("nope", 0, 1)
        assert missing.value.retriable is False and missing.value.code == 404
        backend.close()


@pytest.mark.parametrize(
    ("fault", "requests_per_try"),
    [({"status": 503}, 1), ({"redirect_to": "self"}, 6)],  # 6: the first answer, 5 redirects
)
def test_the_backend_lagpilot_actuate_builds_retries_in_one_layer(
    fault: dict[str, object], requests_per_try: int
) -> None:
    """The runner's retries are the only ones: a failing Admin API sees max_retries + 1
    tries of one action, not (max_retries + 1) x the client's own attempts."""
    with running_stubs(1, cluster=_cluster()) as [stub]:
        how = {k: (stub.url if v == "self" else v) for k, v in fault.items()}
        stub.script(None, None, times=0, for_s=30.0, **how)
        settings = Settings(backend="redpanda", redpanda_admin_urls=(stub.url,), max_retries=3,
                            backoff_base_s=0.001, backoff_max_s=0.001).validated()  # fmt: skip
        backend = make_backend(settings)
        move = action("transfer_leadership", "orders/0",
                      {"topic": "orders", "partition": 0, "target_broker": 1},
                      key=b"k" * 16, now_ms=0)  # fmt: skip
        with pytest.raises(ActuatorError) as err:
            with_retries(lambda: dispatch(backend, move), max_retries=settings.max_retries,
                         base_s=0.001, cap_s=0.001)  # fmt: skip
        assert err.value.retriable is True
        assert len(stub.requests) == (settings.max_retries + 1) * requests_per_try
        assert stub.cluster.leader_changes == 0
        backend.close()


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_metrics_health_and_readiness_endpoints() -> None:
    metrics = Metrics()
    ready = {"ok": False}
    server = MetricsServer(metrics, lambda: ready["ok"], 0).start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        metrics.events.labels(result="applied", type="throttle_producer").inc()
        metrics.halted.set(1)
        status, body = _get(base + "/metrics")
        assert status == 200
        assert (
            'lagpilot_actuator_events_total{result="applied",type="throttle_producer"} 1.0' in body
        )
        assert "lagpilot_actuator_halted 1.0" in body
        assert "lagpilot_actuator_apply_seconds_bucket" in body
        assert "lagpilot_actuator_throttles_active" in body
        assert _get(base + "/healthz")[0] == 200
        assert _get(base + "/readyz")[0] == 503
        ready["ok"] = True
        assert _get(base + "/readyz")[0] == 200
    finally:
        server.stop()
