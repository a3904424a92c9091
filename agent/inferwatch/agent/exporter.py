"""The agent's HTTP server: /metrics from the cached exposition, /healthz, /readyz, /.

``/metrics`` never does collection work: it returns the bytes the agent built
after its last refresh (gzip-compressed once per build when asked), so many
scrapers cost what one does and a stuck worker never delays a scrape.

Hostile clients are bounded: connections are capped and must send their
request head in time (``connguard.py``), bcrypt runs on one thread of its own
with a short queue (a guessing client waits, or gets 429, never the event
loop), ``/healthz`` and ``/readyz`` need no credentials (liveness probes carry
none), and client-caused log lines are rate-limited (``logthrottle.py``).
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
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from inferwatch import __version__
from inferwatch.agent.config import AgentConfig
from inferwatch.agent.connguard import ConnectionGuard, GuardedProtocol
from inferwatch.agent.fdbudget import descriptor_limit, inbound_budget
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


_PLAIN_HEADERS = {"Content-Type": CONTENT_TYPE_LATEST, "Vary": "Accept-Encoding"}
_GZIP_HEADERS = {**_PLAIN_HEADERS, "Content-Encoding": "gzip"}
#: Accept-Encoding values seen -> accepts_gzip(value): scrapers send the same few
_GZIP_WANTED: dict[str, bool] = {}


def _gzip_wanted(header: str) -> bool:
    wanted = _GZIP_WANTED.get(header)
    if wanted is None:
        wanted = accepts_gzip(header)
        if len(_GZIP_WANTED) < 64 and len(header) <= 256:
            _GZIP_WANTED[header] = wanted
    return wanted


class Exporter:
    def __init__(self, agent: Served, config: AgentConfig) -> None:
        self.agent = agent
        self.config = config
        self.web = (
            load_web_config(config.web_config_file) if config.web_config_file else WebConfig()
        )
        self.auth = BasicAuth(self.web.users) if self.web.users else None
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
        self._runner: web.AppRunner | None = None
        self._server: asyncio.Server | None = None
        self.url = ""

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware])
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/", self.index)
        return app

    @web.middleware
    async def _middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        transport = request.transport
        self.guard.request_started(transport)
        try:
            if self.auth is not None and request.path not in OPEN_PATHS:
                refusal = await self._refusal(request)
                if refusal is not None:
                    return refusal
            response = await handler(request)
            for name, value in self.web.headers.items():
                response.headers[name] = value
            return response
        finally:
            self.guard.request_finished(transport)

    async def _refusal(self, request: web.Request) -> web.Response | None:
        """None when the credentials are good, else the answer (401, or 429 when too
        many checks wait already)."""
        assert self.auth is not None
        denied = web.Response(
            status=401,
            text="Unauthorized\n",
            headers={"WWW-Authenticate": 'Basic realm="inferwatch"'},
        )
        header = request.headers.get("Authorization", "")
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic" or not encoded or len(encoded) > 1024:
            return denied
        try:
            user, sep, password = base64.b64decode(encoded, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return denied
        if not sep:
            return denied
        if self.auth.cached(user, password):
            return None
        if self._auth_waiting >= AUTH_QUEUE:
            return web.Response(status=429, text="Too many credential checks\n",
                                headers={"Retry-After": "1"})  # fmt: skip
        self._auth_waiting += 1
        try:
            loop = asyncio.get_running_loop()
            ok = await loop.run_in_executor(self._bcrypt, self.auth.check, user, password)
        finally:
            self._auth_waiting -= 1
        return None if ok else denied

    async def metrics(self, request: web.Request) -> web.Response:
        # One rendered exposition per build for every scraper (issue 32): the bytes and
        # their gzip form are made once; a scrape only picks them and the fixed headers.
        output = self.agent.output
        if _gzip_wanted(request.headers.get("Accept-Encoding", "")):
            body = output.gzipped_ready()
            if body is None:  # the first gzip scrape of this build compresses it
                body = await output.gzipped()
            return web.Response(body=body, headers=_GZIP_HEADERS)
        return web.Response(body=output.body, headers=_PLAIN_HEADERS)

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(self, request: web.Request) -> web.Response:
        if self.agent.ready():
            return web.Response(text="ready\n")
        return web.Response(status=503, text="not ready: first collection or warm-up pending\n")

    async def index(self, request: web.Request) -> web.Response:
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
        return web.Response(text=body, content_type="text/html")

    async def start(self) -> str:
        server_config = self.config.server
        self._runner = web.AppRunner(
            self.app(),
            access_log=None,
            shutdown_timeout=5.0,
            keepalive_timeout=server_config.idle_timeout,
        )
        await self._runner.setup()
        server = self._runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        try:
            # Not a TCPSite: the protocol of each connection is wrapped by the guard,
            # and the TLS handshake gets the head's time-out.
            self._server = await loop.create_server(
                lambda: GuardedProtocol(server(), self.guard),
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
            await self._runner.cleanup()
            self._runner = None
            why = "in use by another program" if exc.errno == errno.EADDRINUSE else exc.strerror
            raise UsageError(f"listen address {self.config.listen}: cannot listen: {why}") from None
        scheme = "https" if self.web.ssl_context else "http"
        host = self.config.listen_host
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        if ":" in shown:
            shown = f"[{shown}]"
        self.url = f"{scheme}://{shown}:{self.config.listen_port}"
        return self.url

    async def stop(self) -> None:
        # Cleanup stops accepting new connections and lets requests in flight finish.
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self._bcrypt.shutdown(wait=False, cancel_futures=True)
