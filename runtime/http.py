"""One health and metrics HTTP server for every lagpilot process (pipeline, actuator, scaler).

Each process owns its registry; the server reads it (and the process's ``ready``) on each
request and touches nothing else.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

log = logging.getLogger(__name__)

#: text rendered elsewhere and served after the registry's: whole, or in chunks as it comes
Extra = bytes | Iterable[bytes | memoryview]

#: a streamed /metrics gives up on a client that takes nothing for this long
STREAM_SEND_TIMEOUT_S = 60.0


class HealthServer:
    """/metrics, /healthz (the process is alive) and /readyz (``ready()`` says it can work).

    A plain threaded http.server: no framework, one daemon thread, stops with the process
    and never holds it open. ``extra`` appends text rendered elsewhere (the pipeline's lag
    families) to /metrics; ``?name[]=a&name[]=b`` serves only those families. An ``extra``
    that returns chunks is streamed with chunked transfer encoding, so a text of 100+ MB
    is never held whole: a failure midway ends the connection without the last chunk, and
    the client sees a broken answer, not a short one (an HTTP/1.0 client, which cannot be
    sent chunks, gets the text until the connection closes). Every answer closes its
    connection, as HTTP/1.0 did.
    """

    def __init__(
        self,
        port: int,
        registry: CollectorRegistry,
        ready: Callable[[], tuple[bool, str]],
        host: str = "0.0.0.0",
        extra: Callable[[frozenset[str] | None], Extra] | None = None,
        name: str = "health-server",
    ) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # for the chunked /metrics (Connection: close)

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
                    extra = outer.extra(wanted) if outer.extra is not None else b""
                    if isinstance(extra, bytes):
                        self._send(200, body + extra, CONTENT_TYPE_LATEST)
                    else:
                        self._stream(body, extra)
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
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body)

            def _stream(self, head: bytes, extra: Iterable[bytes | memoryview]) -> None:
                chunks = iter(extra)
                try:
                    try:  # the first chunk before the headers: a failure here is a 500
                        first = next(chunks, None)
                    except Exception as exc:
                        log.exception("/metrics failed")
                        self._send(500, f"/metrics failed: {exc!r}\n".encode())
                        return
                    if first is None:
                        self._send(200, head, CONTENT_TYPE_LATEST)
                        return
                    chunked = self.request_version != "HTTP/1.0"
                    self.send_response(200)
                    self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                    if chunked:
                        self.send_header("Transfer-Encoding", "chunked")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.connection.settimeout(STREAM_SEND_TIMEOUT_S)
                    with contextlib.suppress(OSError):  # each chunk's small frame goes at once
                        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    write = self._chunk if chunked else self.wfile.write
                    try:
                        write(head)
                        write(first)
                        for chunk in chunks:
                            write(chunk)
                    except OSError:  # the client went away (or stopped reading)
                        return
                    except Exception as exc:  # no last chunk: the client sees it broken
                        log.warning("/metrics cut off midway: %r", exc)
                        return
                    if chunked:
                        self.wfile.write(b"0\r\n\r\n")
                finally:
                    close = getattr(chunks, "close", None)
                    if close is not None:
                        with contextlib.suppress(Exception):
                            close()

            def _chunk(self, data: bytes | memoryview) -> None:
                if len(data):  # (an empty chunk would end the answer)
                    self.wfile.write(b"%x\r\n" % len(data))
                    self.wfile.write(data)
                    self.wfile.write(b"\r\n")

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
