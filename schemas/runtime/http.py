"""One health and metrics HTTP server for every lagpilot process (pipeline, actuator, scaler).

Each process owns its registry; the server reads it (and the process's ``ready``) on each
request and touches nothing else.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST


class HealthServer:
    """/metrics, /healthz (the process is alive) and /readyz (``ready()`` says it can work).

    A plain threaded http.server: no framework, one daemon thread, stops with the process
    and never holds it open. ``extra`` appends text rendered elsewhere (the pipeline's lag
    families) to /metrics; ``?name[]=a&name[]=b`` serves only those families.
    """

    def __init__(
        self,
        port: int,
        registry: CollectorRegistry,
        ready: Callable[[], tuple[bool, str]],
        host: str = "0.0.0.0",
        extra: Callable[[frozenset[str] | None], bytes] | None = None,
        name: str = "health-server",
    ) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path, _, query = self.path.partition("?")
                if path == "/metrics":
                    # ?name[]=a&name[]=b: only those families (as prometheus_client serves)
                    names = parse_qs(query).get("name[]")
                    wanted = frozenset(names) if names else None
                    body = generate_latest(
                        outer.registry
                        if wanted is None
                        else outer.registry.restricted_registry(sorted(wanted))
                    )
                    if outer.extra is not None:
                        body += outer.extra(wanted)
                    self._send(200, body, CONTENT_TYPE_LATEST)
                elif path == "/healthz":
                    self._send(200, b"ok\n")
                elif path == "/readyz":
                    ok, why = outer.ready()
                    self._send(200 if ok else 503, (why + "\n").encode())
                else:
                    self._send(404, b"not found: try /metrics, /healthz, /readyz\n")

            def _send(self, code: int, body: bytes, ctype: str = "text/plain") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:  # scrapes are not log lines
                return

        self.registry = registry
        self.ready = ready
        self.extra = extra
        self.server = ThreadingHTTPServer((host, port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, name=name, daemon=True)

    def start(self) -> Self:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
