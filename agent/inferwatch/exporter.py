"""The agent's HTTP server: /metrics from the cached exposition, /healthz, /readyz, /.

``/metrics`` never does collection work: it returns the bytes the agent built
after its last refresh (gzip-compressed once per build when asked), so many
scrapers cost what one does and a stuck worker never delays a scrape.
"""

from __future__ import annotations

import base64
import binascii
import html
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from inferwatch import __version__
from inferwatch.config import AgentConfig
from inferwatch.webconfig import BasicAuth, WebConfig, load_web_config

if TYPE_CHECKING:
    from inferwatch.agent import Agent

log = logging.getLogger(__name__)


class Exporter:
    def __init__(self, agent: Agent, config: AgentConfig) -> None:
        self.agent = agent
        self.config = config
        self.web = (
            load_web_config(config.web_config_file) if config.web_config_file else WebConfig()
        )
        self.auth = BasicAuth(self.web.users) if self.web.users else None
        self._runner: web.AppRunner | None = None
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
        if self.auth is not None and not self._authorized(request):
            return web.Response(
                status=401,
                text="Unauthorized\n",
                headers={"WWW-Authenticate": 'Basic realm="inferwatch"'},
            )
        response = await handler(request)
        for name, value in self.web.headers.items():
            response.headers[name] = value
        return response

    def _authorized(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic" or not encoded:
            return False
        try:
            user, sep, password = base64.b64decode(encoded, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        assert self.auth is not None
        return bool(sep) and self.auth.check(user, password)

    async def metrics(self, request: web.Request) -> web.Response:
        headers = {"Content-Type": CONTENT_TYPE_LATEST}
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            headers["Content-Encoding"] = "gzip"
            return web.Response(body=await self.agent.gzipped_async(), headers=headers)
        return web.Response(body=self.agent.exposition, headers=headers)

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
                f"<tr><td>{html.escape(name)}</td><td>{html.escape(state.spec.url)}</td>"
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
        self._runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=5.0)
        await self._runner.setup()
        site = web.TCPSite(
            self._runner,
            self.config.listen_host,
            self.config.listen_port,
            ssl_context=self.web.ssl_context,
        )
        await site.start()
        scheme = "https" if self.web.ssl_context else "http"
        host = self.config.listen_host
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        if ":" in shown:
            shown = f"[{shown}]"
        self.url = f"{scheme}://{shown}:{self.config.listen_port}"
        return self.url

    async def stop(self) -> None:
        # Cleanup stops accepting new connections and lets requests in flight finish.
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
