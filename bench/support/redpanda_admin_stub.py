"""A contract stub of Redpanda's Admin API: a real HTTP server that serves only the routes
lagpilot's statement of the contract declares.

Redpanda cannot run in this project's CI, so the Admin API client is tested against this
stub instead. It serves ``redpanda_admin_contract``: lagpilot's own statement of the routes
it uses (methods, typed path and query parameters, answer fields and their types), which the
conformance tests check against Redpanda's API description where it lives
(``../shared/reference/redpanda-admin-api/``). The stub itself reads no upstream file, and:

1. checks every request's method, path (with typed path parameters) and query parameters
   (names and types) against the stated routes. Anything else is recorded in
   ``violations`` and answered 404, so a client that calls an undeclared route fails its
   test (:func:`running_stubs` asserts no violations on exit);
2. answers with the stated shapes, from an in-memory :class:`ClusterModel` shared by every
   stub instance of one cluster, so a leadership transfer through one node is what GET
   partition returns on any node; its own answers are checked against the stated models
   (no field missing, extra or of another type);
   (the cluster and each route's answer: ``redpanda_admin_cluster``);
3. can be scripted (:meth:`RedpandaAdminStub.script`) to answer an error N times or for a
   while (``for_s``: every matching request until then, as a 503 outage of a minute does),
   redirect (307) to another instance or to itself (a redirect loop), delay (a slow answer,
   or a timeout when longer than the client waits), or drop the connection, and can require
   basic auth.
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .redpanda_admin_cluster import ANSWERS, Answer, ClusterModel, StubError
from .redpanda_admin_contract import Contract

# -- scripting ------------------------------------------------------------------------------


@dataclass
class Script:
    """One scripted behaviour: the next ``times`` matching requests get it instead, or, with
    ``until`` (a ``time.monotonic()`` instant), every matching request until then."""

    method: str | None
    path: str | None
    times: int
    status: int = 503
    body: Any = None
    redirect_to: str | None = None  # base URL of another stub: answer 307 there
    delay_s: float = 0.0  # sleep, then answer normally (status ignored)
    drop: bool = False  # close the connection without an answer
    until: float | None = None  # monotonic instant: matches until then, whatever ``times``
    hits: int = 0  # requests that got this behaviour

    def matches(self, method: str, path: str) -> bool:
        live = self.times > 0 if self.until is None else time.monotonic() < self.until
        return (self.method in (None, method)) and (self.path in (None, path)) and live


@dataclass(frozen=True)
class RecordedRequest:
    node_id: int
    method: str
    path: str
    query: dict[str, list[str]]
    auth: tuple[str, str] | None
    body: bytes


class RedpandaAdminStub:
    """One broker's Admin API on 127.0.0.1:<free port>; see the module docstring."""

    def __init__(
        self,
        node_id: int = 0,
        cluster: ClusterModel | None = None,
        contract: Contract | None = None,
        *,
        require_auth: tuple[str, str] | None = None,
        redirect_to_leader: bool = True,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.node_id = node_id
        self.ssl_context = ssl_context  # server side: serve https (admin_api_tls)
        self.cluster = cluster or ClusterModel()
        self.contract = contract or Contract()
        self.require_auth = require_auth
        self.redirect_to_leader = redirect_to_leader
        self.violations: list[str] = []
        self.requests: list[RecordedRequest] = []
        self._scripts: list[Script] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._stopped = threading.Event()

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the stub first"
        scheme = "https" if self.ssl_context is not None else "http"
        return f"{scheme}://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> RedpandaAdminStub:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        if self.ssl_context is not None:
            self._server.socket = self.ssl_context.wrap_socket(
                self._server.socket, server_side=True
            )
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()
        self.cluster.admin_urls[self.node_id] = self.url
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def script(
        self,
        method: str | None = None,
        path: str | None = None,
        *,
        times: int = 1,
        for_s: float | None = None,
        **how: Any,
    ) -> Script:
        """Make the next ``times`` requests matching method/path (None: any) behave as told;
        with ``for_s``, every matching request for that many seconds from now instead."""
        until = None if for_s is None else time.monotonic() + for_s
        s = Script(method, path, times, until=until, **how)
        with self._lock:
            self._scripts.append(s)
        return s

    # -- request handling (runs in the server's threads) --------------------------------

    def _next_script(self, method: str, path: str) -> Script | None:
        with self._lock:
            for s in self._scripts:
                if s.matches(method, path):
                    s.times -= 1
                    s.hits += 1
                    return s
        return None

    def handle(
        self, method: str, raw_path: str, headers: dict[str, str], body: bytes
    ) -> Answer | None:
        """(status, JSON body or None for empty, headers), or None to drop the connection."""
        split = urlsplit(raw_path)
        path, query = split.path, parse_qs(split.query, keep_blank_values=True)
        auth = _basic_auth(headers.get("authorization"))
        with self._lock:
            self.requests.append(RecordedRequest(self.node_id, method, path, query, auth, body))
        route, params, violation = self.contract.resolve(method, path, query)
        if violation is not None:
            with self._lock:
                self.violations.append(violation)
            return 404, {"message": f"contract violation: {violation}", "code": 404}, {}
        assert route is not None
        if self.require_auth is not None and auth != self.require_auth:
            return 401, {"message": "Unauthorized", "code": 401}, {}
        script = self._next_script(method, path)
        if script is not None:
            if script.drop:
                return None
            if script.redirect_to is not None:
                return 307, None, {"Location": script.redirect_to + raw_path}
            if script.delay_s:
                time.sleep(script.delay_s)
            else:
                status = script.status
                return status, script.body or {"message": "scripted", "code": status}, {}
        try:
            status, payload, extra = ANSWERS[route.nickname](self, params, query, body, raw_path)
        except KeyError:
            violation = f"{method} {path}: stated ({route.nickname}) but not modelled by the stub"
            with self._lock:
                self.violations.append(violation)
            return 501, {"message": violation, "code": 501}, {}
        except StubError as exc:
            return exc.status, exc.body, {}
        problems = []
        if payload is not None and route.answer is None:
            problems = [f"{method} {path}: answered a body where the contract states none"]
        elif payload is not None and route.answer is not None:
            items = payload if route.answer_is_array else [payload]
            if route.answer_is_array and not isinstance(payload, list):
                problems = [f"{method} {path}: answered {type(payload).__name__}, not an array"]
            for item in items:
                problems += self.contract.answer_problems(route.answer, item)
        if problems:
            with self._lock:
                self.violations += [f"stub answer breaks the contract: {p}" for p in problems]
        return status, payload, extra

    def leader_redirect(self, leader: int, raw_path: str) -> Answer | None:
        """A 307 to the leader's Admin API, as Redpanda answers a request for another node."""
        if self.redirect_to_leader and leader != self.node_id and leader in self.cluster.admin_urls:
            return 307, None, {"Location": self.cluster.admin_urls[leader] + raw_path}
        return None


def _basic_auth(header: str | None) -> tuple[str, str] | None:
    if not header or not header.lower().startswith("basic "):
        return None
    try:
        user, _, password = base64.b64decode(header[6:]).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        return None
    return user, password


def _handler_for(stub: RedpandaAdminStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            # Headers and body go out in two writes: without NODELAY, Nagle and delayed
            # ACKs add ~40 ms to every answer with a body.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def _serve(self) -> None:
            if stub._stopped.is_set():
                self.close_connection = True
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            answer = stub.handle(self.command, self.path, headers, body)
            if answer is None:
                self.close_connection = True
                return
            status, payload, extra = answer
            data = b"" if payload is None else json.dumps(payload).encode()
            self.send_response(status)
            if data:
                self.send_header("Content-Type", "application/json")
            for k, v in extra.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            try:
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the client timed out first
                self.close_connection = True

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

        def log_message(self, format: str, *args: Any) -> None:  # quiet test output
            pass

    return Handler


@contextmanager
def running_stubs(
    nodes: int = 1,
    *,
    cluster: ClusterModel | None = None,
    require_auth: tuple[str, str] | None = None,
    redirect_to_leader: bool = True,
) -> Iterator[list[RedpandaAdminStub]]:
    """Start one stub per node of one cluster; on exit, fail if any request broke the contract."""
    cluster = cluster or ClusterModel(node_ids=tuple(range(max(nodes, 1))))
    contract = Contract()
    stubs = [
        RedpandaAdminStub(n, cluster, contract, require_auth=require_auth,
                          redirect_to_leader=redirect_to_leader).start()
        for n in cluster.node_ids[:nodes]
    ]  # fmt: skip
    try:
        yield stubs
    finally:
        for s in stubs:
            s.stop()
    violations = [v for s in stubs for v in s.violations]
    assert not violations, "requests outside the Redpanda Admin API contract:\n" + "\n".join(
        violations
    )
