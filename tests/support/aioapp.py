"""Tests that run in the event loop: an aiohttp application on a loopback port, a wait."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web
from tests.support.proc import free_port


async def serve_app(app: web.Application) -> tuple[web.AppRunner, str]:
    """Serve ``app`` on 127.0.0.1: its runner (``await runner.cleanup()`` stops it) and URL."""
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


async def until(condition: Callable[[], object], timeout: float = 20.0) -> None:
    """Await ``condition`` on the running loop (whose tasks make it come true)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"condition not met in {timeout} s")
        await asyncio.sleep(0.02)
