"""Issue 32: the base agent serves and scrapes on the standard library, without aiohttp.

A real ``inferwatch run`` process with a worker and no measuring proxy scrapes
its worker and serves /metrics without ever loading aiohttp's C extensions
(read from /proc/<pid>/maps); its server speaks HTTP/1.1 to raw sockets
(keep-alive, pipelining, HEAD, 404/405, malformed heads, a client that never
reads); and the stdlib client (:mod:`inferwatch.agent.httpio`) reads every body
framing, gzip, TLS and credentials from real servers, within its limits.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import http.server
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar

import psutil
import pytest
from tests.support.agentrun import LOOPS
from tests.support.attack import start_agent
from tests.support.proc import http_get, wait_until
from tests.support.stubworker import StubWorker
from tests.support.tls import self_signed_cert
from tests.support.vllm_text import EngineValues, render

from inferwatch.agent.httpio import (
    BadRequest,
    Client,
    HttpError,
    TooLarge,
    basic_auth,
    parse_request_head,
)


def _maps(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def test_the_agent_without_a_proxy_never_loads_aiohttp(tmp_path: Path) -> None:
    worker = StubWorker(lambda: render("v1", [EngineValues(running=2)]))
    agent, port = start_agent(
        tmp_path, "--gpu-backend", "fake", "--worker", f"w={worker.url}",
        "--collect-interval", "1s",
    )  # fmt: skip
    try:
        wait_until(
            lambda: 'inferwatch_target_up{worker="w"} 1.0' in http_get(
                f"http://127.0.0.1:{port}/metrics")[1].decode(),
            30, message="the worker scraped",
        )  # fmt: skip
        status, _, _ = http_get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        maps = _maps(agent.popen.pid)
        # the agent did load Python's C extensions (the check reads the right file)...
        assert "_ssl" in maps or "_asyncio" in maps, maps[:2000]
        # ...and none of aiohttp's (its HTTP parser), nor multidict's or yarl's
        for library in ("aiohttp/", "multidict/", "yarl/"):
            assert library not in maps, library
    finally:
        agent.stop()
        worker.stop()


# --------------------------------------------------------------------------- the server
@pytest.fixture(scope="module", params=sorted(LOOPS))
def agent_port(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[int, int]]:
    """The agent on each event loop it runs on: asyncio's (the base install) and uvloop's
    (``inferwatch[fast]``; its transports are no asyncio.Transport subclass)."""
    if request.param == "uvloop":
        pytest.importorskip("uvloop", reason="uvloop comes with inferwatch[fast] (test extra)")
    tmp = tmp_path_factory.mktemp("server")
    agent, port = start_agent(
        tmp, "--gpu-backend", "fake", config={"server": {"idle_timeout": "2s"}},
        env={"INFERWATCH_UVLOOP": LOOPS[request.param]},
    )  # fmt: skip
    try:
        yield port, agent.popen.pid
    finally:
        agent.stop()


def _exchange(port: int, data: bytes, *, until_close: bool = True, wait: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        s.sendall(data)
        got = b""
        end = time.monotonic() + wait
        while time.monotonic() < end:
            try:
                chunk = s.recv(1 << 16)
            except TimeoutError:
                break
            if not chunk:
                break
            got += chunk
            if not until_close and got.count(b"HTTP/1.1 ") >= data.count(b" HTTP/1."):
                heads = got.split(b"HTTP/1.1 ")
                if all(b"\r\n\r\n" in h for h in heads[1:]):
                    break
        return got


def _answers(raw: bytes, heads: tuple[int, ...] = ()) -> list[tuple[int, dict[str, str], bytes]]:
    """Answers on one connection, split by Content-Length (``heads``: the indices of
    answers to HEAD requests, which have none)."""
    out: list[tuple[int, dict[str, str], bytes]] = []
    while raw:
        head, _, rest = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        fields = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
        length = 0 if len(out) in heads else int(fields.get("content-length", "0"))
        out.append((int(lines[0].split()[1]), fields, rest[:length]))
        raw = rest[length:]
    return out


def test_pipelined_requests_are_answered_in_order_on_one_connection(
    agent_port: tuple[int, int],
) -> None:
    port, _ = agent_port
    request = (
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n"
        b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n"
        b"POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    answers = _answers(_exchange(port, request), heads=(2,))
    statuses = [a[0] for a in answers]
    assert statuses[:5] == [200, 200, 200, 404, 405], statuses
    assert statuses[5] in (200, 503)
    assert len(answers) == 6
    assert answers[0][2] == b"ok\n"
    _, fields, body = answers[1]
    assert fields["content-encoding"] == "gzip" and fields["vary"] == "Accept-Encoding"
    assert b"# TYPE inferwatch_agent_info gauge" in gzip.decompress(body)
    _, head_fields, head_body = answers[2]  # HEAD: the length of the body, no body
    assert int(head_fields["content-length"]) > 1000 and head_body == b""
    assert answers[4][1]["allow"] == "GET, HEAD"
    assert answers[5][1]["connection"] == "close"


def test_gzip_form_is_the_plain_body_and_reused_by_every_scraper(
    agent_port: tuple[int, int],
) -> None:
    port, _ = agent_port
    ask = b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n"
    plain = b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    # two gzip scrapes and a plain one in one write: one build (the collection
    # interval is seconds), the same bytes twice, and the plain text they unpack to
    for _ in range(5):
        answers = _answers(_exchange(port, ask + ask + plain))
        first, second, text = (a[2] for a in answers)
        if gzip.decompress(first) == text:
            break
    assert first == second
    assert gzip.decompress(first) == text


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /\x00bad HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", 400),
        (b"GET /healthz HTTP/1.1\r\nBad Name: x\r\n\r\n", 400),
        (b"GET /healthz HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", 413),
        (b"GET /healthz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501),
        (b"GET /healthz HTTP/1.1\r\nX: " + b"y" * 20_000 + b"\r\n\r\n", 431),
    ],
)
def test_malformed_requests_are_answered_and_closed(
    agent_port: tuple[int, int], request_bytes: bytes, status: int
) -> None:
    port, _ = agent_port
    raw = _exchange(port, request_bytes)
    assert raw.startswith(f"HTTP/1.1 {status} ".encode()), raw[:200]
    assert b"Connection: close" in raw


def test_http_1_0_is_answered_once_and_closed(agent_port: tuple[int, int]) -> None:
    port, _ = agent_port
    raw = _exchange(port, b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
    assert raw.startswith(b"HTTP/1.1 200 ") and raw.endswith(b"\r\n\r\nok\n")
    assert b"Connection: close" in raw


def test_idle_keep_alive_connections_are_closed(agent_port: tuple[int, int]) -> None:
    port, _ = agent_port
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        started = time.monotonic()
        got = b""
        while chunk := s.recv(4096):
            got += chunk
        # answered, then closed by the agent at server.idle_timeout (2 s here)
        assert got.startswith(b"HTTP/1.1 200 ")
        assert 1.0 < time.monotonic() - started < 8.0


def test_a_client_that_never_reads_holds_no_pile_of_answers(agent_port: tuple[int, int]) -> None:
    port, pid = agent_port
    rss_before = psutil.Process(pid).memory_info().rss
    many = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 20_000  # ~40 MB of answers if served
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.setblocking(False)
    try:
        sent = 0
        end = time.monotonic() + 5
        while sent < len(many) and time.monotonic() < end:
            try:
                sent += s.send(many[sent : sent + 65536])
            except BlockingIOError:
                time.sleep(0.05)
        time.sleep(1.0)
        grown = psutil.Process(pid).memory_info().rss - rss_before
        # another client is answered meanwhile, and the agent did not buffer the answers
        assert http_get(f"http://127.0.0.1:{port}/healthz")[0] == 200
        assert grown < 16e6, grown
    finally:
        s.close()


def test_parse_request_head_reads_fields_and_refuses_what_is_not_http() -> None:
    head = parse_request_head(b"GET /metrics?x=1 HTTP/1.0\r\nHost: a\r\nX-A: 1\r\nx-a: 2")
    assert (head.method, head.path, head.target, head.version) == (
        "GET", "/metrics", "/metrics?x=1", (1, 0),
    )  # fmt: skip
    assert head.headers["x-a"] == "1, 2" and not head.keep_alive
    assert parse_request_head(b"GET http://h/metrics HTTP/1.1\r\nHost: h").path == "/metrics"
    for bad in (b"GET /", b"GET  / HTTP/1.1", b"G(T / HTTP/1.1", b"GET / HTTP/1.1\r\n: x"):
        with pytest.raises(BadRequest):
            parse_request_head(bad)


# --------------------------------------------------------------------------- the client
class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    routes: ClassVar[dict[str, Callable[[_Handler], None]]] = {}
    seen: ClassVar[list[tuple[str, str, int]]] = []

    def do_GET(self) -> None:
        type(self).seen.append((self.path, self.headers.get("Authorization", ""),
                                self.client_address[1]))  # fmt: skip
        self.routes[self.path](self)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        self._send(200, body[::-1])

    def _send(self, status: int, body: bytes, **fields: str) -> None:
        self.send_response(status)
        for name, value in fields.items():
            self.send_header(name.replace("_", "-"), value)
        if "Transfer_Encoding" not in fields:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _chunked(h: _Handler) -> None:
    h.send_response(200)
    h.send_header("Transfer-Encoding", "chunked")
    h.end_headers()
    for part in (b"hello ", b"chunked ", b"world"):
        h.wfile.write(f"{len(part):x};ext=1\r\n".encode() + part + b"\r\n")
    h.wfile.write(b"0\r\nX-Trailer: 1\r\n\r\n")


def _until_close(h: _Handler) -> None:
    h.close_connection = True
    h.wfile.write(
        b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nno length, closed at the end"
    )


def _quiet_close(h: _Handler) -> None:
    """An answer that promises keep-alive, then the server closes (an idle time-out
    that races the client's next request)."""
    h._send(200, b"then closed")
    h.close_connection = True


def _cut(h: _Handler) -> None:
    h.close_connection = True
    h.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part")


ROUTES: dict[str, Callable[[_Handler], None]] = {
    "/plain": lambda h: h._send(200, b"plain body"),
    "/gzip": lambda h: h._send(200, gzip.compress(b"z" * 100_000), Content_Encoding="gzip"),
    "/deflate": lambda h: h._send(200, zlib.compress(b"d" * 1000), Content_Encoding="deflate"),
    "/bomb": lambda h: h._send(200, gzip.compress(b"\0" * (20 << 20)), Content_Encoding="gzip"),
    "/chunked": _chunked,
    "/eof": _until_close,
    "/cut": _cut,
    "/quiet-close": _quiet_close,
    "/big": lambda h: h._send(200, b"b" * 300_000),
    "/slow": lambda h: (time.sleep(2), h._send(200, b"late")),  # type: ignore[func-returns-value]
    "/redirect": lambda h: h._send(302, b"", Location="/plain"),
    "/close": lambda h: h._send(200, b"bye", Connection="close"),
}


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that gave up (the time-out case): nothing to say


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    _Handler.routes = ROUTES
    plain = _Server(("127.0.0.1", 0), _Handler)
    tls = _Server(("127.0.0.1", 0), _Handler)
    cert, key = self_signed_cert(tmp_path_factory.mktemp("tls"))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    tls.socket = context.wrap_socket(tls.socket, server_side=True)
    for server in (plain, tls):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield {
        "http": f"http://127.0.0.1:{plain.server_address[1]}",
        "https": f"https://127.0.0.1:{tls.server_address[1]}",
        "ca": str(cert),
    }
    plain.shutdown()
    tls.shutdown()


async def test_client_reads_every_framing_and_coding(upstream: dict[str, str]) -> None:
    base = upstream["http"]
    client = Client()
    try:
        assert (await client.get(base + "/plain", timeout=5)).body == b"plain body"
        assert (await client.get(base + "/gzip", timeout=5)).body == b"z" * 100_000
        assert (await client.get(base + "/deflate", timeout=5)).body == b"d" * 1000
        assert (await client.get(base + "/chunked", timeout=5)).body == b"hello chunked world"
        assert (await client.get(base + "/eof", timeout=5)).body == b"no length, closed at the end"
        redirect = await client.get(base + "/redirect", timeout=5)
        assert redirect.status == 302 and redirect.headers["location"] == "/plain"
        posted = await client.request("POST", base + "/echo", timeout=5, body=b"abc")
        assert posted.body == b"cba"
        assert (await client.get(base + "/close", timeout=5)).body == b"bye"
        assert (await client.get(base + "/plain", timeout=5)).body == b"plain body"
    finally:
        await client.close()


async def test_client_keeps_connections_alive_and_bounds_what_it_reads(
    upstream: dict[str, str],
) -> None:
    base = upstream["http"]
    client = Client()
    try:
        _Handler.seen.clear()
        for _ in range(5):
            await client.get(base + "/plain", timeout=5)
        assert len({port for _, _, port in _Handler.seen}) == 1  # one connection for five
        with pytest.raises(TooLarge):
            await client.get(base + "/big", timeout=5, max_body=100_000)
        with pytest.raises(TooLarge):  # the decompressed size counts
            await client.get(base + "/bomb", timeout=5, max_body=1 << 20)
        with pytest.raises(HttpError):
            await client.get(base + "/cut", timeout=5)
        with pytest.raises(asyncio.TimeoutError):
            await client.get(base + "/slow", timeout=0.5)
        with pytest.raises(HttpError):
            await client.get("http://127.0.0.1:1/metrics", timeout=5)
        assert (await client.get(base + "/plain", timeout=5)).body == b"plain body"
        # a pooled connection the server closed meanwhile: sent again on a new one
        for pause in (0.2, 0.0, 0.0, 0.2, 0.0):  # its close seen already, or not yet
            got = await client.get(base + "/quiet-close", timeout=5)
            assert got.body == b"then closed"
            await asyncio.sleep(pause)
    finally:
        await client.close()


async def test_client_speaks_tls_and_sends_credentials(upstream: dict[str, str]) -> None:
    context = ssl.create_default_context(cafile=upstream["ca"])
    client = Client(ssl_context=context)
    try:
        _Handler.seen.clear()
        https = upstream["https"].replace("https://", "https://user:p%40ss@")
        assert (await client.get(https + "/plain", timeout=5)).body == b"plain body"
        await client.get(upstream["http"] + "/plain", timeout=5,
                         headers={"Authorization": basic_auth("u", "pw")})  # fmt: skip
        sent = [auth for _, auth, _ in _Handler.seen]
        assert sent[0] == "Basic " + base64.b64encode(b"user:p@ss").decode()
        assert sent[1] == "Basic " + base64.b64encode(b"u:pw").decode()
    finally:
        await client.close()
    untrusted = Client()
    try:
        with pytest.raises(HttpError) as err:
            await untrusted.get(upstream["https"].replace("https://", "https://a:secret@")
                                + "/plain", timeout=5)  # fmt: skip
        assert "secret" not in str(err.value)
    finally:
        await untrusted.close()


async def test_client_streams_lines(upstream: dict[str, str]) -> None:
    client = Client()
    try:
        async with client.stream("GET", upstream["http"] + "/chunked", timeout=5) as resp:
            assert resp.status == 200
            lines = [line async for line in resp.lines()]
        assert lines == [b"hello chunked world"]
    finally:
        await client.close()
