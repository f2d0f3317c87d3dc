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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .redpanda_admin_contract import Contract

# -- the cluster the stubs serve --------------------------------------------------------------


class StubError(Exception):
    """Answered as Redpanda does: ``{"message", "code"}`` with the HTTP status."""

    def __init__(self, status: int, message: str, body: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body if body is not None else {"message": message, "code": status}


@dataclass
class ClusterModel:
    """The state every stub node of one cluster shares. All access holds ``lock``."""

    node_ids: tuple[int, ...] = (0, 1, 2)
    num_cores: int = 2
    hold_moves: bool = False  # True: replica moves stay in_progress until finish_moves()
    known_config: tuple[str, ...] = (
        "enable_leader_balancer",
        "kafka_throughput_limit_node_in_bps",
        "kafka_throughput_limit_node_out_bps",
        "kafka_throughput_control",
    )
    lock: threading.RLock = field(default_factory=threading.RLock)
    partitions: dict[tuple[str, str, int], dict[str, Any]] = field(default_factory=dict)
    alive: dict[int, bool] = field(default_factory=dict)
    admin_urls: dict[int, str] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    config_version: int = 1
    leader_changes: int = 0  # transfers that moved a leader (a repeated one moves nothing)

    def __post_init__(self) -> None:
        for n in self.node_ids:
            self.alive.setdefault(n, True)

    @property
    def controller_id(self) -> int:
        return min(n for n in self.node_ids if self.alive[n])

    def add_topic(
        self, topic: str, partitions: int = 1, replication: int = 3, namespace: str = "kafka"
    ) -> None:
        with self.lock:
            for p in range(partitions):
                nodes = [self.node_ids[(p + i) % len(self.node_ids)] for i in range(replication)]
                self.partitions[(namespace, topic, p)] = {
                    "ns": namespace,
                    "topic": topic,
                    "partition_id": p,
                    "status": "done",
                    "leader_id": nodes[0],
                    "raft_group_id": len(self.partitions) + 1,
                    "replicas": [{"node_id": n, "core": p % self.num_cores} for n in nodes],
                    "disabled": False,
                }

    def finish_moves(self) -> None:
        with self.lock:
            for part in self.partitions.values():
                pending = part.pop("_pending", None)
                if pending is not None:
                    part["replicas"], part["status"] = pending, "done"
                    if part["leader_id"] not in {r["node_id"] for r in pending}:
                        part["leader_id"] = pending[0]["node_id"]

    def get_partition(self, ns: str, topic: str, partition: int) -> dict[str, Any]:
        part = self.partitions.get((ns, topic, partition))
        if part is None:
            raise StubError(404, f"Could not find ntp: {{{ns}/{topic}/{partition}}}")
        return part

    def public(self, part: dict[str, Any]) -> dict[str, Any]:
        return {k: json.loads(json.dumps(v)) for k, v in part.items() if not k.startswith("_")}

    def brokers(self) -> list[dict[str, Any]]:
        return [
            {
                "node_id": n,
                "num_cores": self.num_cores,
                "membership_status": "active",
                "is_alive": self.alive[n],
                "recovery_mode_enabled": False,
                "version": "v24.3.1 - stub",
                "internal_rpc_address": f"redpanda-{n}",
                "internal_rpc_port": 33145,
                "disk_space": [
                    {"path": "/var/lib/redpanda/data", "free": 1 << 30, "total": 1 << 31}
                ],
                "maintenance_status": {
                    "draining": False,
                    "finished": False,
                    "errors": False,
                    "partitions": 0,
                    "eligible": 0,
                    "transferring": 0,
                    "failed": 0,
                },
                "in_fips_mode": "disabled",
            }
            for n in self.node_ids
        ]

    def health_overview(self) -> dict[str, Any]:
        leaderless = [
            f"{ns}/{t}/{p}" for (ns, t, p), part in self.partitions.items()
            if not self.alive.get(part["leader_id"], False)
        ]  # fmt: skip
        down = [n for n in self.node_ids if not self.alive[n]]
        reasons = (["nodes_down"] if down else []) + (
            ["leaderless_partitions"] if leaderless else []
        )
        return {
            "is_healthy": not reasons,
            "unhealthy_reasons": reasons,
            "controller_id": self.controller_id,
            "all_nodes": list(self.node_ids),
            "nodes_down": down,
            "nodes_in_recovery_mode": [],
            "leaderless_partitions": leaderless[:128],
            "leaderless_count": len(leaderless),
            "under_replicated_partitions": [],
            "under_replicated_count": 0,
            "bytes_in_cloud_storage": -1,
        }


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
    ) -> tuple[int, Any, dict[str, str]] | None:
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
            status, payload, extra = _ROUTES[route.nickname](self, params, query, body, raw_path)
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

    def _leader_redirect(
        self, leader: int, raw_path: str
    ) -> tuple[int, Any, dict[str, str]] | None:
        if self.redirect_to_leader and leader != self.node_id and leader in self.cluster.admin_urls:
            return 307, None, {"Location": self.cluster.admin_urls[leader] + raw_path}
        return None


_Answer = tuple[int, Any, dict[str, str]]
_Handler = Callable[[RedpandaAdminStub, dict[str, str], dict[str, list[str]], bytes, str], _Answer]


def _get_brokers(stub: RedpandaAdminStub, *_: Any) -> _Answer:
    with stub.cluster.lock:
        return 200, stub.cluster.brokers(), {}


def _health_overview(stub: RedpandaAdminStub, *_: Any) -> _Answer:
    with stub.cluster.lock:
        return 200, stub.cluster.health_overview(), {}


def _ready(stub: RedpandaAdminStub, *_: Any) -> _Answer:
    return 200, None, {}


def _get_partition(stub: RedpandaAdminStub, params: dict[str, str], *_: Any) -> _Answer:
    c = stub.cluster
    with c.lock:
        part = c.get_partition(params["namespace"], params["topic"], int(params["partition"]))
        return 200, c.public(part), {}


def _transfer_leadership(
    stub: RedpandaAdminStub,
    params: dict[str, str],
    query: dict[str, list[str]],
    _b: bytes,
    raw: str,
) -> _Answer:
    c = stub.cluster
    with c.lock:
        part = c.get_partition(params["namespace"], params["topic"], int(params["partition"]))
        redirect = stub._leader_redirect(part["leader_id"], raw)
        if redirect:
            return redirect
        replicas = [r["node_id"] for r in part["replicas"]]
        raw_target = query.get("target", [""])[0]
        if "target" not in query:  # optional upstream: any other live replica
            others = [n for n in replicas if n != part["leader_id"] and c.alive[n]]
            raw_target = str(others[0]) if others else ""
        if not raw_target.isdigit():
            raise StubError(400, f"Invalid target node id: {raw_target!r}")
        target = int(raw_target)
        if target not in replicas:
            raise StubError(400, f"Target node {target} is not a replica of {replicas}")
        if not c.alive[target]:
            raise StubError(503, f"Target node {target} is not alive")
        if part["leader_id"] != target:
            c.leader_changes += 1
        part["leader_id"] = target
        return 200, None, {}


def _set_replicas(
    stub: RedpandaAdminStub, params: dict[str, str], _q: Any, body: bytes, raw: str
) -> _Answer:
    c = stub.cluster
    try:
        wanted = json.loads(body or b"null")
        ok = isinstance(wanted, list) and wanted and all(
            isinstance(r, dict) and set(r) == {"node_id", "core"}
            and all(type(v) is int for v in r.values()) for r in wanted
        )  # fmt: skip
    except json.JSONDecodeError:
        ok = False
    if not ok:
        raise StubError(400, "Replica set must be a non-empty JSON array of {node_id, core}")
    with c.lock:
        part = c.get_partition(params["namespace"], params["topic"], int(params["partition"]))
        redirect = stub._leader_redirect(c.controller_id, raw)
        if redirect:
            return redirect
        if "_pending" in part:
            raise StubError(503, "Partition update already in progress")
        for r in wanted:
            if r["node_id"] not in c.node_ids or not 0 <= r["core"] < c.num_cores:
                raise StubError(400, f"Invalid replica {r}: unknown node or core")
        if len({r["node_id"] for r in wanted}) != len(wanted):
            raise StubError(400, "Replica set contains duplicate node ids")
        part["_pending"], part["status"] = wanted, "in_progress"
        if not c.hold_moves:
            c.finish_moves()
        return 200, None, {}


def _patch_config(
    stub: RedpandaAdminStub, _p: Any, query: dict[str, list[str]], body: bytes, raw: str
) -> _Answer:
    c = stub.cluster
    try:
        patch = json.loads(body or b"null")
    except json.JSONDecodeError:
        patch = None
    if not isinstance(patch, dict) or set(patch) - {"upsert", "remove"}:
        raise StubError(400, 'Body must be {"upsert": {...}, "remove": [...]}')
    upsert, remove = patch.get("upsert", {}), patch.get("remove", [])
    with c.lock:
        redirect = stub._leader_redirect(c.controller_id, raw)
        if redirect:
            return redirect
        force = query.get("force", ["0"])[0] not in ("", "0")
        unknown = [k for k in [*upsert, *remove] if k not in c.known_config]
        if unknown and not force:
            raise StubError(400, "invalid properties", {k: "Unknown property" for k in unknown})
        if query.get("dry_run", ["0"])[0] not in ("", "0"):
            return 200, None, {}
        c.config.update(upsert)
        for k in remove:
            c.config.pop(k, None)
        c.config_version += 1
        return 200, {"config_version": c.config_version}, {}


_ROUTES: dict[str, _Handler] = {
    "get_brokers": _get_brokers,
    "get_cluster_health_overview": _health_overview,
    "ready": _ready,
    "get_partition": _get_partition,
    "kafka_transfer_leadership": _transfer_leadership,
    "set_partition_replicas": _set_replicas,
    "patch_cluster_config": _patch_config,
}


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
