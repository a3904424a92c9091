"""One worker's proxy: its listener and client connections (cap, eviction), its pool
of kept-alive connections to the worker (docs/proxy.md, "Connections to the
worker"), and the one timer for every time-out."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections.abc import Coroutine
from typing import Any
from urllib.parse import urlsplit

from inferwatch.agent.config import ProxySpec, WorkerSpec, local_url
from inferwatch.agent.connguard import Admission
from inferwatch.agent.proxy.client import ClientConn
from inferwatch.agent.proxy.limits import MAX_POOLED, STREAM_CLOSE_S
from inferwatch.agent.proxy.measure import ProxyStats
from inferwatch.agent.proxy.upstream import UpstreamConn, reuse_window
from inferwatch.errors import UsageError

#: one logger for the whole proxy package (its lines keep the name they always had)
log = logging.getLogger("inferwatch.agent.proxy")


class ProxyServer:
    """One worker's listener and its upstream pool."""

    def __init__(self, worker: WorkerSpec, spec: ProxySpec, stats: ProxyStats) -> None:
        self.worker = worker
        self.spec = spec
        self.stats = stats
        parts = urlsplit(worker.url)
        self.scheme = parts.scheme or "http"
        self.up_host = parts.hostname or "127.0.0.1"
        self.up_port = parts.port or (443 if self.scheme == "https" else 80)
        self.host_header = parts.netloc.rpartition("@")[2]
        self.prefix = parts.path.rstrip("/")
        #: the clients' connections under ``max_connections``
        self.clients: Admission[ClientConn] = Admission(spec.max_connections)
        self.idle: list[UpstreamConn] = []
        #: learned: the worker closes its connection after every streamed answer
        #: (llama-server), so none is kept after one
        self.closes_after_stream = False
        self._server: asyncio.AbstractServer | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._ssl: ssl.SSLContext | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        self.url = ""

    @property
    def connections(self) -> int:
        return len(self.clients.open)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    async def start(self) -> str:
        loop = asyncio.get_running_loop()
        if self.scheme == "https":
            self._ssl = ssl.create_default_context()
        try:
            self._server = await loop.create_server(
                lambda: ClientConn(self),
                self.spec.listen_host or None,
                self.spec.listen_port,
                backlog=1024,
                reuse_address=True,
                family=socket.AF_UNSPEC,
            )
        except OSError as exc:
            await self.stop()
            raise UsageError(
                f"worker {self.worker.name}: proxy.listen {self.spec.listen}: cannot listen: "
                f"{exc.strerror}"
            ) from None
        self._sweeper = loop.create_task(self._sweep())
        port = self._server.sockets[0].getsockname()[1]
        self.url = local_url(self.spec.listen_host, port)
        return self.url

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if self._server is not None:
            self._server.close()
            self._server = None
        for conn in list(self.clients.open):
            conn.abort()
        for up in list(self.idle):
            up.close()
        self.idle.clear()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.sleep(0)

    # ------------------------------------------------------------ client connections
    # ------------------------------------------------------------ the worker's connections
    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """A connect under way: kept until it ends (cancelled only when the proxy stops)."""
        task = self.loop.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def connect(self) -> UpstreamConn:
        loop = asyncio.get_running_loop()
        _, up = await asyncio.wait_for(
            loop.create_connection(
                lambda: UpstreamConn(self), self.up_host, self.up_port, ssl=self._ssl
            ),
            self.spec.connect_timeout,
        )
        up.start()
        return up

    def pool_get(self) -> UpstreamConn | None:
        """A kept-alive connection the request may use (docs/proxy.md, "Connections to
        the worker"), or None: open a new one."""
        idle = self.idle
        now = time.monotonic()
        while idle:
            up = idle.pop()
            if up.closed or now - up.idle_since >= reuse_window(up):
                up.close()
                continue
            if up.readable():  # the worker's close arrived, not yet read
                if up.streamed and now - up.idle_since < STREAM_CLOSE_S:
                    self.learn_stream_close()
                up.close()
                continue
            up.reused = True
            up.start()
            return up
        return None

    def pool_put(self, up: UpstreamConn) -> None:
        announced = up.announced
        if (
            not up.reusable
            or up.closed
            or (up.streamed and self.closes_after_stream)
            or len(self.idle) >= MAX_POOLED
            or (announced is not None and up.uses + 1 >= announced[1])
        ):
            up.close()
            return
        up.idle_since = time.monotonic()
        self.idle.append(up)

    def learn_stream_close(self) -> None:
        if not self.closes_after_stream:
            self.closes_after_stream = True
            log.info("worker %s closes its connection after a streamed answer: "
                     "none is kept after one", self.worker.name)  # fmt: skip

    def pool_drop(self, up: UpstreamConn) -> None:
        if up in self.idle:
            self.idle.remove(up)

    # ------------------------------------------------------------ time-outs
    async def _sweep(self) -> None:
        """One timer for every connection: slow heads, idle keep-alives, silent workers,
        stale pooled connections (no timer armed per chunk on the data path)."""
        spec = self.spec
        tick = min(1.0, max(0.05, min(spec.read_timeout, spec.header_timeout,
                                      spec.idle_timeout) / 5))  # fmt: skip
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(tick)
            try:
                self._sweep_once(loop.time(), time.monotonic())
            except Exception as exc:  # the sweeper must outlive a defect
                log.error("proxy: %s in the time-out sweep", type(exc).__name__)

    def _sweep_once(self, now: float, mono: float) -> None:
        spec = self.spec
        for conn in list(self.clients.open):
            if conn.state == "head" and not conn.busy:
                limit = spec.header_timeout if conn.buf or conn.fresh else spec.idle_timeout
                if now - conn.last_active > limit:
                    conn.abort()
            up = conn.up
            if (conn.busy and up is not None and not conn.up_paused
                    and mono - up.last_read > spec.read_timeout):  # fmt: skip
                up.timed_out()
        for up in list(self.idle):
            if mono - up.idle_since >= reuse_window(up):
                self.pool_drop(up)
                up.close()
