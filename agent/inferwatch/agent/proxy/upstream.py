"""One connection to the worker: the answer's head parsed, its body passed on to
the client connection that owns it; the keep-alive window of an idle one, and what
the worker's closes teach about its keep-alive habits."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import select
import socket
import time
from typing import Protocol, cast

from inferwatch.agent.proxy.limits import (
    MAX_HEAD_BYTES,
    STREAM_CLOSE_S,
    UNANNOUNCED_IDLE_S,
    WRITE_BUFFER_BYTES,
)
from inferwatch.agent.proxy.measure import Measure
from inferwatch.agent.proxy.wire import (
    Chunked,
    HTTPError,
    RequestHead,
    framing,
    parse_fields,
    parse_keep_alive,
    tokens,
)

#: one logger for the whole proxy package (its lines keep the name they always had)
log = logging.getLogger("inferwatch.agent.proxy")


class Owner(Protocol):
    """The client connection an answer goes to, as the worker's connection sees it."""

    req: RequestHead | None
    transport: asyncio.Transport | None
    measure: Measure | None
    dechunk: bool
    keep: bool

    def answer_head(self, status: int, reason: str, headers: list[tuple[str, str]],
                    read: dict[str, list[str]], connection: set[str],
                    length: int | None, chunked: bool, until_close: bool, *,
                    declared_chunked: bool) -> None: ...  # fmt: skip

    def answer_done(self) -> None: ...

    def upstream_failed(self, up: UpstreamConn, reason: str, timed_out: bool) -> None: ...

    def upstream_paused(self, paused: bool) -> None: ...


class Pool(Protocol):
    """The proxy server, as one of its worker connections sees it."""

    def pool_drop(self, up: UpstreamConn) -> None: ...

    def learn_stream_close(self) -> None: ...


class Conn(asyncio.Protocol):
    """Either end of the proxy (a client's connection, a worker's): its transport kept,
    the write buffer bounded at WRITE_BUFFER_BYTES, TCP_NODELAY set."""

    transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are no asyncio.Transport subclass: no isinstance check
        self.transport = transport = cast(asyncio.Transport, transport)
        transport.set_write_buffer_limits(high=WRITE_BUFFER_BYTES)
        with contextlib.suppress(OSError):
            sock = transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class UpstreamConn(Conn):
    """One connection to the worker: an answer's head parsed, its body passed on."""

    def __init__(self, server: Pool) -> None:
        self.server = server
        self.owner: Owner | None = None
        self._new_answer()
        self.closed = False
        self.reused = False
        self.uses = 0
        #: the keep-alive the worker announced: (seconds, requests), or None
        self.announced: tuple[float, int] | None = None
        self.idle_since = 0.0
        self.last_read = 0.0
        #: the last answer's head said it streams (chunked or text/event-stream): kept
        #: across the next request's start, so a failure on reuse knows what came before
        self.streamed = False

    def send(self, data: bytes) -> None:
        if data and self.transport is not None and not self.closed:
            self.transport.write(data)

    def start(self) -> None:
        """A request goes out on this connection."""
        self._new_answer()
        self.uses += 1

    def _new_answer(self) -> None:
        """Nothing read yet of the answer to the request going out."""
        self.buf = bytearray()
        self.in_head = True
        self.length: int | None = None
        self.chunked: Chunked | None = None
        self.until_close = False
        self.done = False
        self.reusable = False
        self.got_bytes = False
        #: the worker's kernel refused the request's bytes (a reset, or EPIPE pending at
        #: the end of file): its application closed the connection without reading them
        self.unread = False

    def data_received(self, data: bytes) -> None:
        owner = self.owner
        if owner is None or self.done:
            self.close()  # bytes nobody asked for: the connection is not reusable
            return
        self.got_bytes = True
        now = self.last_read = time.monotonic()
        try:
            if self.in_head:
                self._head(data, owner)
            else:
                self._body(data, owner, now)
        except Exception as exc:  # a defect: one connection, one fixed line
            defect(exc, owner.transport)
            self.close()

    def _head(self, data: bytes, owner: Owner) -> None:
        buf = self.buf
        start = max(0, len(buf) - 3)
        buf += data
        end = buf.find(b"\r\n\r\n", start)
        if end < 0:
            if len(buf) > MAX_HEAD_BYTES:
                self._broken(owner)
            return
        raw, rest = bytes(buf[:end]), bytes(buf[end + 4 :])
        self.buf = bytearray()
        lines = raw.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        try:
            if len(parts) < 2 or parts[0] not in (b"HTTP/1.1", b"HTTP/1.0"):
                raise HTTPError(502, "")
            status = int(parts[1])
            headers, read = parse_fields(lines[1:])
            if not 100 <= status <= 999 or status == 101:
                raise HTTPError(502, "")
            if status < 200:  # 100 Continue, 103 Early Hints: not passed on
                if rest:
                    self._head(rest, owner)
                return
            req = owner.req
            assert req is not None
            length, chunked = framing(read)
        except (HTTPError, ValueError):
            self._broken(owner)
            return
        reason = parts[2].decode("latin-1") if len(parts) > 2 else ""
        self.in_head = False
        ctype = read.get("content-type")
        self.streamed = bool(chunked) or (
            ctype is not None and ctype[-1].lower().startswith("text/event-stream")
        )
        connection = tokens(read.get("connection"))
        http11 = parts[0] == b"HTTP/1.1"
        no_body = req.method == "HEAD" or status in (204, 304)
        self.until_close = not no_body and length is None and not chunked
        self.length = 0 if no_body else length
        self.chunked = Chunked() if chunked and not no_body else None
        self.reusable = http11 and "close" not in connection and not self.until_close
        keep_alive = read.get("keep-alive")
        announced = parse_keep_alive(keep_alive[-1]) if keep_alive else None
        self.announced = announced
        owner.answer_head(status, reason, headers, read, connection, length, chunked and not no_body,
                          self.until_close, declared_chunked=chunked)  # fmt: skip
        if self.length == 0:
            self._finished(owner)
            if rest:
                self.reusable = False
            return
        if rest:
            self._body(rest, owner, time.monotonic())

    def _body(self, data: bytes, owner: Owner, now: float) -> None:
        transport = owner.transport
        measure = owner.measure
        dec = self.chunked
        if dec is not None:
            pieces: list[bytes] | None = [] if (measure is not None or owner.dechunk) else None
            try:
                end = dec.feed(data, pieces)
            except HTTPError:
                self._broken(owner)
                return
            if end >= 0 and end != len(data):
                data = data[:end]
                self.reusable = False
            if transport is not None:
                if owner.dechunk:
                    if pieces:
                        transport.write(b"".join(pieces))
                else:
                    transport.write(data)
            if measure is not None and pieces:
                for piece in pieces:
                    measure.feed(piece, now)
            if end >= 0:
                self._finished(owner)
            return
        left = self.length
        if left is not None and len(data) >= left:
            if len(data) > left:
                self.reusable = False
                data = data[:left]
            left = 0
        elif left is not None:
            left -= len(data)
        self.length = left
        if transport is not None:
            transport.write(data)
        if measure is not None:
            measure.feed(data, now)
        if left == 0:
            self._finished(owner)

    def _finished(self, owner: Owner) -> None:
        self.done = True
        owner.answer_done()

    def _broken(self, owner: Owner) -> None:
        """An answer the proxy cannot follow: a 502 (or a cut answer)."""
        self.close()
        owner.upstream_failed(self, "reset", timed_out=False)

    def eof_received(self) -> bool | None:
        if self.owner is not None and not self.got_bytes:
            self.unread = self.unread or socket_error(self.transport) in _REFUSED_BYTES
        return False  # close the transport; connection_lost follows

    def readable(self) -> bool:
        """Something to read on an idle connection: the worker's close (or stray bytes),
        seen before a request is written on it rather than after."""
        sock = self.transport.get_extra_info("socket") if self.transport is not None else None
        if sock is None:
            return False
        try:
            poller = select.poll()
            poller.register(sock.fileno(), select.POLLIN)
            return bool(poller.poll(0))
        except (OSError, ValueError):
            return True

    def connection_lost(self, exc: Exception | None) -> None:
        if isinstance(exc, (ConnectionResetError, BrokenPipeError)) and not self.got_bytes:
            self.unread = True
        ours = self.closed
        self.closed = True
        self.server.pool_drop(self)
        owner = self.owner
        if owner is None or self.done:
            if (not ours and self.done and self.streamed and self.idle_since
                    and time.monotonic() - self.idle_since < STREAM_CLOSE_S):  # fmt: skip
                # the worker closed a kept-alive connection right after a streamed
                # answer, unasked (llama-server does after every one)
                self.server.learn_stream_close()
            return
        if self.until_close and not self.in_head:
            self.done = True
            if owner.dechunk is False:
                owner.keep = False
            owner.answer_done()
            return
        owner.upstream_failed(self, "reset", timed_out=False)

    def timed_out(self) -> None:
        owner = self.owner
        self.close()
        if owner is not None and not self.done:
            owner.upstream_failed(self, "timeout", timed_out=True)

    def pause_writing(self) -> None:
        if self.owner is not None:
            self.owner.upstream_paused(True)

    def resume_writing(self) -> None:
        if self.owner is not None:
            self.owner.upstream_paused(False)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


def defect(exc: Exception, transport: asyncio.Transport | None) -> None:
    """A defect of the proxy's own: the connection is cut and one line logged, naming
    the error's type only (its text could quote the request)."""
    log.error("proxy: %s while forwarding; connection closed", type(exc).__name__)
    if transport is not None:
        transport.abort()


#: a socket error that says the peer's kernel got bytes its application never read
_REFUSED_BYTES = frozenset({errno.EPIPE, errno.ECONNRESET})


def socket_error(transport: asyncio.Transport | None) -> int:
    """The socket's pending error (SO_ERROR), 0 when none or unknown."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None:
        return 0
    try:
        return int(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
    except (OSError, ValueError):
        return 0


def reuse_window(up: UpstreamConn) -> float:
    """How long an idle connection to the worker stays reusable: half the keep-alive
    time it announced (llama.cpp: 5 s), else UNANNOUNCED_IDLE_S."""
    if up.announced is not None:
        return up.announced[0] / 2
    return UNANNOUNCED_IDLE_S
