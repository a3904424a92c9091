"""One client connection on the proxy: its requests one at a time, each forwarded to
the worker as it arrives, the answer passed back, errors answered, ends measured."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import time
from collections.abc import Coroutine
from typing import Any, Protocol

from inferwatch.agent.config import ProxySpec
from inferwatch.agent.connguard import Admission
from inferwatch.agent.proxy.limits import (
    CONNECT_RETRY_FIRST_S,
    CONNECT_RETRY_MAX_S,
    LINGER_S,
    MAX_HEAD_BYTES,
    MAX_PENDING_BYTES,
    MEASURED_PATHS,
    REPLAY_MAX_BYTES,
)
from inferwatch.agent.proxy.measure import Measure, ProxyStats
from inferwatch.agent.proxy.upstream import Conn, UpstreamConn, defect
from inferwatch.agent.proxy.wire import (
    RETRYABLE,
    Chunked,
    HTTPError,
    RequestHead,
    error_answer,
    forward_headers,
    head_bytes,
    parse_request_head,
)


class Proxy(Protocol):
    """The proxy server, as one of its client connections sees it."""

    spec: ProxySpec
    stats: ProxyStats
    host_header: str
    prefix: str
    clients: Admission[ClientConn]

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]: ...

    async def connect(self) -> UpstreamConn: ...

    def pool_get(self) -> UpstreamConn | None: ...

    def pool_put(self, up: UpstreamConn) -> None: ...

    def learn_stream_close(self) -> None: ...


class ClientConn(Conn):
    """One client connection: its requests one at a time, each forwarded as it arrives."""

    def __init__(self, server: Proxy) -> None:
        self.server = server
        self.buf = bytearray()
        self.state = "head"  # head, body, wait (for the answer), linger, closed
        self.busy = False
        self.last_active = 0.0  # loop clock: the sweeper's idle and head time-outs
        self.req: RequestHead | None = None
        self.body_left = 0
        self.body_chunked: Chunked | None = None
        self.pending: list[bytes] | None = None  # bytes for a worker connection not open yet
        self.pending_size = 0
        self.up: UpstreamConn | None = None
        self.connecting: asyncio.Task[None] | None = None
        self.measure: Measure | None = None
        self.started = 0.0
        self.status = 502
        self.answered = False  # the answer's head went out
        self.keep = True
        self.dechunk = False
        self.extra = b""  # a pipelined next request, read when this one ends
        self.reading = True
        self.up_paused = False
        self.retried = False
        #: what went to a reused connection of the worker, until the answer's head: sent
        #: again on a fresh one if the worker had closed it (None: nothing to send again)
        self.replay: list[bytes] | None = None
        self.replay_size = 0
        self.fresh = True  # no request yet: its head is due within header_timeout
        self.gen = 0  # the request's number on this connection

    # ------------------------------------------------------------ asyncio protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.last_active = self.server.loop.time()
        if not self.server.clients.admit(self):
            self.state = "closed"
            self.abort()

    def data_received(self, data: bytes) -> None:
        try:
            state = self.state
            if state == "body":
                self._body(data)
            elif state == "head":
                self._head_bytes(data)
            elif state == "linger" or state == "closed":
                return
            else:  # wait: a pipelined request, read when this answer ends
                self.extra += data
                self._pause_client()
        except Exception as exc:  # a defect: one connection, one fixed line
            defect(exc, self.transport)

    def eof_received(self) -> bool | None:
        # the client half-closed: an answer under way still goes out, then the
        # connection closes
        self.keep = False
        if not self.busy:
            self._close()
        return True

    def abort(self) -> None:
        """Closed at once: room for a newer connection at the cap (connguard.Admission), a
        head or an idle keep-alive past its time-out, the proxy stopping."""
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        prior = self.state
        self.state = "closed"
        self.server.clients.release(self)
        if self.busy and prior != "linger":
            # the client went away before the answer's end: cancel the upstream request
            self._end(aborted=True)

    def pause_writing(self) -> None:
        up = self.up
        if up is not None and up.transport is not None and not self.up_paused:
            self.up_paused = True
            up.transport.pause_reading()

    def resume_writing(self) -> None:
        up = self.up
        if up is not None and up.transport is not None and self.up_paused:
            self.up_paused = False
            up.transport.resume_reading()

    # ------------------------------------------------------------ the request
    def _head_bytes(self, data: bytes) -> None:
        buf = self.buf
        if not buf:
            self.last_active = self.server.loop.time()  # the head time-out runs from here
        start = max(0, len(buf) - 3)
        buf += data
        end = buf.find(b"\r\n\r\n", start)
        if end < 0:
            if len(buf) > MAX_HEAD_BYTES:
                self._refuse(431, "request head too large\n")
            return
        if end > MAX_HEAD_BYTES:
            self._refuse(431, "request head too large\n")
            return
        raw, rest = bytes(buf[:end]), bytes(buf[end + 4 :])
        self.buf = bytearray()
        self._request(raw)
        if rest:
            self.data_received(rest)
        if self.up is not None and self.pending is not None:
            self._flush()  # the head and the body that came with it, in one write

    def _request(self, raw: bytes) -> None:
        server = self.server
        self.started = time.monotonic()
        try:
            req = parse_request_head(raw)
        except HTTPError as err:
            self._refuse(err.status, err.text)
            return
        spec = server.spec
        if req.length is not None and req.length > spec.max_body_bytes:
            server.stats.rejected["too_large"] += 1
            self._refuse(413, "request body too large\n")
            return
        self.req = req
        self.gen += 1
        self.fresh = False
        self.busy = True
        server.stats.in_flight += 1
        self.status = 502
        self.answered = False
        self.retried = False
        self.keep = req.keep_alive
        path = req.target.split("?", 1)[0]
        self.measure = (
            Measure(server.stats, self.started)
            if req.method == "POST" and path in MEASURED_PATHS
            else None
        )
        headers = [("Host", server.host_header), *forward_headers(req.headers, req.connection)]
        if req.chunked:
            headers.append(("Transfer-Encoding", "chunked"))
            self.body_chunked = Chunked()
        elif req.length is not None:
            headers.append(("Content-Length", str(req.length)))
            self.body_left = req.length
            self.body_chunked = None
        head = head_bytes(f"{req.method} {server.prefix}{req.target} HTTP/1.1", headers)
        if req.expect_continue and req.has_body:
            assert self.transport is not None
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        self.state = "body" if req.has_body else "wait"
        self.pending = [head]
        self.pending_size = len(head)
        up = server.pool_get()
        if up is not None:
            self._attach(up)  # the head goes when the bytes that came with it are read
        else:
            self.connecting = server.spawn(self._connect(self.gen))

    def _body(self, data: bytes) -> None:
        limit = self.server.spec.max_body_bytes
        rest = b""
        dec = self.body_chunked
        if dec is not None:
            try:
                end = dec.feed(data, None)
            except HTTPError as err:
                self._fail_request(err.status, err.text)
                return
            if dec.size > limit:
                self.server.stats.rejected["too_large"] += 1
                self._fail_request(413, "request body too large\n", measured=False)
                return
            if end >= 0:
                data, rest = data[:end], data[end:]
                self.state = "wait"
        else:
            left = self.body_left
            if len(data) >= left:
                data, rest = data[:left], data[left:]
                self.state = "wait"
            self.body_left = left - len(data)
        up = self.up
        if self.pending is not None:
            self.pending.append(data)
            self.pending_size += len(data)
            if self.pending_size > MAX_PENDING_BYTES:
                self._pause_client()
        elif up is not None:
            self._send(up, data)
        if rest:
            self.extra += rest
            self._pause_client()

    async def _connect(self, gen: int) -> None:
        """A new connection to the worker for request ``gen``. Never cancelled while it
        connects (a cancelled connect can lose the connection it made): a request that
        ended meanwhile (the client went away) closes it here."""
        server = self.server
        loop = server.loop
        give_up = loop.time() + server.spec.connect_timeout
        pause = CONNECT_RETRY_FIRST_S
        while True:
            try:
                up = await server.connect()
                if not up.closed:
                    break
                # closed before this task resumed (a worker dying with the connection in
                # its backlog): nothing was written on it
                raise ConnectionRefusedError(errno.ECONNREFUSED, "closed at once")
            except (asyncio.TimeoutError, OSError) as exc:
                if gen != self.gen or not self.busy:
                    return
                refused = isinstance(exc, OSError) and exc.errno == errno.ECONNREFUSED
                if refused and loop.time() + pause < give_up:
                    # nothing was sent: a worker restarting gets the request when it
                    # listens again, within connect_timeout
                    server.stats.retries["refused"] += 1
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, CONNECT_RETRY_MAX_S)
                    if gen != self.gen or not self.busy:
                        return
                    continue
                self.connecting = None
                if isinstance(exc, asyncio.TimeoutError):
                    server.stats.upstream_errors["timeout"] += 1
                    self._fail_request(504, "worker did not answer in time\n")
                else:
                    server.stats.upstream_errors["connect"] += 1
                    self._fail_request(502, "worker unreachable\n")
                return
        if gen != self.gen or not self.busy or self.state in ("closed", "linger", "failed"):
            up.close()
            return
        self.connecting = None
        self._attach(up)
        self._flush()

    def _flush(self) -> None:
        """What waited for the worker's connection goes out in one write."""
        pending, self.pending = self.pending or [], None
        self.pending_size = 0
        if self.up is not None:
            self._send(self.up, b"".join(pending))
        if not self.reading and not self.extra:
            self._resume_client()

    def _attach(self, up: UpstreamConn) -> None:
        self.up = up
        up.owner = self
        up.last_read = time.monotonic()
        self.replay = [] if up.reused and not self.retried else None
        self.replay_size = 0

    def _send(self, up: UpstreamConn, data: bytes) -> None:
        """Request bytes to the worker, held for a resend while that may be needed."""
        replay = self.replay
        if replay is not None:
            self.replay_size += len(data)
            if self.replay_size > REPLAY_MAX_BYTES:
                self.replay = None
            else:
                replay.append(data)
        up.send(data)

    # ------------------------------------------------------------ the answer
    def answer_head(self, status: int, reason: str, headers: list[tuple[str, str]],
                    read: dict[str, list[str]], connection: set[str],
                    length: int | None, chunked: bool, until_close: bool, *,
                    declared_chunked: bool) -> None:  # fmt: skip
        """The worker's answer head: passed on with its framing as it came."""
        req = self.req
        assert req is not None and self.transport is not None
        self.status = status
        self.answered = True
        self.replay = None
        out = forward_headers(headers, connection)
        keep = self.keep and not until_close and self.state == "wait"
        self.dechunk = chunked and req.http10
        if length is not None:
            out.append(("Content-Length", str(length)))
        elif declared_chunked and not self.dechunk:
            out.append(("Transfer-Encoding", "chunked"))
        elif self.dechunk:
            keep = False
        if not keep:
            out.append(("Connection", "close"))
        self.keep = keep
        if self.measure is not None:
            ctype = read.get("content-type", [""])[-1]
            cenc = ",".join(read.get("content-encoding", ()))
            self.measure.answer(ctype, cenc.strip().lower())
        self.transport.write(head_bytes(f"HTTP/1.1 {status} {reason}", out))

    def answer_done(self) -> None:
        """The answer's last byte went out."""
        self._end(aborted=False)
        if self.state == "closed":
            return
        if not self.keep or self.state != "wait":
            self._close()
            return
        self.state = "head"
        self.last_active = self.server.loop.time()
        extra, self.extra = self.extra, b""
        if not self.reading:
            self._resume_client()
        if extra:
            self._head_bytes(extra)

    def upstream_failed(self, up: UpstreamConn, reason: str, timed_out: bool) -> None:
        """The worker's connection broke (or timed out) before the answer's end."""
        server = self.server
        if self.up is not up:
            return
        self.up = None
        replay, self.replay = self.replay, None
        req = self.req
        if (replay is not None and req is not None and not self.answered and not timed_out
                and up.reused and not up.got_bytes and self.state in ("body", "wait")
                and (up.unread or (req.method in RETRYABLE and not req.has_body))):  # fmt: skip
            # a kept-alive connection the worker had closed without reading the request
            # (its kernel refused the bytes), or closed before any byte of the answer for
            # a request it may get twice: the request goes once more, on a fresh
            # connection, with what of its body has come so far (the rest follows)
            self.retried = True
            server.stats.retries["closed"] += 1
            if up.streamed:
                server.learn_stream_close()
            self.pending = replay
            self.pending_size = self.replay_size
            self.connecting = server.spawn(self._connect(self.gen))
            return
        server.stats.upstream_errors[reason] += 1
        if timed_out:
            self._fail_request(504, "worker did not answer in time\n")
        else:
            self._fail_request(502, "worker connection failed\n")

    # ------------------------------------------------------------ ends
    def _end(self, *, aborted: bool) -> None:
        """The exchange is over: measure it, free or drop the worker's connection."""
        if not self.busy:
            return
        self.busy = False
        self.server.stats.in_flight -= 1
        self.connecting = None  # it finishes on its own, and closes what it opened
        self.pending = None
        self.replay = None
        up, self.up = self.up, None
        if up is not None:
            up.owner = None
            if self.up_paused and up.transport is not None and not up.closed:
                # paused for this client's back-pressure: the next user reads again
                up.transport.resume_reading()
            if aborted or not up.done or self.state != "wait" or self.req is None:
                up.close()
            else:
                self.server.pool_put(up)
        self.up_paused = False
        measure, self.measure = self.measure, None
        if measure is not None:
            measure.finish(self.status, time.monotonic(), aborted=aborted)

    def _fail_request(self, status: int, text: str, *, measured: bool = True) -> None:
        """An error answer, or, once the answer's head is out, the connection cut so
        the client sees a broken answer rather than a well-formed short one."""
        if not measured:
            self.measure = None
        answered = self.answered
        self.status = status
        body_unread = self.state == "body"
        self.state = "failed"
        self._end(aborted=False)
        if self.transport is None or self.transport.is_closing():
            return
        if answered:
            self._close()
            return
        self.transport.write(error_answer(status, text, close=True))
        if body_unread:
            self._linger()
        else:
            self._close()

    def _refuse(self, status: int, text: str) -> None:
        """A request refused before it was forwarded; its body (if any) left unread."""
        if self.transport is None:
            return
        self.transport.write(error_answer(status, text, close=True))
        self._linger()

    def _linger(self) -> None:
        """Half-close, and read the rest of the client's bytes for a while, so that the
        client reads the answer rather than a reset."""
        self.state = "linger"
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if not self.reading:
            self._resume_client()
        with contextlib.suppress(OSError, RuntimeError):
            if transport.can_write_eof():
                transport.write_eof()
        self.server.loop.call_later(LINGER_S, self._close)

    def _close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def _pause_client(self) -> None:
        if self.reading and self.transport is not None and not self.transport.is_closing():
            self.reading = False
            self.transport.pause_reading()

    def _resume_client(self) -> None:
        if not self.reading and self.transport is not None and not self.transport.is_closing():
            self.reading = True
            self.transport.resume_reading()

    def upstream_paused(self, paused: bool) -> None:
        """The worker's connection's write buffer is full (or drained): the request
        body waits in the client's socket meanwhile."""
        if self.state != "body":
            return
        if paused:
            self._pause_client()
        elif not self.extra:
            self._resume_client()
