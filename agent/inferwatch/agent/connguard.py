"""Bounds on the agent's HTTP connections: a cap, a request-head time-out, eviction.

Without bounds a client could hold every file descriptor the agent has: many
open connections, or request heads that arrive a byte at a time (slowloris). Each accepted connection's protocol is wrapped in a
:class:`GuardedProtocol` that reports to one :class:`ConnectionGuard`:

- a connection must finish its request head (up to the blank line) within
  ``header_timeout`` of its first byte, or of being accepted; else it is closed;
- at ``max_connections`` the new connection closes the one that has been
  quiet longest among those not serving a request (a slowloris, an idle
  keep-alive), or is itself refused when every connection is busy.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar, cast

log = logging.getLogger(__name__)

_HEAD_END = b"\r\n\r\n"


class _Evictable(Protocol):
    busy: Any  # a count or a flag: true while the connection serves a request
    last_active: float

    def abort(self) -> None: ...


C = TypeVar("C", bound=_Evictable)


class Deadline:
    """A re-armable one-shot timer on the running loop: :meth:`arm` starts it
    afresh, :meth:`disarm` stops it, and ``delay`` seconds after the last
    ``arm`` (unless disarmed) it calls ``expired`` once."""

    __slots__ = ("_delay", "_expired", "_handle")

    def __init__(self, delay: float, expired: Callable[[], None]) -> None:
        self._delay = delay
        self._expired = expired
        self._handle: asyncio.TimerHandle | None = None

    def arm(self) -> None:
        self.disarm()
        self._handle = asyncio.get_running_loop().call_later(self._delay, self._fire)

    def disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        self._handle = None
        self._expired()


class Admission(Generic[C]):
    """The open connections of one listener, under a cap (the exporter's and each proxy's).

    At the cap, the connection quiet longest among those not serving a request (an
    idle keep-alive, a slow head) is aborted to make room; when every one is busy the
    new one is refused and counted."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.open: dict[C, None] = {}  # insertion order: oldest first
        #: connections refused at the cap
        self.refused = 0

    def admit(self, conn: C) -> bool:
        if len(self.open) >= self.cap:
            victim = min(
                (c for c in self.open if not c.busy),
                key=lambda c: c.last_active,
                default=None,
            )
            if victim is None:
                self.refused += 1
                return False
            # out of the count now: its connection_lost comes a loop turn later, and
            # the next connection of this burst must not pick the same victim again
            self.release(victim)
            victim.abort()
        self.open[conn] = None
        return True

    def release(self, conn: C) -> None:
        self.open.pop(conn, None)


class ConnectionGuard(Admission["GuardedProtocol"]):
    """The exporter's connections: the cap, and each one's request head on a clock."""

    def __init__(self, max_connections: int, header_timeout: float) -> None:
        super().__init__(max_connections)
        self.header_timeout = header_timeout
        self.by_transport: dict[object, GuardedProtocol] = {}

    def admit(self, conn: GuardedProtocol) -> bool:
        if not super().admit(conn):
            return False
        self.by_transport[conn.transport] = conn
        return True

    def release(self, conn: GuardedProtocol) -> None:
        super().release(conn)
        self.by_transport.pop(conn.transport, None)

    def request_started(self, transport: object) -> None:
        conn = self.by_transport.get(transport)
        if conn is not None:
            conn.busy += 1

    def request_finished(self, transport: object) -> None:
        conn = self.by_transport.get(transport)
        if conn is not None:
            conn.busy = max(0, conn.busy - 1)
            conn.last_active = asyncio.get_running_loop().time()


class GuardedProtocol(asyncio.Protocol):
    """Forwards every event to the server's protocol (``exporter.py``), watching the request heads on the way."""

    def __init__(self, inner: Any, guard: ConnectionGuard) -> None:
        self.inner = inner
        self.guard = guard
        self.transport: asyncio.Transport | None = None
        self.busy = 0
        self.last_active = 0.0
        self._tail = b""
        self._in_head = True  # waiting for a head (at the start, after each head)
        self._head_due = Deadline(guard.header_timeout, self._head_timed_out)
        self._closed = False

    # ------------------------------------------------------------ asyncio protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are no asyncio.Transport subclass: no isinstance check
        self.transport = transport = cast(asyncio.Transport, transport)
        loop = asyncio.get_running_loop()
        self.last_active = loop.time()
        if not self.guard.admit(self):
            self._closed = True
            transport.abort()
            return
        self._head_due.arm()
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        if not self._in_head:
            # Bytes after a complete head: the next request of a keep-alive
            # connection begins (the agent serves GETs only, without bodies).
            self._in_head = True
            self._tail = b""
            self._head_due.arm()
        if self._in_head:
            seen = self._tail + data
            if _HEAD_END in seen:
                self._in_head = False
                self._head_due.disarm()
                self.last_active = asyncio.get_running_loop().time()
                # Pipelined bytes after the blank line start the next head.
                rest = seen.rsplit(_HEAD_END, 1)[1]
                if rest:
                    self._in_head = True
                    self._tail = rest[-3:]
                    self._head_due.arm()
            else:
                self._tail = seen[-3:]
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        if self._closed:
            return None
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_due.disarm()
        if self._closed:
            return  # refused before the server saw the connection: nothing to tell it
        self.guard.release(self)
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    # ------------------------------------------------------------ time-out
    def _head_timed_out(self) -> None:
        if self._in_head and not self.busy:
            self.abort()

    def abort(self) -> None:
        self._head_due.disarm()
        if self.transport is not None:
            self.transport.abort()
