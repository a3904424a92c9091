"""The agent's HTTP server: /metrics from the cached exposition, /healthz, /readyz, /.

``/metrics`` never does collection work: it returns the bytes the agent built
after its last refresh (gzip-compressed once per build when asked), so many
scrapers cost what one does and a stuck worker never delays a scrape. Its
answer heads are built once per build too: a scrape writes two prebuilt byte
strings and allocates nothing of its size (issue 32).

The server is an :class:`asyncio.Protocol` over the standard library (issue 32:
aiohttp's server and client cost the base agent about 15 MB): HTTP/1.1 GET and
HEAD, keep-alive with an idle time-out, pipelined requests answered in order,
request heads parsed by :func:`inferwatch.agent.httpio.parse_request_head`.

Hostile clients are bounded: connections are capped and must send their
request head in time (``connguard.py``), a client that does not read its
answers is not read from until it does (its answers never pile up), bcrypt
runs on one thread of its own with a short queue (a guessing client waits, or
gets 429, never the event loop), ``/healthz`` and ``/readyz`` need no
credentials (liveness probes carry none), and client-caused log lines are
rate-limited (``logthrottle.py``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import concurrent.futures
import errno
import html
import logging
import socket
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Protocol, cast

from prometheus_client import CONTENT_TYPE_LATEST

from inferwatch import __version__
from inferwatch.agent.config import AgentConfig, local_url
from inferwatch.agent.connguard import ConnectionGuard, Deadline, GuardedProtocol
from inferwatch.agent.fdbudget import descriptor_limit, inbound_budget
from inferwatch.agent.httpio import MAX_HEAD, BadRequest, RequestHead, parse_request_head
from inferwatch.agent.redact import redact_url
from inferwatch.agent.webconfig import BasicAuth, WebConfig, load_web_config
from inferwatch.errors import UsageError

if TYPE_CHECKING:
    from inferwatch.agent.collectors.engine import EngineSource
    from inferwatch.agent.exposition import Exposition


class Served(Protocol):
    """What the server needs of the agent (:class:`inferwatch.agent.wiring.Agent` is one)."""

    @property
    def output(self) -> Exposition: ...

    @property
    def engine(self) -> EngineSource | None: ...

    def ready(self) -> bool: ...


log = logging.getLogger(__name__)

#: paths served without credentials: probes (kubelet, systemd, Compose) carry none
OPEN_PATHS = frozenset({"/healthz", "/readyz"})
#: bcrypt checks waiting at most; beyond, a client gets 429 at once
AUTH_QUEUE = 8


def accepts_gzip(header: str) -> bool:
    """Whether an Accept-Encoding value admits gzip (RFC 9110 12.5.3: q=0 means "not")."""
    best: float | None = None
    for item in header.split(","):
        coding, _, params = item.strip().partition(";")
        coding = coding.strip().lower()
        if coding not in ("gzip", "x-gzip", "*"):
            continue
        q = 1.0
        for param in params.split(";"):
            name, _, value = param.strip().partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if coding == "*" and best is not None:
            continue  # an explicit gzip entry wins over the wildcard
        best = q
    return best is not None and best > 0


#: Accept-Encoding values seen -> accepts_gzip(value): scrapers send the same few
_GZIP_WANTED: dict[str, bool] = {}


def _gzip_wanted(header: str) -> bool:
    wanted = _GZIP_WANTED.get(header)
    if wanted is None:
        wanted = accepts_gzip(header)
        if len(_GZIP_WANTED) < 64 and len(header) <= 256:
            _GZIP_WANTED[header] = wanted
    return wanted


_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Content Too Large",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}
_TEXT = "text/plain; charset=utf-8"
#: a /metrics answer: its head, its head closing the connection, its body
_Raw = tuple[bytes, bytes, bytes]
_PATHS = ("/metrics", "/healthz", "/readyz", "/")


class Answer:
    """One answer: status, fields and body (the head is written by :meth:`head`)."""

    __slots__ = ("body", "fields", "status")

    def __init__(
        self, status: int, body: bytes, content_type: str = _TEXT, fields: tuple = ()
    ) -> None:
        self.status = status
        self.body = body
        self.fields: tuple[tuple[str, str], ...] = (("Content-Type", content_type), *fields)

    def head(self, extra: tuple[tuple[str, str], ...], close: bool) -> bytes:
        lines = [f"HTTP/1.1 {self.status} {_REASONS.get(self.status, 'Unknown')}"]
        lines += [f"{name}: {value}" for name, value in self.fields]
        lines.append(f"Content-Length: {len(self.body)}")
        lines += [f"{name}: {value}" for name, value in extra]
        if close:
            lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", errors="replace")


_UNAUTHORIZED = Answer(
    401, b"Unauthorized\n", fields=(("WWW-Authenticate", 'Basic realm="inferwatch"'),)
)
_TOO_MANY = Answer(429, b"Too many credential checks\n", fields=(("Retry-After", "1"),))
_NOT_FOUND = Answer(404, b"404: Not Found\n")
_NOT_ALLOWED = Answer(405, b"405: Method Not Allowed\n", fields=(("Allow", "GET, HEAD"),))


_Reply = Answer | _Raw


def _closes(request: RequestHead) -> bool:
    """Whether the connection closes after the answer: the client asked so, or it
    speaks HTTP/1.0 (answered once per connection: no keep-alive field to send)."""
    return request.version < (1, 1) or not request.keep_alive


class _Connection(asyncio.Protocol):
    """One client connection: reads request heads, answers them in order.

    A request that needs a turn of the event loop (a bcrypt check, the first gzip
    of a build) holds the next ones until it is answered; while the client does
    not read what was written (the transport's buffer is over its high-water
    mark) nothing more is read from it.
    """

    __slots__ = (
        "_idle",
        "_task",
        "buffer",
        "closing",
        "eof",
        "paused",
        "server",
        "transport",
        "waiting",
    )  # fmt: skip

    def __init__(self, server: Exporter) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiting = False  # an answer being prepared off this call
        self.paused = False  # the client is not reading
        self.closing = False
        self.eof = False
        self._idle = Deadline(server.idle_timeout, self._idle_expired)
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ asyncio protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are no asyncio.Transport subclass: no isinstance check
        self.transport = transport = cast(asyncio.Transport, transport)
        self.server.connections.add(self)
        # no idle timer yet: the guard closes it unless a request head comes in time

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self._idle.disarm()
        self.buffer += data
        self._serve()

    def eof_received(self) -> bool | None:
        # The client sent all it will: what it asked in full is answered (data_received
        # did, or the answer being prepared will), then the connection closes.
        self.eof = True
        if not self.waiting:
            self._close()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self._idle.disarm()
        self.server.connections.discard(self)
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self.buffer.clear()

    def pause_writing(self) -> None:
        self.paused = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.paused = False
        if self.transport is not None and not self.closing:
            self.transport.resume_reading()
            self._serve()

    # ------------------------------------------------------------ requests
    def _serve(self) -> None:
        buffer = self.buffer
        while not self.waiting and not self.paused and not self.closing and buffer:
            while buffer[:2] == b"\r\n":  # empty lines before a request line (RFC 9112 2.2)
                del buffer[:2]
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > MAX_HEAD:
                    self._refuse(431)
                return
            head = bytes(buffer[:end])
            del buffer[: end + 4]
            try:
                request = parse_request_head(head)
            except BadRequest as exc:
                self._refuse(exc.status)
                return
            if "transfer-encoding" in request.headers:
                self._refuse(501)
                return
            length = request.headers.get("content-length", "0").strip()
            if length != "0":
                self._refuse(413 if length.isdigit() else 400)
                return
            self._dispatch(request)
        if not buffer and not self.waiting and not self.closing:
            self._idle.arm()

    def _dispatch(self, request: RequestHead) -> None:
        server = self.server
        transport = self.transport
        server.guard.request_started(transport)
        try:
            answer = server.answer(request)
        except Exception:
            log.exception("answering %s failed", request.path[:64])
            answer = Answer(500, b"Internal Server Error\n")
        if isinstance(answer, tuple):  # the /metrics fast path: prebuilt head and body
            self._send_raw(request, *answer)
            server.guard.request_finished(transport)
            return
        if isinstance(answer, Answer):
            self._send(request, answer)
            server.guard.request_finished(transport)
            return
        self.waiting = True
        self._task = asyncio.ensure_future(self._later(request, answer))

    async def _later(self, request: RequestHead, pending: Awaitable[_Reply]) -> None:
        try:
            try:
                answer = await pending
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("answering %s failed", request.path[:64])
                answer = Answer(500, b"Internal Server Error\n")
            if self.closing:
                return
            if isinstance(answer, tuple):
                self._send_raw(request, *answer)
            else:
                self._send(request, answer)
        finally:
            self.server.guard.request_finished(self.transport)
            self.waiting = False
            self._task = None
        if not self.closing:
            self._serve()
        if self.eof and not self.waiting:
            self._close()

    # ------------------------------------------------------------ writing
    def _send(self, request: RequestHead, answer: Answer) -> None:
        close = _closes(request) or self.server.stopping
        head = answer.head(self.server.extra_fields, close)
        self._write(head, b"" if request.method == "HEAD" else answer.body, close)

    def _send_raw(self, request: RequestHead, head: bytes, close_head: bytes, body: bytes) -> None:
        close = _closes(request) or self.server.stopping
        self._write(close_head if close else head, b"" if request.method == "HEAD" else body, close)

    def _write(self, head: bytes, body: bytes, close: bool) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if body:
            transport.writelines((head, body))
        else:
            transport.write(head)
        if close:
            self._close()

    def _refuse(self, status: int) -> None:
        """A request outside what is served: answer and close (nothing logged: a client's
        malformed bytes are not the agent's trouble)."""
        answer = Answer(status, f"{status}: {_REASONS.get(status, 'Bad Request')}\n".encode())
        self.buffer.clear()
        self._write(answer.head((), True), answer.body, True)

    def _close(self) -> None:
        self.closing = True
        self._idle.disarm()
        if self.transport is not None:
            self.transport.close()

    # ------------------------------------------------------------ idle keep-alive
    def _idle_expired(self) -> None:
        if not self.waiting and not self.buffer:
            self._close()

    def close_if_idle(self) -> bool:
        if self.waiting:
            return False
        self._close()
        return True

    def abort(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.abort()


class Exporter:
    def __init__(self, agent: Served, config: AgentConfig) -> None:
        self.agent = agent
        self.config = config
        self.web = (
            load_web_config(config.web_config_file) if config.web_config_file else WebConfig()
        )
        self.auth = BasicAuth(self.web.users) if self.web.users else None
        #: response header fields every answer carries (web config's http_server_config)
        self.extra_fields: tuple[tuple[str, str], ...] = tuple(self.web.headers.items())
        # bcrypt on one thread: checks never block the event loop, and a flood of
        # guesses takes one core at most (the check lets go of the GIL).
        self._bcrypt = concurrent.futures.ThreadPoolExecutor(1, "inferwatch-bcrypt")
        self._auth_waiting = 0
        limit = descriptor_limit()
        cap = inbound_budget(config.server.max_connections, limit)
        if cap < config.server.max_connections:
            log.info(
                "serving at most %d connections (server.max_connections %d; "
                "only %s file descriptors)", cap, config.server.max_connections, limit,
            )  # fmt: skip
        self.guard = ConnectionGuard(cap, config.server.header_timeout)
        self.idle_timeout = config.server.idle_timeout
        self.connections: set[_Connection] = set()
        self.stopping = False
        self._server: asyncio.Server | None = None
        #: (body, gzip) -> (head, head with Connection: close): /metrics answer heads,
        #: built once per exposition build
        self._metrics_heads: dict[bool, tuple[bytes, bytes, bytes]] = {}
        self.url = ""

    # ------------------------------------------------------------------ routing
    def answer(self, request: RequestHead) -> _Reply | Awaitable[_Reply]:
        """The answer to ``request``: ready, or an awaitable when it needs the loop."""
        path = request.path
        if path not in _PATHS:
            return self._guarded(request, _NOT_FOUND)
        if request.method not in ("GET", "HEAD"):
            return self._guarded(request, _NOT_ALLOWED)
        if self.auth is not None and path not in OPEN_PATHS:
            return self._after_auth(request)
        return self._route(request)

    def _guarded(self, request: RequestHead, answer: Answer) -> Answer | Awaitable[_Reply]:
        """``answer``, for a client that passed basic auth where it is configured."""
        if self.auth is None or request.path in OPEN_PATHS:
            return answer
        return self._after_auth(request, answer)

    async def _after_auth(self, request: RequestHead, answer: Answer | None = None) -> _Reply:
        refusal = await self._refusal(request)
        if refusal is not None:
            return refusal
        if answer is not None:
            return answer
        got = self._route(request)
        if isinstance(got, (Answer, tuple)):
            return got
        return await got

    def _route(self, request: RequestHead) -> _Reply | Awaitable[_Reply]:
        path = request.path
        if path == "/metrics":
            return self.metrics(request)
        if path == "/healthz":
            return Answer(200, b"ok\n")
        if path == "/readyz":
            if self.agent.ready():
                return Answer(200, b"ready\n")
            return Answer(503, b"not ready: first collection or warm-up pending\n")
        return self.index()

    async def _refusal(self, request: RequestHead) -> Answer | None:
        """None when the credentials are good, else the answer (401, or 429 when too
        many checks wait already)."""
        assert self.auth is not None
        header = request.headers.get("authorization", "")
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic" or not encoded or len(encoded) > 1024:
            return _UNAUTHORIZED
        try:
            user, sep, password = base64.b64decode(encoded, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return _UNAUTHORIZED
        if not sep:
            return _UNAUTHORIZED
        if self.auth.cached(user, password):
            return None
        if self._auth_waiting >= AUTH_QUEUE:
            return _TOO_MANY
        self._auth_waiting += 1
        try:
            loop = asyncio.get_running_loop()
            ok = await loop.run_in_executor(self._bcrypt, self.auth.check, user, password)
        finally:
            self._auth_waiting -= 1
        return None if ok else _UNAUTHORIZED

    # ------------------------------------------------------------------ /metrics
    def metrics(self, request: RequestHead) -> _Raw | Awaitable[_Raw]:
        """(head, head closing the connection, body) of this build, for every scraper.

        One rendered exposition per build (issue 32): the bytes and their gzip form
        are made once, and so are the answer heads; a scrape only picks them."""
        output = self.agent.output
        if _gzip_wanted(request.headers.get("accept-encoding", "")):
            body = output.gzipped_ready()
            if body is None:  # the first gzip scrape of this build compresses it
                return self._gzipped(output)
            return self._metrics_answer(body, True)
        return self._metrics_answer(output.body, False)

    async def _gzipped(self, output: Exposition) -> _Raw:
        return self._metrics_answer(await output.gzipped(), True)

    def _metrics_answer(self, body: bytes, gzipped: bool) -> tuple[bytes, bytes, bytes]:
        cached = self._metrics_heads.get(gzipped)
        if cached is not None and cached[2] is body:
            return cached
        fields: tuple[tuple[str, str], ...] = (("Vary", "Accept-Encoding"),)
        if gzipped:
            fields += (("Content-Encoding", "gzip"),)
        answer = Answer(200, body, CONTENT_TYPE_LATEST, fields)
        built = (answer.head(self.extra_fields, False), answer.head(self.extra_fields, True), body)
        self._metrics_heads[gzipped] = built
        return built

    def index(self) -> Answer:
        rows = []
        engine = self.agent.engine
        for name, state in engine.workers.items() if engine else []:
            status = "up" if state.up else "down"
            eng = state.mapped.engine if state.mapped else "?"
            rows.append(
                f"<tr><td>{html.escape(name)}</td><td>{html.escape(redact_url(state.spec.url))}</td>"
                f"<td>{eng}</td><td>{status}</td></tr>"
            )
        body = f"""<!doctype html><html><head><meta charset="utf-8">
<title>inferwatch agent</title></head><body>
<h1>inferwatch agent {html.escape(__version__)}</h1>
<p><a href="/metrics">/metrics</a> &middot; <a href="/healthz">/healthz</a>
&middot; <a href="/readyz">/readyz</a></p>
<table border="1" cellpadding="4"><tr><th>worker</th><th>url</th><th>engine</th>
<th>status</th></tr>{"".join(rows) or '<tr><td colspan="4">no workers configured</td></tr>'}
</table><p>GPU backend: {html.escape(self.config.gpu.backend)}</p></body></html>"""
        return Answer(200, body.encode(), "text/html; charset=utf-8")

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> str:
        server_config = self.config.server
        loop = asyncio.get_running_loop()
        self.stopping = False
        try:
            # Each connection's protocol is wrapped by the guard, and the TLS handshake
            # gets the head's time-out.
            self._server = await loop.create_server(
                lambda: GuardedProtocol(_Connection(self), self.guard),
                self.config.listen_host or None,
                self.config.listen_port,
                ssl=self.web.ssl_context,
                ssl_handshake_timeout=(
                    server_config.header_timeout if self.web.ssl_context else None
                ),
                backlog=128,
                reuse_address=True,
                family=socket.AF_UNSPEC,
            )
        except OSError as exc:
            why = "in use by another program" if exc.errno == errno.EADDRINUSE else exc.strerror
            raise UsageError(f"listen address {self.config.listen}: cannot listen: {why}") from None
        scheme = "https" if self.web.ssl_context else "http"
        self.url = local_url(self.config.listen_host, self.config.listen_port, scheme)
        return self.url

    async def stop(self, grace: float = 5.0) -> None:
        """Stop accepting, close idle connections, let answers in flight finish
        (``grace`` seconds at most), then close the rest."""
        self.stopping = True
        if self._server is not None:
            self._server.close()
            self._server = None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while True:
            busy = [c for c in list(self.connections) if not c.close_if_idle()]
            if not busy or loop.time() >= deadline:
                break
            await asyncio.sleep(0.05)
        for conn in list(self.connections):
            conn.abort()
        self.connections.clear()
        self._bcrypt.shutdown(wait=False, cancel_futures=True)
