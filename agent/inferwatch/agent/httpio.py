"""Small HTTP/1.1 on asyncio and the standard library: a request-head parser for the
agent's server and a client for its scrapes (issue 32: the base agent without aiohttp).

The agent speaks a narrow part of HTTP: its server answers GETs without bodies;
its client GETs (and, for the warm-up gate, POSTs) to engines, dcgm-exporter
and the Kubernetes API. Both ends are written here, small, with every bound
explicit:

- :func:`parse_request_head` reads one request head (RFC 9112 section 3 and 5):
  request line, header fields, obsolete line folding refused;
- :class:`Client` sends requests over pooled keep-alive connections: a total
  time-out per request, a cap on connections in flight and on idle ones per
  host, a body size limit (the decompressed size too), TLS (``ssl`` module),
  basic auth and other headers, bodies with Content-Length, chunked or up to
  the end of the connection, gzip and deflate, no redirects followed.

Errors are :class:`HttpError` (the connection failed, was cut or answered
outside HTTP), :class:`TooLarge` (the body passed the limit) and
:class:`TimeoutError` (the time-out passed); their messages never carry a URL's
credentials.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
import zlib
from collections.abc import AsyncIterator, Awaitable, Mapping
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import unquote, urlsplit

T = TypeVar("T")

#: longest request or response head read (request line or status line and fields)
MAX_HEAD = 16 * 1024
#: most header fields in one head
MAX_FIELDS = 100
_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


class HttpError(Exception):
    """The connection failed, was cut, or the peer did not speak HTTP/1.x."""


class TooLarge(HttpError):
    """A body passed the caller's limit (its decompressed size counts)."""


class BadRequest(ValueError):
    """A request head that is not HTTP/1.x; ``status`` is the answer to give (400, 431...)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def _fields(lines: list[bytes]) -> dict[str, str]:
    """Header fields by lower-case name; repeated fields joined with ", " (RFC 9110 5.3)."""
    if len(lines) > MAX_FIELDS:
        raise BadRequest("too many header fields", 431)
    headers: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(b":")
        if not sep or not name or not _TOKEN.issuperset(name):
            raise BadRequest("a malformed header field")
        try:
            text = value.strip(b" \t").decode("latin-1")
        except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
            raise BadRequest("a malformed header field") from None
        if any(c in text for c in "\r\n\x00"):
            raise BadRequest("a control character in a header field")
        key = name.decode("ascii").lower()
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers


@dataclass(frozen=True)
class RequestHead:
    method: str
    #: the request target as sent (origin form: path and query)
    target: str
    #: the target's path, without the query
    path: str
    #: (1, 1) or (1, 0)
    version: tuple[int, int]
    #: header fields, lower-case names
    headers: Mapping[str, str]

    @property
    def keep_alive(self) -> bool:
        """Whether the connection stays open after the answer (RFC 9112 9.3)."""
        tokens = {t.strip().lower() for t in self.headers.get("connection", "").split(",")}
        if self.version >= (1, 1):
            return "close" not in tokens
        return "keep-alive" in tokens


def parse_request_head(head: bytes) -> RequestHead:
    """One request head, without its closing blank line; :class:`BadRequest` when malformed."""
    if len(head) > MAX_HEAD:
        raise BadRequest("request head too large", 431)
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[0] or not _TOKEN.issuperset(parts[0]):
        raise BadRequest("a malformed request line")
    method, target, version = parts
    if version == b"HTTP/1.1":
        ver = (1, 1)
    elif version == b"HTTP/1.0":
        ver = (1, 0)
    else:
        raise BadRequest("not HTTP/1.0 or HTTP/1.1", 505 if version.startswith(b"HTTP/") else 400)
    if not target or any(b <= 0x20 or b == 0x7F for b in target):
        raise BadRequest("a malformed request target")
    if any(line[:1] in (b" ", b"\t") for line in lines[1:]):
        raise BadRequest("obsolete line folding")
    text = target.decode("latin-1")
    if text.startswith(("http://", "https://")):  # absolute form: the path is ours
        text = urlsplit(text).path or "/"
        path = text
    else:
        path = text.partition("?")[0]
    return RequestHead(method.decode("ascii"), text, path, ver, _fields(lines[1:]))


# ---------------------------------------------------------------------------- client


@dataclass(frozen=True)
class Response:
    status: int
    #: header fields, lower-case names
    headers: Mapping[str, str]
    #: the body, decompressed
    body: bytes

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


def basic_auth(username: str, password: str) -> str:
    """The Authorization value for basic auth (RFC 7617), UTF-8 credentials."""
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode("ascii")


@dataclass(frozen=True)
class _Target:
    scheme: str
    host: str
    port: int
    #: path and query
    target: str
    #: the Host field
    authority: str
    #: Authorization from the URL's userinfo, if any
    auth: str | None


def _split(url: str) -> _Target:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise HttpError(f"not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HttpError("not an http or https URL")
    default = 443 if parts.scheme == "https" else 80
    host = parts.hostname
    shown_host = f"[{host}]" if ":" in host else host
    authority = shown_host if port in (None, default) else f"{shown_host}:{port}"
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    auth = None
    if parts.username is not None:
        auth = basic_auth(unquote(parts.username), unquote(parts.password or ""))
    return _Target(parts.scheme, host, port or default, target, authority, auth)


class _Connection:
    __slots__ = ("key", "reader", "writer")

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, key: tuple[str, str, int]
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.key = key

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.transport.abort()


class StreamedResponse:
    """An answer whose body is read as it arrives (:meth:`Client.stream`)."""

    def __init__(self, status: int, headers: Mapping[str, str], chunks: AsyncIterator[bytes]):
        self.status = status
        self.headers = headers
        self._chunks = chunks

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks

    async def lines(self) -> AsyncIterator[bytes]:
        """The body split at line feeds (the line feed kept off); a last partial line too."""
        buffer = b""
        async for chunk in self._chunks:
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                yield line
        if buffer:
            yield buffer

    async def read(self, limit: int) -> bytes:
        """The whole body; :class:`TooLarge` past ``limit`` bytes."""
        body = bytearray()
        async for chunk in self._chunks:
            body += chunk
            if len(body) > limit:
                raise TooLarge(f"body over {limit} bytes")
        return bytes(body)


class Client:
    """HTTP/1.1 requests over pooled keep-alive connections.

    ``limit`` bounds the connections in use at once (requests beyond wait);
    ``idle_per_host`` bounds those kept open between requests to one host.
    ``headers`` go with every request (a request's own win).
    """

    def __init__(
        self,
        *,
        limit: int = 32,
        idle_per_host: int = 2,
        headers: Mapping[str, str] | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.headers = dict(headers or {})
        self.ssl_context = ssl_context
        self.idle_per_host = idle_per_host
        self._slots = asyncio.Semaphore(limit)
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._closed = False

    async def close(self) -> None:
        """Close the idle connections; requests in flight close theirs when done."""
        self._closed = True
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()

    # ------------------------------------------------------------------ requests
    async def request(
        self,
        method: str,
        url: str,
        *,
        timeout: float,
        max_body: int = 16 << 20,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
    ) -> Response:
        """Send one request and read the whole answer within ``timeout`` seconds."""
        job = self._request(method, url, max_body=max_body, headers=headers, body=body)
        return await _timed(job, asyncio.get_running_loop().time() + timeout)

    async def _request(
        self,
        method: str,
        url: str,
        *,
        max_body: int,
        headers: Mapping[str, str] | None,
        body: bytes | None,
    ) -> Response:
        target = _split(url)
        async with self._slots:
            for attempt in (0, 1):
                conn, reused = await self._connect(target)
                try:
                    await self._send(conn, target, method, headers, body)
                    status, fields = await self._head(conn, first=reused)
                except _Stale:
                    conn.close()
                    if attempt == 0:
                        continue  # an idle connection the server had closed: once more
                    raise HttpError("the server closed the connection") from None
                except BaseException:
                    conn.close()
                    raise
                try:
                    data, reusable = await self._body(conn, method, status, fields, max_body)
                except BaseException:
                    conn.close()
                    raise
                self._release(conn, reusable and _keeps_alive(fields))
                return Response(status, fields, data)
        raise AssertionError("unreachable")  # pragma: no cover

    async def get(self, url: str, *, timeout: float, max_body: int = 16 << 20,
                  headers: Mapping[str, str] | None = None) -> Response:  # fmt: skip
        return await self.request("GET", url, timeout=timeout, max_body=max_body, headers=headers)

    @contextlib.asynccontextmanager
    async def stream(
        self,
        method: str,
        url: str,
        *,
        timeout: float,
        connect_timeout: float | None = None,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        """Send one request; the answer's head within ``connect_timeout`` (default
        ``timeout``), its body as it comes, all of it within ``timeout`` seconds
        (:class:`TimeoutError` past it). The connection is closed at the end, never
        pooled."""
        target = _split(url)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        async with self._slots:
            first = min(deadline, loop.time() + (connect_timeout or timeout))
            conn = await _timed(self._open(target), first)
            try:
                await _timed(self._send(conn, target, method, headers, body, close=True), first)
                status, fields = await _timed(self._head(conn, first=False), first)
                chunks = self._chunks(conn, method, status, fields, deadline)
                yield StreamedResponse(status, fields, chunks)
            finally:
                conn.close()

    # ------------------------------------------------------------------ connections
    async def _connect(self, target: _Target) -> tuple[_Connection, bool]:
        key = (target.scheme, target.host, target.port)
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if conn.reader.at_eof() or conn.writer.is_closing():
                conn.close()
                continue
            return conn, True
        return await self._open(target), False

    async def _open(self, target: _Target) -> _Connection:
        context: ssl.SSLContext | None = None
        if target.scheme == "https":
            context = self.ssl_context or ssl.create_default_context()
        try:
            reader, writer = await asyncio.open_connection(
                target.host, target.port, ssl=context, limit=MAX_HEAD
            )
        except OSError as exc:
            raise HttpError(f"cannot connect: {exc.strerror or exc}") from None
        except ssl.SSLError as exc:  # pragma: no cover - OSError's subclass on 3.11
            raise HttpError(f"TLS failed: {exc.reason}") from None
        return _Connection(reader, writer, (target.scheme, target.host, target.port))

    def _release(self, conn: _Connection, reusable: bool) -> None:
        idle = self._idle.setdefault(conn.key, [])
        if reusable and not self._closed and len(idle) < self.idle_per_host:
            idle.append(conn)
        else:
            conn.close()

    # ------------------------------------------------------------------ the wire
    async def _send(
        self,
        conn: _Connection,
        target: _Target,
        method: str,
        headers: Mapping[str, str] | None,
        body: bytes | None,
        *,
        close: bool = False,
    ) -> None:
        fields = {"Host": target.authority, "Accept-Encoding": "gzip, deflate"}
        if target.auth is not None:
            fields["Authorization"] = target.auth
        fields.update(self.headers)
        fields.update(headers or {})
        if body is not None:
            fields["Content-Length"] = str(len(body))
        if close:
            fields["Connection"] = "close"
        lines = [f"{method} {target.target} HTTP/1.1"]
        for name, value in fields.items():
            if any(c in value for c in "\r\n\x00") or any(c in name for c in "\r\n: "):
                raise HttpError(f"header {name[:64]!r} holds a line break")
            lines.append(f"{name}: {value}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", errors="replace")
        try:
            conn.writer.write(head + body if body else head)
            await conn.writer.drain()
        except (OSError, RuntimeError) as exc:
            raise _Stale() from exc

    async def _head(self, conn: _Connection, *, first: bool) -> tuple[int, dict[str, str]]:
        """The status and fields of the answer (1xx answers skipped)."""
        while True:
            try:
                head = await conn.reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as exc:
                if first and not exc.partial:
                    raise _Stale() from None
                raise HttpError("the connection closed before an answer") from None
            except asyncio.LimitOverrunError:
                raise HttpError(f"an answer head over {MAX_HEAD} bytes") from None
            except (ConnectionError, OSError) as exc:
                if first:
                    raise _Stale() from None
                raise HttpError(f"the connection failed: {exc}") from None
            first = False
            lines = head[:-4].split(b"\r\n")
            status_line = lines[0].split(b" ", 2)
            if (
                len(status_line) < 2
                or status_line[0] not in (b"HTTP/1.1", b"HTTP/1.0")
                or not status_line[1].isdigit()
                or len(status_line[1]) != 3
            ):
                raise HttpError("the answer is not HTTP/1.x")
            try:
                fields = _fields(lines[1:])
            except BadRequest as exc:
                raise HttpError(f"a malformed answer: {exc}") from None
            if (
                status_line[0] == b"HTTP/1.0"
                and "keep-alive" not in fields.get("connection", "").lower()
            ):
                fields["connection"] = "close"
            status = int(status_line[1])
            if 100 <= status < 200:
                continue
            return status, fields

    async def _body(
        self, conn: _Connection, method: str, status: int, fields: Mapping[str, str], limit: int
    ) -> tuple[bytes, bool]:
        """The decompressed body and whether the connection may be used again."""
        length = fields.get("content-length", "")
        if length.isdigit() and int(length) > limit and method != "HEAD":
            raise TooLarge(f"body of {length} bytes, over {limit}")  # without reading it
        body = bytearray()
        async for chunk in self._chunks(conn, method, status, fields):
            body += chunk
            if len(body) > limit:
                raise TooLarge(f"body over {limit} bytes")
        framed = "chunked" in fields.get("transfer-encoding", "").lower() or (
            "content-length" in fields
        )
        no_body = method == "HEAD" or status in (204, 304)
        return bytes(body), framed or no_body

    async def _chunks(
        self,
        conn: _Connection,
        method: str,
        status: int,
        fields: Mapping[str, str],
        deadline: float | None = None,
    ) -> AsyncIterator[bytes]:
        """The body as it arrives, decompressed; :class:`HttpError` when cut short."""
        if method == "HEAD" or status in (204, 304):
            return
        coding = fields.get("content-encoding", "").strip().lower()
        inflate: zlib._Decompress | None = None
        if coding in ("gzip", "x-gzip"):
            inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif coding == "deflate":
            inflate = zlib.decompressobj()
        elif coding not in ("", "identity"):
            raise HttpError(f"an unknown content coding {coding[:32]!r}")
        async for raw in self._raw(conn, fields, deadline):
            if inflate is None:
                yield raw
                continue
            try:
                data = inflate.decompress(raw, 1 << 16)
                while True:
                    if data:
                        yield data
                    if not inflate.unconsumed_tail:
                        break
                    data = inflate.decompress(inflate.unconsumed_tail, 1 << 16)
            except zlib.error as exc:
                raise HttpError(f"a corrupt {coding} body: {exc}") from None
        if inflate is not None:
            tail = inflate.flush()
            if tail:
                yield tail

    async def _raw(
        self, conn: _Connection, fields: Mapping[str, str], deadline: float | None
    ) -> AsyncIterator[bytes]:
        reader = conn.reader

        async def read(n: int) -> bytes:
            return await _timed(reader.read(n), deadline)

        async def readuntil(sep: bytes) -> bytes:
            return await _timed(reader.readuntil(sep), deadline)

        async def pieces(left: int) -> AsyncIterator[bytes]:
            """The next ``left`` bytes, as they come (at most 64 KiB a piece)."""
            while left:
                data = await read(min(left, 1 << 16))
                if not data:
                    raise asyncio.IncompleteReadError(b"", left)
                left -= len(data)
                yield data

        try:
            if "chunked" in fields.get("transfer-encoding", "").lower():
                while True:
                    size_line = await readuntil(b"\r\n")
                    size_text = size_line[:-2].split(b";", 1)[0].strip()
                    try:
                        size = int(size_text, 16)
                    except ValueError:
                        raise HttpError("a malformed chunk size") from None
                    if size < 0:
                        raise HttpError("a malformed chunk size")
                    if size == 0:
                        while (await readuntil(b"\r\n")) != b"\r\n":
                            pass  # trailer fields, ignored
                        return
                    async for data in pieces(size):
                        yield data
                    if await _timed(reader.readexactly(2), deadline) != b"\r\n":
                        raise HttpError("a malformed chunk")
            elif "content-length" in fields:
                try:
                    left = int(fields["content-length"])
                except ValueError:
                    raise HttpError("a malformed Content-Length") from None
                if left < 0:
                    raise HttpError("a malformed Content-Length")
                async for data in pieces(left):
                    yield data
            else:
                while data := await read(1 << 16):
                    yield data
        except asyncio.IncompleteReadError:
            raise HttpError("the connection closed before the end of the body") from None
        except asyncio.LimitOverrunError:
            raise HttpError("a malformed chunk") from None
        except (ConnectionError, OSError) as exc:
            raise HttpError(f"the connection failed: {exc}") from None


class _Stale(Exception):
    """A reused connection the server had closed before our request."""


#: asyncio.timeout_at (Python 3.11+): a deadline in the caller's own task
_TIMEOUT_AT = getattr(asyncio, "timeout_at", None)


async def _timed(job: Awaitable[T], deadline: float | None) -> T:
    """``job`` done by ``deadline`` (the loop's clock), else :class:`TimeoutError`.

    On Python 3.11+ in the caller's task (``asyncio.timeout_at``): no task per read,
    and a cancellation that meets a finished read is never lost, as it can be with
    ``wait_for`` before 3.12 (a watch that would then not stop)."""
    if deadline is None:
        return await job
    if _TIMEOUT_AT is not None:
        async with _TIMEOUT_AT(deadline):
            return await job
    return await asyncio.wait_for(job, deadline - asyncio.get_running_loop().time())


def _keeps_alive(fields: Mapping[str, str]) -> bool:
    return "close" not in fields.get("connection", "").lower()
