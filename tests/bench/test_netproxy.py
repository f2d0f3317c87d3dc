"""bench/support/netproxy.py, the cutting proxy of bench.faults row 3: bytes pass, a cut
holds them (nothing passes, nothing is reset, new connections wait), a heal delivers what was
held, and a delay delays. An echo server on 127.0.0.1 stands for the broker; a second or so
in all."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from bench.support.netproxy import Proxy


@pytest.fixture
def echo() -> Iterator[int]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=lambda c=conn: [c.sendall(d) for d in iter(
                lambda: c.recv(100), b"")], daemon=True).start()  # fmt: skip

    threading.Thread(target=serve, daemon=True).start()
    yield int(srv.getsockname()[1])
    srv.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_cut_holds_the_bytes_and_a_heal_delivers_them(echo: int) -> None:
    proxy = Proxy(_free_port(), echo).start()
    try:
        c = socket.create_connection(("127.0.0.1", proxy.listen_port), timeout=2)
        c.sendall(b"hi")
        assert c.recv(10) == b"hi"
        proxy.cut()
        c.sendall(b"held")
        c.settimeout(0.5)
        with pytest.raises(TimeoutError):
            c.recv(10)  # nothing passes, and the connection is not reset
        late = socket.create_connection(("127.0.0.1", proxy.listen_port), timeout=2)
        late.sendall(b"new")
        late.settimeout(0.3)
        with pytest.raises(TimeoutError):
            late.recv(10)  # a connection opened during the cut waits too
        proxy.heal()
        c.settimeout(3)
        late.settimeout(3)
        assert c.recv(10) == b"held" and late.recv(10) == b"new"
        proxy.delay_s = 0.2
        started = time.monotonic()
        c.sendall(b"x")
        assert c.recv(10) == b"x"
        assert time.monotonic() - started >= 0.4  # 0.2 s each way
        assert proxy.connections == 2 and proxy.cuts == 1
    finally:
        proxy.stop()
