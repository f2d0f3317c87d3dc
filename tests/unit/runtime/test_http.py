"""The health and metrics server: /metrics with text rendered elsewhere, whole or streamed
in chunks (chunked transfer encoding; a failure midway is a broken answer, not a short
one), and one request per connection, as before streaming."""

from __future__ import annotations

import http.client
import socket
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from runtime.http import HealthServer


def registry() -> CollectorRegistry:
    r = CollectorRegistry()
    Counter("lagpilot_things", "Things.", registry=r).inc(3)
    return r


def serve(extra) -> tuple[HealthServer, str]:  # type: ignore[no-untyped-def]
    server = HealthServer(0, registry(), lambda: (True, "ok"), "127.0.0.1", extra).start()
    return server, f"127.0.0.1:{server.port}"


def get(address: str, path: str = "/metrics") -> http.client.HTTPResponse:
    host, port = address.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("GET", path)
    return conn.getresponse()


def raw(address: str, request: bytes) -> bytes:
    """What the server writes for ``request`` until it closes the connection."""
    host, port = address.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(request)
        out = b""
        while block := s.recv(65536):
            out += block
    return out


def test_chunks_are_streamed_after_the_registry_text_and_empty_ones_are_skipped():
    chunks = [b"# HELP a x\n", b"", memoryview(b"a 1.0\n"), b"b 2.0\n"]
    server, address = serve(lambda names: iter(chunks))
    try:
        r = get(address)
        assert r.status == 200 and r.getheader("Transfer-Encoding") == "chunked"
        assert r.getheader("Content-Length") is None
        assert r.read() == generate_latest(server.registry) + b"# HELP a x\na 1.0\nb 2.0\n"
    finally:
        server.stop()


def test_whole_text_keeps_its_content_length():
    server, address = serve(lambda names: b"a 1.0\n")
    try:
        r = get(address)
        assert r.getheader("Content-Length") == str(len(generate_latest(server.registry)) + 6)
        assert r.read().endswith(b"a 1.0\n")
    finally:
        server.stop()


def test_a_failure_before_the_first_chunk_is_a_500():
    def broken(names: frozenset[str] | None) -> Iterator[bytes]:
        raise RuntimeError("no text")
        yield b""

    server, address = serve(broken)
    try:
        r = get(address)
        assert r.status == 500 and b"no text" in r.read()
    finally:
        server.stop()


def test_a_failure_midway_is_a_broken_answer_and_the_chunks_are_closed():
    closed = []

    def half(names: frozenset[str] | None) -> Iterator[bytes]:
        try:
            yield b"a 1.0\n"
            raise RuntimeError("the child died")
        finally:
            closed.append(True)

    server, address = serve(half)
    try:
        r = get(address)
        assert r.status == 200
        with pytest.raises(http.client.IncompleteRead):
            r.read()  # no last chunk: the client cannot take it for the whole text
        assert closed == [True]
    finally:
        server.stop()


def test_an_http_1_0_client_gets_the_text_until_the_connection_closes():
    server, address = serve(lambda names: iter([b"a 1.0\n", b"b 2.0\n"]))
    try:
        out = raw(address, b"GET /metrics HTTP/1.0\r\n\r\n")
        head, _, body = out.partition(b"\r\n\r\n")
        assert b"chunked" not in head.lower() and b"connection: close" in head.lower()
        assert body == generate_latest(server.registry) + b"a 1.0\nb 2.0\n"
    finally:
        server.stop()


def test_every_answer_closes_its_connection():
    server, address = serve(None)
    try:
        two = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        out = raw(address, two)  # returns: the server closed after the first answer
        assert out.count(b"HTTP/1.1 200") == 1 and out.endswith(b"\r\n\r\nok\n")
        assert b"Content-Length: 3" in out and b"Connection: close" in out
    finally:
        server.stop()
