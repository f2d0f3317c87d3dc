"""A small synchronous client for Redpanda's Admin API (HTTP, default port 9644).

It covers what the actuator needs and nothing else: brokers, cluster health, a partition's
leader and replicas, leadership transfer, replica moves and cluster config patches. Each
method is a thin endpoint: it checks its arguments, sends one logical request and checks
the answer's shape. The Admin API's quirks live in one httpx transport
(:class:`~actuators.redpanda_admin_transport.AdminTransport`): failover across the given
URLs, 307 redirects to the leader with basic auth sent again, and bounded retries of 429,
503 and 504 with full-jitter backoff. Errors are :class:`RedpandaAdminError` (with status,
URL, Redpanda's code and a hint; ``retriable`` says what to do next).

Every call that changes the cluster is safe to repeat (moving leadership to the node that
already leads, or replicas to the set they already have, changes nothing), which is why a
request whose answer was lost to a timeout is sent again.
"""

from __future__ import annotations

import random
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx
import orjson

from actuators.redpanda_admin_errors import (
    RETRY_STATUSES,
    RedpandaAdminError,
    error_from_response,
    parse_error_body,
)
from actuators.redpanda_admin_transport import (
    ATTEMPTS_EXTENSION,
    URL_EXTENSION,
    AdminTransport,
    normalise_urls,
    ssl_context,
)

__all__ = [
    "RETRY_STATUSES",
    "AdminTransport",
    "RedpandaAdmin",
    "RedpandaAdminError",
    "parse_error_body",
]

_MAX_REDIRECTS = 5
_USER_AGENT = "lagpilot-redpanda-admin/1"
# The client's requests carry only path and query: AdminTransport sends them to each
# admin URL in turn. This origin is never contacted.
_ORIGIN = "http://redpanda-admin.invalid"


class RedpandaAdmin:
    """Sync client for one Redpanda cluster's Admin API; see the module docstring.

    ``max_retries`` bounds the transport's retries (0: the caller owns them, as the
    actuator's runner does); ``transport`` replaces the network under the failover,
    redirect and retry logic (a test's ``httpx.MockTransport``). ``sleep`` and ``rng`` are
    injectable so tests check the backoff schedule without waiting for it.
    """

    def __init__(
        self,
        urls: Sequence[str] | str,
        *,
        username: str | None = None,
        password: str | None = None,
        tls_verify: bool | str = True,
        tls_client_cert: tuple[str, str] | None = None,
        timeout_s: float = 5.0,
        max_retries: int = 4,
        backoff_base_s: float = 0.1,
        backoff_max_s: float = 2.0,
        transport: httpx.BaseTransport | None = None,
        max_redirects: int = _MAX_REDIRECTS,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.urls = normalise_urls(urls)
        if (username is None) != (password is None):
            raise RedpandaAdminError(
                "username and password must be given together",
                retriable=False,
                hint="set both username and password, or neither when admin auth is off",
            )
        for key, value in (("timeout_s", timeout_s), ("backoff_max_s", backoff_max_s)):
            if value <= 0:
                raise RedpandaAdminError(
                    f"{key}={value} must be > 0", retriable=False, hint=f"set {key} to e.g. 5.0"
                )
        if max_retries < 0 or backoff_base_s < 0 or max_redirects < 0:
            raise RedpandaAdminError(
                "max_retries, backoff_base_s and max_redirects must be >= 0",
                retriable=False,
                hint="use 0 to disable retries or redirects",
            )
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        auth = (
            httpx.BasicAuth(username, password)
            if username is not None and password is not None
            else None
        )
        if transport is None:
            needs_tls = any(u.startswith("https://") for u in self.urls)
            verify: ssl.SSLContext | bool = (
                ssl_context(tls_verify, tls_client_cert) if needs_tls or tls_client_cert else True
            )
            # trust_env=False: proxy and SSL_CERT_FILE variables must not silently change
            # where admin credentials go or which CA vouches for the cluster.
            transport = httpx.HTTPTransport(verify=verify, trust_env=False)
        self.transport = AdminTransport(
            self.urls,
            inner=transport,
            max_retries=max_retries,
            backoff_base_s=backoff_base_s,
            backoff_max_s=backoff_max_s,
            max_redirects=max_redirects,
            timeout_s=timeout_s,
            sleep=sleep,
            rng=rng,
        )
        self._client = httpx.Client(
            base_url=_ORIGIN,
            auth=auth,
            timeout=httpx.Timeout(timeout_s),
            transport=self.transport,
            follow_redirects=False,
            trust_env=False,
            headers={"User-Agent": _USER_AGENT, "Accept": "application/json"},
        )

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> RedpandaAdmin:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- API -------------------------------------------------------------------------------

    def brokers(self) -> list[dict[str, Any]]:
        """GET /v1/brokers: node_id, num_cores, rack, is_alive, membership_status, ..."""
        return self._expect_list(self._call("GET", "/v1/brokers"), "GET", "/v1/brokers")

    def health_overview(self) -> dict[str, Any]:
        """GET /v1/cluster/health_overview: is_healthy, controller_id, nodes_down, ..."""
        path = "/v1/cluster/health_overview"
        return self._expect_dict(self._call("GET", path), "GET", path)

    def is_ready(self) -> bool:
        """GET /v1/status/ready: True when this cluster answers 200 on some URL."""
        try:
            self._call("GET", "/v1/status/ready")
        except RedpandaAdminError:
            return False
        return True

    def partition(self, topic: str, partition: int, namespace: str = "kafka") -> dict[str, Any]:
        """GET /v1/partitions/{ns}/{topic}/{partition}: leader_id, replicas, status."""
        path = _partition_path(namespace, topic, partition)
        return self._expect_dict(self._call("GET", path), "GET", path)

    def transfer_leadership(
        self, topic: str, partition: int, target: int, namespace: str = "kafka"
    ) -> None:
        """POST .../transfer_leadership?target=N; 200 with an empty body when accepted.

        Redpanda's leader balancer (on by default) may move leadership back later; disable
        it or pin the topic if a move must stick.
        """
        path = _partition_path(namespace, topic, partition) + "/transfer_leadership"
        self._call("POST", path, params={"target": _nonneg_int("target", target)})

    def move_replicas(
        self,
        topic: str,
        partition: int,
        replicas: Sequence[Mapping[str, int]],
        namespace: str = "kafka",
    ) -> None:
        """POST .../replicas with ``[{"node_id", "core"}]``; 503 while a move is running."""
        body = []
        for i, replica in enumerate(replicas):
            try:
                body.append(
                    {
                        "node_id": _nonneg_int("node_id", replica["node_id"]),
                        "core": _nonneg_int("core", replica["core"]),
                    }
                )
            except (KeyError, TypeError) as exc:
                raise RedpandaAdminError(
                    f"replicas[{i}]={replica!r} is not a replica assignment",
                    retriable=False,
                    hint='pass replicas as [{"node_id": <int>, "core": <int>}, ...]',
                ) from exc
        if not body:
            raise RedpandaAdminError(
                "replicas is empty", retriable=False, hint="name at least one node_id and core"
            )
        path = _partition_path(namespace, topic, partition) + "/replicas"
        self._call("POST", path, json=body)

    def patch_cluster_config(
        self,
        upsert: Mapping[str, Any],
        remove: Sequence[str] = (),
        *,
        dry_run: bool = False,
        force: bool = False,
    ) -> dict[str, Any]:
        """PUT /v1/cluster_config; returns ``{"config_version": N}`` (empty on dry runs).

        A 400 lists each refused property with its reason in the error message.
        """
        params = {}
        if dry_run:
            params["dry_run"] = 1
        if force:
            params["force"] = 1
        body = {"upsert": dict(upsert), "remove": list(remove)}
        result = self._call("PUT", "/v1/cluster_config", params=params or None, json=body)
        return {} if result is None else self._expect_dict(result, "PUT", "/v1/cluster_config")

    # -- one logical request (the transport does the rest) ---------------------------------

    def _call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, int] | None = None,
        json: Any = None,
    ) -> Any:
        content = orjson.dumps(json) if json is not None else None
        headers = {"Content-Type": "application/json"} if content is not None else None
        response = self._client.request(
            method, path, params=params, content=content, headers=headers
        )
        url = response.extensions.get(URL_EXTENSION, path)
        if response.is_success:
            return _decode_success(method, url, response)
        attempts = response.extensions.get(ATTEMPTS_EXTENSION, 1)
        raise error_from_response(method, url, response, attempts)

    @staticmethod
    def _expect_dict(value: Any, method: str, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise _shape_error(method, path, "an object", value)
        return value

    @staticmethod
    def _expect_list(value: Any, method: str, path: str) -> list[dict[str, Any]]:
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise _shape_error(method, path, "a list of objects", value)
        return value


def _decode_success(method: str, url: str, response: httpx.Response) -> Any:
    if not response.content.strip():
        return None
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError as exc:
        raise RedpandaAdminError(
            f"answered {response.status_code} with a body that is not JSON: "
            f"{response.text[:120]!r}",
            retriable=False,
            method=method,
            url=url,
            status=response.status_code,
            hint="the URL may point at something other than Redpanda's Admin API (port 9644)",
        ) from exc


def _shape_error(method: str, path: str, expected: str, value: Any) -> RedpandaAdminError:
    return RedpandaAdminError(
        f"expected {expected}, got {type(value).__name__}",
        retriable=False,
        method=method,
        url=path,
        hint="the Admin API version may differ from the one lagpilot knows (Redpanda 24.x)",
    )


def _nonneg_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RedpandaAdminError(
            f"{name}={value!r} is not a non-negative integer",
            retriable=False,
            hint=f"pass {name} as an int >= 0",
        )
    return value


def _partition_path(namespace: str, topic: str, partition: int) -> str:
    if not namespace or not topic:
        raise RedpandaAdminError(
            "namespace and topic must be non-empty",
            retriable=False,
            hint='pass the topic name; namespace is "kafka" for Kafka topics',
        )
    p = _nonneg_int("partition", partition)
    return f"/v1/partitions/{quote(namespace, safe='')}/{quote(topic, safe='')}/{p}"
