"""The Admin API's quirks as one httpx transport: failover, redirects, retries.

:class:`AdminTransport` wraps a plain transport (``httpx.HTTPTransport``, or a test's
``httpx.MockTransport``) and gives a client one logical request per call:

- **Failover.** The request's path and query are sent to each admin URL in turn, starting
  at the one that answered last; a broker that does not answer (refused, reset, timed
  out) is skipped at once, without a pause. Every URL failing is one failed attempt.
- **Redirects.** Redpanda answers 307 to a request that must run on a partition's (or the
  controller's) leader. httpx drops credentials on a cross-origin redirect and the leader
  has another origin, so 307/308 are followed here, at most ``max_redirects`` times, with
  the request's headers (basic auth included) sent again; never from https to http.
  301/302/303 may turn a POST into a GET, which would silently drop the change: they are
  returned as they are (and are errors to the client).
- **Retries.** 429, 503 ("a move is in progress", "not ready") and 504, and every URL
  failing, mean "later": retried after a full-jitter exponential backoff, at most
  ``max_retries`` times. This is the client's only retry loop; the actuator builds it with
  ``max_retries=0`` because the runner owns an action's retry budget
  (:mod:`actuators.dispatch`).

httpx's exceptions end here (the I/O edge): what cannot be sent raises
:class:`~actuators.redpanda_admin_errors.RedpandaAdminError`. Answers are returned read,
with ``extensions["lagpilot.url"]`` (the URL that answered) and
``extensions["lagpilot.attempts"]``; turning a status into an error is the client's job.
"""

from __future__ import annotations

import random
import ssl
import time
from collections.abc import Callable, Sequence

import httpx

from actuators.redpanda_admin_errors import RETRY_STATUSES, RedpandaAdminError
from runtime.backoff import backoff_s

__all__ = ["AdminTransport", "normalise_urls", "ssl_context"]

# Redpanda redirects with 307; 308 keeps the method too.
REDIRECT_STATUSES = frozenset({307, 308})
URL_EXTENSION = "lagpilot.url"
ATTEMPTS_EXTENSION = "lagpilot.attempts"
_PER_REQUEST_HEADERS = frozenset({"host", "content-length"})


class AdminTransport(httpx.BaseTransport):
    """Sends each request to the admin URLs, following redirects, retrying when busy.

    The request's own scheme and host are ignored: its path and query are appended to each
    of ``urls`` (already normalised, see :func:`normalise_urls`). ``sleep`` and ``rng`` are
    injectable so tests check the backoff schedule without waiting for it.
    """

    def __init__(
        self,
        urls: Sequence[str],
        *,
        inner: httpx.BaseTransport,
        max_retries: int = 4,
        backoff_base_s: float = 0.1,
        backoff_max_s: float = 2.0,
        max_redirects: int = 5,
        timeout_s: float = 5.0,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.urls = list(urls)
        self.max_retries = max_retries
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.max_redirects = max_redirects
        self.timeout_s = timeout_s  # for the message of a timeout; the client sets it
        self._inner = inner
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._preferred = 0  # index of the last URL that answered

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()
        last: RedpandaAdminError | None = None
        for attempt in range(self.max_retries + 1):
            if attempt:
                unit = self._rng.random()
                self._sleep(backoff_s(attempt - 1, self.backoff_base_s, self.backoff_max_s, unit))
            try:
                response = self._any_url(request, body)
            except RedpandaAdminError as exc:
                if not exc.retriable:
                    raise
                last = exc
                continue
            if response.status_code in RETRY_STATUSES and attempt < self.max_retries:
                continue
            response.extensions[ATTEMPTS_EXTENSION] = attempt + 1
            return response
        assert last is not None
        last.message = f"{last.message} (gave up after {self.max_retries + 1} attempts)"
        raise last

    def close(self) -> None:
        self._inner.close()

    def _any_url(self, request: httpx.Request, body: bytes) -> httpx.Response:
        """The first answer from the URLs, starting at the one that answered last."""
        errors = []
        n = len(self.urls)
        path = request.url.raw_path.decode("ascii")
        for step in range(n):
            index = (self._preferred + step) % n
            try:
                response = self._following(request, httpx.URL(self.urls[index] + path), body)
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

    def _following(self, request: httpx.Request, url: httpx.URL, body: bytes) -> httpx.Response:
        """Send to ``url``, following 307/308 so that credentials reach the leader."""
        method = request.method
        for _ in range(self.max_redirects + 1):
            response = self._send(request, url, body)
            if response.status_code not in REDIRECT_STATUSES:
                response.extensions[URL_EXTENSION] = str(url)
                return response
            url = self._redirect_target(method, url, response)
        raise RedpandaAdminError(
            f"more than {self.max_redirects} redirects",
            retriable=True,
            method=method,
            url=str(url),
            hint="leadership is moving; retry later or raise max_redirects",
        )

    @staticmethod
    def _redirect_target(method: str, url: httpx.URL, response: httpx.Response) -> httpx.URL:
        def refused(message: str, hint: str) -> RedpandaAdminError:
            return RedpandaAdminError(message, retriable=False, method=method, url=str(url),
                                      status=response.status_code, hint=hint)  # fmt: skip

        location = response.headers.get("Location")
        advertised = "check the broker's advertised admin address"
        if not location:
            raise refused("redirect without a Location header", advertised)
        try:
            target = url.join(location)
        except httpx.InvalidURL as exc:
            raise refused(f"redirect to an invalid Location {location!r}", advertised) from exc
        if url.scheme == "https" and target.scheme != "https":
            raise refused(
                f"refusing redirect from https to {target}: credentials would go in clear",
                "enable TLS on every broker's admin listener",
            )
        return target

    def _send(self, request: httpx.Request, url: httpx.URL, body: bytes) -> httpx.Response:
        """One HTTP exchange, read to its end; httpx's exceptions end here."""
        headers = [
            (k, v)
            for k, v in request.headers.multi_items()
            if k.lower() not in _PER_REQUEST_HEADERS
        ]
        sent = httpx.Request(
            request.method, url, headers=headers, content=body, extensions=request.extensions
        )

        def failed(message: str, retriable: bool, hint: str) -> RedpandaAdminError:
            return RedpandaAdminError(message, retriable=retriable, method=request.method,
                                      url=str(url), hint=hint)  # fmt: skip

        try:
            response = self._inner.handle_request(sent)
            try:
                response.read()
            finally:
                response.close()
            return response
        except httpx.TimeoutException as exc:
            raise failed(
                f"no answer within timeout_s={self.timeout_s} ({type(exc).__name__})",
                True,
                "the broker is slow or unreachable; raise timeout_s or check the broker",
            ) from exc
        except httpx.TransportError as exc:
            if "CERTIFICATE_VERIFY_FAILED" in str(exc):  # trust does not come back by itself
                raise failed(
                    f"the admin certificate was not trusted ({exc})",
                    False,
                    "set tls_verify to the CA bundle (PEM path) that signed it",
                ) from exc
            raise failed(
                f"cannot reach the Admin API ({type(exc).__name__}: {exc})",
                True,
                "check the URL/port (default 9644), the TLS settings and that it runs",
            ) from exc
        except httpx.HTTPError as exc:
            raise failed(
                f"request failed ({type(exc).__name__}: {exc})", False, "check the admin URLs"
            ) from exc


def normalise_urls(urls: Sequence[str] | str) -> list[str]:
    """Admin URLs from a list or a comma-separated string, without trailing slashes."""
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


def ssl_context(tls_verify: bool | str, tls_client_cert: tuple[str, str] | None) -> ssl.SSLContext:
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
