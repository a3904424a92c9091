"""Log volume a client cannot drive: one line per kind of trouble, repeats counted.

A client that sends 10,000 malformed requests, or a flood of connections that
runs the agent out of file descriptors, used to write one traceback each
(99 MB in 36 s). Here, records from the HTTP server's loggers and from the
event loop's error handler lose their tracebacks (the exception's type and
message stay on the line) and each kind is written at most once per
``interval``; the next line of that kind says how many were left out.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

#: loggers whose records are about clients, not about the agent
CLIENT_LOGGERS = ("aiohttp.server", "aiohttp.web", "aiohttp.access", "asyncio")


class Throttle(logging.Filter):
    def __init__(self, interval: float = 60.0) -> None:
        super().__init__()
        self.interval = interval
        self._last: dict[tuple[str, str], float] = {}
        self._skipped: dict[tuple[str, str], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        # the kind: the logger and the message's template, before any detail is added
        key = (record.name, str(record.msg)[:80])
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            record.msg = f"{record.getMessage()}: {type(exc).__name__}: {str(exc)[:200]}"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self.interval:
            self._skipped[key] = self._skipped.get(key, 0) + 1
            return False
        if len(self._last) > 1000:  # distinct kinds are few; never let the table grow
            self._last.clear()
        self._last[key] = now
        skipped = self._skipped.pop(key, 0)
        if skipped:
            record.msg = f"{record.getMessage()} ({skipped} more like it not logged)"
            record.args = None
        return True


def install(loop: asyncio.AbstractEventLoop, interval: float = 60.0) -> Throttle:
    """Throttle the client-facing loggers and the loop's error handler."""
    throttle = Throttle(interval)
    for name in CLIENT_LOGGERS:
        logging.getLogger(name).addFilter(throttle)
    loop_log = logging.getLogger("asyncio")

    def handler(_loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        # The loop's default handler writes a traceback for every failed accept()
        # (EMFILE under a connection flood); one line per kind is enough.
        exc = context.get("exception")
        # the loop's message is the template (the kind), the exception the detail
        template = str(context.get("message", "event loop error")).replace("%", "%%")
        if exc is None:
            loop_log.error(template)
        else:
            loop_log.error(template + ": %s: %s", type(exc).__name__, str(exc)[:200])

    loop.set_exception_handler(handler)
    return throttle
