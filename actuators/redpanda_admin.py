"""A small synchronous client for Redpanda's Admin API (HTTP, default port 9644).

It covers what the actuator needs and nothing else: brokers, cluster health, a partition's
leader and replicas, leadership transfer, replica moves and cluster config patches. The
Admin API's quirks are handled here so callers never see them:

- Redpanda answers 307 to a request that must run on a partition's (or the controller's)
  leader. httpx drops credentials on cross-origin redirects, and the leader has a different
  origin, so redirects are followed here, bounded, with basic auth sent again.
- 503 ("a move is in progress", "not ready"), 504 and 429 mean "later": retried with
  exponential backoff and full jitter, bounded by ``max_retries``.
- A broker that does not answer is skipped for the next URL; all URLs failing counts as one
  failed attempt.
- Errors come back as ``{"message": str, "code": int}``; both are surfaced on
  :class:`RedpandaAdminError`, whose ``retriable`` tells the caller what to do next.

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

from schemas.runtime.backoff import backoff_s
from schemas.runtime.errors import LagpilotError

__all__ = [
    "RETRY_STATUSES",
    "RedpandaAdmin",
    "RedpandaAdminError",
    "backoff_delay_s",
    "parse_error_body",
]

#: Answers that mean "try again later". Other 4xx/5xx are final for this request.
RETRY_STATUSES = frozenset({429, 503, 504})
# Redpanda redirects with 307; 308 keeps the method too. 301/302/303 may turn a POST into
# a GET, which would silently drop the change, so they are errors here.
_REDIRECT_STATUSES = frozenset({307, 308})
_MAX_REDIRECTS = 5
_USER_AGENT = "lagpilot-redpanda-admin/1"


class RedpandaAdminError(LagpilotError):
    """A failed Admin API call, with what the caller needs to decide the next step.

    ``code`` is Redpanda's own code from the error body (often equal to the HTTP status),
    ``status`` the HTTP status (None when no answer came), ``retriable`` whether the same
    call may succeed later unchanged.
    """

    def __init__(
        self,
        message: str,
        *,
        retriable: bool,
        method: str = "",
        url: str = "",
        status: int | None = None,
        code: int | None = None,
        hint: str = "",
    ) -> None:
        super().__init__(message, retriable=retriable, code=code, hint=hint)
        self.method = method
        self.url = url
        self.status = status

    def __str__(self) -> str:
        where = f"{self.method} {self.url}: " if self.method else ""
        answer = []
        if self.status is not None:
            answer.append(f"HTTP {self.status}")
        if self.code is not None:
            answer.append(f"Redpanda code {self.code}")
        detail = f" ({', '.join(answer)})" if answer else ""
        hint = f"; {self.hint}" if self.hint else ""
        return f"{where}{self.message}{detail}{hint}"

    def to_dict(self) -> dict[str, Any]:
        """The error as plain data, for an outcome event's ``error`` field."""
        return {
            "message": self.message,
            "code": self.code,
            "status": self.status,
            "retriable": self.retriable,
            "method": self.method,
            "url": self.url,
        }


#: Full-jitter backoff with the draw passed in (schemas.runtime.backoff, the one backoff).
backoff_delay_s = backoff_s


def parse_error_body(content: bytes) -> tuple[str, int | None]:
    """Redpanda's message and code from an error body, whatever shape it came in.

    Most routes answer ``{"message", "code"}``; PUT /v1/cluster_config answers 400 with a map
    of property name to error; proxies in between answer HTML or nothing.
    """
    text = content.decode("utf-8", "replace").strip()
    if not text:
        return "empty error body", None
    try:
        body = orjson.loads(content)
    except orjson.JSONDecodeError:
        return text[:300], None
    if isinstance(body, dict):
        message = body.get("message")
        code = body.get("code")
        code_int = code if isinstance(code, int) and not isinstance(code, bool) else None
        if isinstance(message, str):
            return message, code_int
        fields = "; ".join(f"{k}: {v}" for k, v in sorted(body.items()) if k != "code")
        if fields:
            return f"invalid properties: {fields}", code_int
    return text[:300], None


def _hint_for(status: int) -> str:
    if status == 401:
        return "admin_api_require_auth is on: pass username/password of a SASL user"
    if status == 403:
        return "the user is not allowed: add it to the cluster's `superusers`"
    if status == 404:
        return "check the topic, partition and namespace exist (GET /v1/partitions)"
    if status == 400:
        return "the request was refused as invalid: fix the arguments named in the message"
    if status in RETRY_STATUSES:
        return "the cluster is busy; retry later or raise max_retries/backoff_max_s"
    return "see the broker's log for this request"


def _normalise_urls(urls: Sequence[str] | str) -> list[str]:
    items = urls.split(",") if isinstance(urls, str) else list(urls)
    out = []
    for raw in items:
        url = raw.strip().rstrip("/")
        if not url:
            continue
        if not url.startswith(("http://", "https://")):
            raise RedpandaAdminError(
                f"admin URL {raw.strip()!r} has no scheme",
                retriable=False,
                hint="set urls to e.g. http://redpanda-0:9644 (https:// when admin TLS is on)",
            )
        out.append(url)
    if not out:
        raise RedpandaAdminError(
            "no admin URL given",
            retriable=False,
            hint="set urls to the brokers' Admin API addresses, e.g. http://redpanda-0:9644",
        )
    return out


def _ssl_context(tls_verify: bool | str, tls_client_cert: tuple[str, str] | None) -> ssl.SSLContext:
    """Build the TLS context here: httpx 0.28 deprecates ``verify=<path>`` and ``cert=``."""
    try:
        if isinstance(tls_verify, str):
            ctx = ssl.create_default_context(cafile=tls_verify)
        else:
            ctx = ssl.create_default_context()
            if not tls_verify:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
    except (OSError, ssl.SSLError) as exc:
        raise RedpandaAdminError(
            f"tls_verify={tls_verify!r} cannot be loaded as a CA bundle: {exc}",
            retriable=False,
            hint="set tls_verify to a readable PEM file of the CA that signed the admin cert",
        ) from exc
    if tls_client_cert is not None:
        try:
            ctx.load_cert_chain(*tls_client_cert)
        except (OSError, ssl.SSLError, TypeError) as exc:
            raise RedpandaAdminError(
                f"tls_client_cert={tls_client_cert!r} cannot be loaded: {exc}",
                retriable=False,
                hint="set tls_client_cert to (cert.pem, key.pem), both readable PEM files",
            ) from exc
    return ctx


class RedpandaAdmin:
    """Sync client for one Redpanda cluster's Admin API; see the module docstring.

    ``sleep`` and ``rng`` are injectable so tests can check the backoff schedule without
    waiting for it.
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
        self.urls = _normalise_urls(urls)
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
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.max_redirects = max_redirects
        self._auth = (
            httpx.BasicAuth(username, password)
            if username is not None and password is not None
            else None
        )
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._preferred = 0  # index of the last URL that answered
        needs_tls = any(u.startswith("https://") for u in self.urls)
        verify: ssl.SSLContext | bool = (
            _ssl_context(tls_verify, tls_client_cert) if needs_tls or tls_client_cert else True
        )
        # trust_env=False: proxy and SSL_CERT_FILE variables must not silently change where
        # admin credentials go or which CA vouches for the cluster.
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout_s),
            verify=verify,
            transport=transport,
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

    # -- transport -------------------------------------------------------------------------

    def _call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, int] | None = None,
        json: Any = None,
    ) -> Any:
        """Send one logical request: URLs in turn, redirects, then backoff and retry."""
        content = orjson.dumps(json) if json is not None else None
        last: RedpandaAdminError | None = None
        for attempt in range(self.max_retries + 1):
            if attempt:
                unit = self._rng.random()
                self._sleep(
                    backoff_delay_s(attempt - 1, self.backoff_base_s, self.backoff_max_s, unit)
                )
            try:
                response = self._send_any_url(method, path, params, content)
            except RedpandaAdminError as exc:
                if not exc.retriable:
                    raise
                last = exc
                continue
            if response.status_code in RETRY_STATUSES:
                last = self._error(method, response)
                continue
            if response.is_success:
                return _decode_success(method, response)
            raise self._error(method, response)
        assert last is not None
        last.message = f"{last.message} (gave up after {self.max_retries + 1} attempts)"
        raise last

    def _send_any_url(
        self, method: str, path: str, params: Mapping[str, int] | None, content: bytes | None
    ) -> httpx.Response:
        """The first answer from the URLs, starting at the one that answered last."""
        errors = []
        n = len(self.urls)
        for step in range(n):
            index = (self._preferred + step) % n
            url = self.urls[index] + path
            try:
                response = self._send_following(method, url, params, content)
            except RedpandaAdminError as exc:
                if not exc.retriable:
                    raise
                errors.append(exc)
                continue
            self._preferred = index
            return response
        last = errors[-1]
        if n > 1:
            last.message = f"no admin URL answered ({'; '.join(e.message for e in errors)})"
        raise last

    def _send_following(
        self, method: str, url: str, params: Mapping[str, int] | None, content: bytes | None
    ) -> httpx.Response:
        """Send, following redirects ourselves so credentials reach the leader."""
        request_url = httpx.URL(url, params=params)
        for _ in range(self.max_redirects + 1):
            response = self._send_once(method, request_url, content)
            if response.status_code not in _REDIRECT_STATUSES:
                return response
            location = response.headers.get("Location")
            if not location:
                raise RedpandaAdminError(
                    "redirect without a Location header",
                    retriable=False,
                    method=method,
                    url=str(request_url),
                    status=response.status_code,
                    hint="check the broker's advertised admin address",
                )
            try:
                target = request_url.join(location)
            except httpx.InvalidURL as exc:
                raise RedpandaAdminError(
                    f"redirect to an invalid Location {location!r}",
                    retriable=False,
                    method=method,
                    url=str(request_url),
                    status=response.status_code,
                    hint="check the broker's advertised admin address",
                ) from exc
            if request_url.scheme == "https" and target.scheme != "https":
                raise RedpandaAdminError(
                    f"refusing redirect from https to {target}: credentials would go in clear",
                    retriable=False,
                    method=method,
                    url=str(request_url),
                    status=response.status_code,
                    hint="enable TLS on every broker's admin listener",
                )
            request_url = target
        raise RedpandaAdminError(
            f"more than {self.max_redirects} redirects",
            retriable=True,
            method=method,
            url=url,
            hint="leadership is moving; retry later or raise max_redirects",
        )

    def _send_once(self, method: str, url: httpx.URL, content: bytes | None) -> httpx.Response:
        """One HTTP exchange; httpx's exceptions end here (the I/O edge)."""
        headers = {"Content-Type": "application/json"} if content is not None else None
        try:
            return self._client.request(
                method, url, content=content, headers=headers, auth=self._auth
            )
        except httpx.TimeoutException as exc:
            raise RedpandaAdminError(
                f"no answer within timeout_s={self.timeout_s} ({type(exc).__name__})",
                retriable=True,
                method=method,
                url=str(url),
                hint="the broker is slow or unreachable; raise timeout_s or check the broker",
            ) from exc
        except httpx.TransportError as exc:
            untrusted = "CERTIFICATE_VERIFY_FAILED" in str(exc)
            raise RedpandaAdminError(
                f"the admin certificate was not trusted ({exc})"
                if untrusted
                else f"cannot reach the Admin API ({type(exc).__name__}: {exc})",
                retriable=not untrusted,  # trust does not come back by itself
                method=method,
                url=str(url),
                hint="set tls_verify to the CA bundle (PEM path) that signed it"
                if untrusted
                else "check the URL/port (default 9644), the TLS settings and that it runs",
            ) from exc
        except httpx.HTTPError as exc:  # e.g. an invalid URL built from a Location header
            raise RedpandaAdminError(
                f"request failed ({type(exc).__name__}: {exc})",
                retriable=False,
                method=method,
                url=str(url),
                hint="check the admin URLs",
            ) from exc

    def _error(self, method: str, response: httpx.Response) -> RedpandaAdminError:
        message, code = parse_error_body(response.content)
        status = response.status_code
        return RedpandaAdminError(
            message,
            retriable=status in RETRY_STATUSES,
            method=method,
            url=str(response.request.url),
            status=status,
            code=code,
            hint=_hint_for(status),
        )

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


def _decode_success(method: str, response: httpx.Response) -> Any:
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
            url=str(response.request.url),
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
