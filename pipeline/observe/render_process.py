"""The child process that writes the lag families' text (``pipeline.observe.exposition``), off
the model's interpreter.

A full scrape's formatting holds an interpreter for a fraction of a second, and in the
model's process that time would be taken from the model (its processing delay would jump
at every scrape). The pipeline hands the child only the columns the families show (8 of
an observation's 16 arrays, their memory written to the socket as is: pickle protocol 5,
out of band) and relays the chunks it sends back to the client.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import pickle
import signal
import socket
import struct
import threading
from collections.abc import Generator, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pipeline.observe.exposition import Chunk, LabelCache, LagColumns, render_chunks
from schemas.errors import LagpilotError

if TYPE_CHECKING:
    from pipeline.model.events import TopicObservation

log = logging.getLogger(__name__)


#: the child sends the text in frames of about this size (1 MiB: a few (family, topic)
#: chunks of a topic with 5,000 group-partitions)
FRAME_BYTES = 1 << 20

#: a frame: its kind (one byte) and its length, then that many bytes
_HEAD = struct.Struct("<cQ")
_REQUEST, _BUFFER, _TEXT, _END, _FAILED = b"R", b"B", b"+", b".", b"-"


class RenderError(LagpilotError):
    """The render process failed or did not answer; ``retriable``: a new one is started
    on the next scrape, and a scrape it failed before its first chunk is rendered
    in-process."""

    retriable = True


def _send_frame(sock: socket.socket, kind: bytes, parts: Sequence[Chunk]) -> None:
    """One frame whose body is ``parts`` one after the other, written from where they lie
    (``sendmsg``: no copy is made to join them)."""
    body = [memoryview(p).cast("B") for p in parts]
    views = [memoryview(_HEAD.pack(kind, sum(len(v) for v in body)))]
    views += [v for v in body if len(v)]
    i = 0
    while i < len(views):
        sent = sock.sendmsg(views[i : i + 512])
        while i < len(views) and sent >= len(views[i]):
            sent -= len(views[i])
            i += 1
        if sent:
            views[i] = views[i][sent:]


def _recv_exactly(sock: socket.socket, n: int, into: bytearray | None = None) -> memoryview:
    """``n`` bytes, read straight into the buffer they are returned in: ``into`` when it
    is given and large enough, a new one otherwise."""
    if into is None or len(into) < n:
        into = bytearray(n)
    view, got = memoryview(into)[:n], 0
    while got < n:
        k = sock.recv_into(view[got:])
        if not k:
            raise EOFError("the other end closed the render pipe")
        got += k
    return view


def _recv_frame(sock: socket.socket, into: bytearray | None = None) -> tuple[bytes, memoryview]:
    kind, n = _HEAD.unpack(_recv_exactly(sock, _HEAD.size))
    return kind, _recv_exactly(sock, n, into)


def _send_pickled(sock: socket.socket, obj: Any) -> None:
    """``obj`` pickled, its arrays' memory written to the pipe as it is (pickle protocol
    5, out of band): no copy of the columns is made in the sending process."""
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    _send_frame(sock, _REQUEST, [struct.pack("<I", len(buffers)), head])
    for buffer in buffers:
        _send_frame(sock, _BUFFER, [buffer.raw()])


def _recv_pickled(sock: socket.socket) -> Any:
    _, head = _recv_frame(sock)
    (n,) = struct.unpack_from("<I", head)
    buffers = [_recv_frame(sock)[1] for _ in range(n)]
    return pickle.loads(memoryview(head)[4:], buffers=buffers)


def _frames(chunks: Iterable[bytes], size: int = FRAME_BYTES) -> Iterator[list[bytes]]:
    """The chunks in groups of about ``size`` bytes."""
    pending: list[bytes] = []
    n = 0
    for chunk in chunks:
        pending.append(chunk)
        n += len(chunk)
        if n >= size:
            yield pending
            pending, n = [], 0
    if n:
        yield pending


def _serve(sock: socket.socket) -> None:
    """The child's loop: (columns, names) in; text frames, then an end frame (or a failed
    one) out. Ends with the parent (its end of the pipe closes, also on kill -9)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    labels = LabelCache()
    while True:
        try:
            columns, names = _recv_pickled(sock)
        except (EOFError, OSError):
            return
        try:
            labels.keep(c.topic for c in columns)
            for parts in _frames(render_chunks(columns, names, labels)):
                _send_frame(sock, _TEXT, parts)
            _send_frame(sock, _END, [])
        except OSError:  # the parent is gone
            return
        except Exception as exc:  # answered, so the parent never waits for nothing
            try:
                _send_frame(sock, _FAILED, [repr(exc).encode()])
            except OSError:
                return
        del columns


class RenderProcess:
    """``render_chunks`` in a child process (started on first use, again after a failure).

    It serves one scrape at a time: a second one waits up to ``timeout_s`` for the first
    to be relayed, as a scrape waits up to ``timeout_s`` for each read from the child. The
    pipe is a plain socket pair with frames of its own: the text is read straight into
    the buffer that is relayed (``multiprocessing``'s ``Connection`` would copy each
    message several times, on the model process's CPU).
    """

    def __init__(self, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._proc: Any = None
        self._sock: socket.socket | None = None
        # the text frames are read into this one buffer (fresh megabyte buffers cost the
        # model process their page faults, frame after frame of each full scrape)
        self._buf = bytearray(FRAME_BYTES)

    @property
    def pid(self) -> int | None:
        """The child's pid while it runs."""
        return self._proc.pid if self._proc is not None else None

    def _start(self) -> None:
        self.close()  # a child that died: its pipe and its process
        ctx = mp.get_context("spawn")
        self._sock, child = socket.socketpair()
        try:
            self._proc = ctx.Process(
                target=_serve, args=(child,), name="lagpilot-metrics-render", daemon=True
            )
            self._proc.start()
        finally:
            child.close()
        self._sock.settimeout(self.timeout_s)

    def stream(
        self,
        observations: Sequence[TopicObservation | LagColumns],
        names: frozenset[str] | None = None,
    ) -> Generator[memoryview, None, None]:
        """The text in chunks, as the child writes them. Raises ``RenderError`` (before
        the first chunk or between two) when the child fails or does not answer. Iterate it
        to the end or close it: a stream left early reads the rest, so the child is ready
        for the next scrape. Each chunk is a view of one buffer the next chunk is read
        into: use it (send it, copy it) before asking for the next."""
        columns = [LagColumns.of(o) for o in observations]
        if not self._lock.acquire(timeout=self.timeout_s):
            raise RenderError(f"busy with another scrape for {self.timeout_s:.0f}s")
        sent = answered = False
        try:
            try:
                if self._proc is None or not self._proc.is_alive():
                    self._start()
                assert self._sock is not None
                _send_pickled(self._sock, (columns, names))
                sent = True
            except Exception as exc:  # a dead child, a broken pipe, a child not started
                self.close()
                raise RenderError(f"render process failed: {exc!r}") from exc
            del columns
            while True:
                kind, body = self._reply(self._buf)
                grown = body.obj  # a frame larger than the buffer came in a new one: keep
                if isinstance(grown, bytearray) and grown is not self._buf:  # that one
                    self._buf = grown  # (frames run a little over FRAME_BYTES)
                if kind == _TEXT:
                    yield body
                    continue
                answered = True
                if kind == _END:
                    return
                raise RenderError(f"render process: {bytes(body).decode(errors='replace')}")
        finally:
            if sent and not answered and self._sock is not None:
                with contextlib.suppress(RenderError):  # (a failed read closes the child)
                    while self._reply(self._buf)[0] == _TEXT:
                        pass
            self._lock.release()

    def render(
        self,
        observations: Sequence[TopicObservation | LagColumns],
        names: frozenset[str] | None = None,
    ) -> bytes:
        return b"".join(bytes(chunk) for chunk in self.stream(observations, names))

    def _reply(self, into: bytearray) -> tuple[bytes, memoryview]:
        try:
            if self._sock is None:
                raise RenderError("render process closed")
            return _recv_frame(self._sock, into)
        except RenderError:
            self.close()
            raise
        except TimeoutError as exc:
            self.close()
            raise RenderError(f"no answer in {self.timeout_s:.0f}s") from exc
        except (OSError, EOFError, ValueError, struct.error) as exc:  # a dead child
            self.close()
            raise RenderError(f"render process failed: {exc!r}") from exc

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
        if self._proc is not None and self._proc.pid is not None:  # (started)
            self._proc.kill()
            self._proc.join(5)
        self._proc = self._sock = None
