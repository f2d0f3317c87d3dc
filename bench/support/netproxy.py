"""A TCP proxy on 127.0.0.1 that a benchmark can cut and delay: a network fault of its own.

``Proxy(listen_port, upstream_port)`` forwards every connection to ``127.0.0.1:upstream_port``.
``cut()`` is a network partition: nothing passes either way and nothing is reset; bytes in
flight and new connections wait (TCP's buffers fill and the senders block, as when packets
are dropped and retransmitted). ``heal()`` lets them through again. ``delay_s`` adds latency
to every chunk, in each direction (a round trip gains twice as much). It runs an asyncio
loop in a thread of its own, so a synchronous benchmark drives it with plain calls.

A Kafka client that bootstraps through the proxy must also be *sent back* through it: the
broker must advertise the proxy's port for the listener behind it
(``LAGPILOT_BROKER_EXTRA_LISTENERS`` of ``deploy/local/kafka.sh``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass, field

HOST = "127.0.0.1"  # the only address the fault benchmark uses


@dataclass
class Proxy:
    listen_port: int
    upstream_port: int
    delay_s: float = 0.0
    connections: int = 0
    bytes_forwarded: int = 0
    cuts: int = 0
    _loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False)
    _open: asyncio.Event | None = field(default=None, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    _server: asyncio.Server | None = field(default=None, repr=False)
    _writers: set[asyncio.StreamWriter] = field(default_factory=set, repr=False)

    def start(self) -> Proxy:
        ready = threading.Event()
        failed: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._serve())
            except BaseException as exc:  # handed to start()
                failed.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name=f"proxy-{self.listen_port}", daemon=True)
        self._thread.start()
        ready.wait(10)
        if failed:
            raise RuntimeError(f"proxy cannot listen on {HOST}:{self.listen_port}: {failed[0]}")
        return self

    async def _serve(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._server = await asyncio.start_server(self._handle, HOST, self.listen_port)

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        assert self._open is not None
        self.connections += 1
        try:
            await self._open.wait()  # a new connection during a cut waits for the heal
            up_r, up_w = await asyncio.open_connection(HOST, self.upstream_port)
        except OSError:
            client_w.close()
            return
        self._writers |= {client_w, up_w}
        await asyncio.gather(
            self._pipe(client_r, up_w), self._pipe(up_r, client_w), return_exceptions=True
        )

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        assert self._open is not None
        try:
            while data := await src.read(65536):
                await self._open.wait()  # cut: hold what was read, read no more
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                dst.write(data)
                await dst.drain()
                self.bytes_forwarded += len(data)
        except (ConnectionError, OSError):
            pass
        finally:
            self._writers.discard(dst)
            with contextlib.suppress(Exception):
                dst.close()

    def _call(self, fn: object) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(fn)  # type: ignore[arg-type]

    def cut(self) -> None:
        assert self._open is not None
        self.cuts += 1
        self._call(self._open.clear)

    def heal(self) -> None:
        assert self._open is not None
        self._call(self._open.set)

    def stop(self) -> None:
        if self._loop is None:
            return
        if self._open is not None:
            self._call(self._open.set)

        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for writer in list(self._writers):  # every pipe then ends on its own
                writer.close()
            await asyncio.sleep(0.1)

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)
