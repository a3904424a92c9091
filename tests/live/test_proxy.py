"""The measuring proxy (issue 30): what it measures, that it never breaks traffic, its
settings, and the agent exporting its figures under the contract's names.

The worker behind the proxy is ``tests/support/sseupstream.py``, a synthetic
OpenAI-compatible server (the real llama-server is in test_proxy_llamacpp.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import select
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import psutil
import pytest
import yaml
from tests.support.attack import start_agent
from tests.support.proc import REPO, Process, free_port, http_get, inferwatch_cmd, wait_until
from tests.support.sseupstream import Upstream

from inferwatch.agent.config import ProxySpec, WorkerSpec, load_config
from inferwatch.agent.proxy import (
    MAX_MODELS,
    TPOT_BUCKETS,
    TTFT_BUCKETS,
    UNANNOUNCED_IDLE_S,
    ProxyServer,
    ProxyStats,
    forward_headers,
)
from inferwatch.errors import ConfigError

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


class Rig:
    def __init__(self, upstream: Upstream, server: ProxyServer, session: aiohttp.ClientSession):
        self.upstream = upstream
        self.server = server
        self.stats = server.stats
        self.session = session
        self.url = server.url
        self.direct = f"http://127.0.0.1:{upstream.port}"

    async def stream(self, path: str, **body: object) -> tuple[int, bytes]:
        doc = {"model": "m", "stream": True, **body}
        async with self.session.post(self.url + path, json=doc) as resp:
            return resp.status, await resp.read()

    async def upstream_stats(self) -> dict[str, int]:
        async with self.session.get(self.direct + "/stats") as resp:
            return dict(await resp.json())


async def _rig(upstream: Upstream, **proxy: object) -> AsyncIterator[Rig]:
    port = await upstream.start()
    spec = ProxySpec("127.0.0.1", 0, **proxy)  # type: ignore[arg-type]
    worker = WorkerSpec(name="w", url=f"http://127.0.0.1:{port}", proxy=spec)
    server = ProxyServer(worker, spec, ProxyStats())
    await server.start()
    async with aiohttp.ClientSession() as session:
        yield Rig(upstream, server, session)
    await server.stop()
    await upstream.stop()


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    async for r in _rig(Upstream(first=0.06, interval=0.02)):
        yield r


async def test_streams_and_plain_answers_are_measured(rig: Rig) -> None:
    status, body = await rig.stream(CHAT, max_tokens=5, stream_options={"include_usage": True})
    assert status == 200 and body.count(b"data: ") == 9  # role, 5 tokens, stop, usage, DONE
    status, body = await rig.stream(COMPLETIONS, max_tokens=4)  # no usage: events counted
    assert status == 200
    async with rig.session.post(rig.url + COMPLETIONS, json={"model": "m", "max_tokens": 3}) as r:
        assert r.status == 200
        assert (await r.json())["usage"]["completion_tokens"] == 3

    m = rig.stats.models["m"]
    # TTFT only for the two streams: 60 ms of "prefill" is in the 50-75 ms bucket (or
    # the next on a busy machine), never below it
    assert sum(m.ttft.counts) == 2
    assert sum(m.ttft.counts[: TTFT_BUCKETS.index(0.05) + 1]) == 0
    # a gap between each two token events: 4 + 3; the role-only chunk is no token
    assert sum(m.tpot.counts) == 7
    assert sum(m.tpot.counts[: TPOT_BUCKETS.index(0.015) + 1]) == 0
    assert sum(m.e2e.counts) == 3
    assert m.prompt_tokens == 7 + 7  # the usage of the chat stream and of the JSON answer
    assert m.generation_tokens == 5 + 4 + 3
    assert m.requests == {"2xx": 3} and m.aborts == 0


async def test_other_paths_pass_through_untouched_and_unmeasured(rig: Rig) -> None:
    direct = await (await rig.session.get(rig.direct + "/metrics")).read()
    async with rig.session.get(rig.url + "/metrics") as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        assert await resp.read() == direct
    async with rig.session.get(rig.url + "/nowhere?x=1") as resp:
        assert resp.status == 404
    # a GET of a measured path is not a completion
    async with rig.session.get(rig.url + CHAT) as resp:
        assert resp.status == 404
    assert rig.stats.models == {}


async def test_headers_pass_and_hop_by_hop_ones_do_not(rig: Rig) -> None:
    headers = {
        "Authorization": "Bearer sk-secret",
        "X-Request-Id": "abc",
        "Connection": "keep-alive, X-Private",
        "X-Private": "hop",
        "Keep-Alive": "timeout=5",
        "Proxy-Authorization": "Basic eA==",
    }
    async with rig.session.get(rig.url + "/stats", headers=headers) as resp:
        seen = (await resp.json())["headers"]
    assert seen["authorization"] == "Bearer sk-secret"
    assert seen["x-request-id"] == "abc"
    for name in ("x-private", "keep-alive", "proxy-authorization"):
        assert name not in seen
    assert seen["host"] == f"127.0.0.1:{rig.upstream.port}"
    # the answer's headers come back (the event stream's Cache-Control among them)
    async with rig.session.post(rig.url + CHAT, json={"stream": True, "max_tokens": 1}) as resp:
        assert resp.headers["Cache-Control"] == "no-cache"
        assert resp.headers["Content-Type"] == "text/event-stream"
        await resp.read()


async def test_expect_100_continue_is_answered_by_the_proxy(rig: Rig) -> None:
    body = json.dumps({"model": "m", "max_tokens": 1, "prompt": "x" * 5000}).encode()
    async with rig.session.post(
        rig.url + COMPLETIONS, data=body, expect100=True,
        headers={"Content-Type": "application/json"},
    ) as resp:  # fmt: skip
        assert resp.status == 200
        assert (await resp.json())["usage"]["completion_tokens"] == 1
    async with rig.session.get(rig.url + "/stats", headers={"Expect": "100-continue"}) as resp:
        assert "expect" not in (await resp.json())["headers"]


def test_forward_headers_drops_what_connection_names() -> None:
    given = [("Connection", "close, X-A"), ("X-A", "1"), ("TE", "trailers"),
             ("Upgrade", "h2c"), ("Cookie", "a=1"), ("Host", "h"), ("X-B", "2")]  # fmt: skip
    assert forward_headers(given) == [("Cookie", "a=1"), ("X-B", "2")]


async def test_a_client_abort_cancels_the_upstream_request(rig: Rig) -> None:
    async with rig.session.post(
        rig.url + CHAT, json={"stream": True, "max_tokens": 500, "x_interval": 0.02}
    ) as resp:
        await resp.content.readline()
        resp.connection.transport.abort()  # type: ignore[union-attr]  # the client is gone
    await wait_for(lambda: rig.upstream.cancelled == 1 and rig.stats.in_flight == 0, 5)
    assert rig.upstream.streams == 0 and rig.upstream.completed == 0
    m = rig.stats.models["synthetic"]  # the model the answer named
    assert m.aborts == 1 and sum(m.e2e.counts) == 0  # no end-to-end of an abandoned answer


async def wait_for(cond: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return True
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")


@pytest.fixture
async def small_rig() -> AsyncIterator[Rig]:
    async for r in _rig(Upstream(), max_body_bytes=1000, read_timeout=0.5):
        yield r


async def test_body_limit_refuses_with_413_declared_or_streamed(small_rig: Rig) -> None:
    rig = small_rig
    big = {"model": "m", "prompt": "x" * 2000}
    async with rig.session.post(rig.url + COMPLETIONS, json=big) as resp:
        assert resp.status == 413

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(20):
            yield b"x" * 100

    async with rig.session.post(rig.url + COMPLETIONS, data=chunks()) as resp:  # chunked
        assert resp.status == 413
    assert rig.stats.rejected["too_large"] == 2
    # a body under the limit still passes
    async with rig.session.post(rig.url + COMPLETIONS, json={"max_tokens": 1}) as resp:
        assert resp.status == 200


async def test_a_hanging_worker_times_out_and_holds_only_its_own_clients(small_rig: Rig) -> None:
    rig = small_rig
    other_up = Upstream(interval=0.005)
    async for other in _rig(other_up):
        hung = asyncio.ensure_future(rig.session.get(rig.url + "/hang"))
        started = time.monotonic()
        # while the hung request waits, the same proxy and another worker's proxy serve
        status, _ = await other.stream(CHAT, max_tokens=3)
        assert status == 200
        async with rig.session.get(rig.url + "/stats") as resp:
            assert resp.status == 200
        resp = await hung
        assert resp.status == 504
        assert time.monotonic() - started < 5
        assert rig.stats.upstream_errors["timeout"] == 1
    # a completion the worker stays silent on: 504 after read_timeout, counted as a 5xx
    async with rig.session.post(rig.url + COMPLETIONS, json={"model": "m", "x_first": 3}) as resp:
        assert resp.status == 504
    assert rig.stats.upstream_errors["timeout"] == 2
    assert rig.stats.models[""].requests == {"5xx": 1}  # not lost from the measurements


async def test_a_client_past_the_cap_is_closed_while_every_open_one_is_busy() -> None:
    async for rig in _rig(Upstream(), max_connections=1, read_timeout=5.0):
        hung = asyncio.ensure_future(rig.session.get(rig.url + "/hang"))
        for _ in range(200):  # until the one connection the cap allows carries the request
            if any(conn.busy for conn in rig.server.clients.open):
                break
            await asyncio.sleep(0.01)
        host, port = rig.url.removeprefix("http://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /stats HTTP/1.1\r\nHost: x\r\n\r\n")
        # refused: closed at once without an answer, and counted; the busy one stays
        assert await asyncio.wait_for(reader.read(), 2) == b""
        writer.close()
        assert rig.server.clients.refused == 1
        assert rig.server.connections == 1
        hung.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await hung


async def test_an_unreachable_worker_is_a_502(tmp_path: Path) -> None:
    spec = ProxySpec("127.0.0.1", 0, connect_timeout=1.0)
    worker = WorkerSpec(name="w", url=f"http://127.0.0.1:{free_port()}", proxy=spec)
    server = ProxyServer(worker, spec, ProxyStats())
    await server.start()
    try:
        async with (
            aiohttp.ClientSession() as s,
            s.post(server.url + CHAT, json={"stream": True}) as resp,
        ):
            assert resp.status == 502
            assert await resp.text() == "worker unreachable\n"
        assert server.stats.upstream_errors["connect"] == 1
        assert server.stats.models[""].requests == {"5xx": 1}
    finally:
        await server.stop()


async def test_models_beyond_the_cap_drop_samples_never_requests(rig: Rig) -> None:
    for i in range(MAX_MODELS + 3):
        status, _ = await rig.stream(COMPLETIONS, model=f"model-{i}", max_tokens=1, x_first=0)
        assert status == 200
    assert len(rig.stats.models) == MAX_MODELS
    assert rig.stats.dropped == 3


async def test_no_credential_or_prompt_reaches_a_log_or_the_metrics(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secret, prompt = "sk-live-hunter2", "the secret prompt text"
    headers = {"Authorization": f"Bearer {secret}"}
    for path in (CHAT, "/hang-not", "/v1/completions?key=" + secret):
        async with rig.session.post(
            rig.url + path, json={"prompt": prompt, "stream": True, "max_tokens": 1},
            headers=headers,
        ) as resp:  # fmt: skip
            await resp.read()
    from inferwatch.agent.proxy import ProxySource

    source = ProxySource([], 1.0, lambda w: ("llamacpp", set(), frozenset()))
    source.stats["w"] = rig.stats
    source.specs["w"] = rig.server.worker
    source.servers["w"] = rig.server
    from prometheus_client import CollectorRegistry, generate_latest

    class C:
        def collect(self):  # type: ignore[no-untyped-def]
            return source.families()

    registry = CollectorRegistry()
    registry.register(C())  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    assert "inferwatch_proxy_ttft_seconds_bucket" in text
    for needle in (secret, prompt):
        assert needle not in text
        assert needle not in caplog.text


# --------------------------------------------------------------------------- settings
def _config(tmp_path: Path, proxy: object, **top: object) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(
        yaml.safe_dump({**top, "workers": [{"url": "http://127.0.0.1:8000", "proxy": proxy}]})
    )
    return str(path)


def test_settings_parse(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path, "0.0.0.0:8001"), env={})
    spec = config.workers[0].proxy
    assert spec is not None and (spec.listen_host, spec.listen_port) == ("0.0.0.0", 8001)
    config = load_config(
        _config(tmp_path, {"listen": ":8001", "read_timeout": "2m", "max_body_bytes": 1024}),
        env={},
    )
    spec = config.workers[0].proxy
    assert spec is not None and spec.read_timeout == 120 and spec.max_body_bytes == 1024


@pytest.mark.parametrize(
    ("proxy", "top", "key"),
    [
        ("8001", {}, "workers[0].proxy.listen"),
        ({"read_timeout": "1s"}, {}, "workers[0].proxy.listen"),
        ({"listen": ":8001", "buffer": 1}, {}, "workers[0].proxy.buffer"),
        ({"listen": ":8001", "read_timeout": "soon"}, {}, "workers[0].proxy.read_timeout"),
        ({"listen": ":8001", "max_body_bytes": 0}, {}, "workers[0].proxy.max_body_bytes"),
        ({"listen": ":8001", "max_connections": -1}, {}, "workers[0].proxy.max_connections"),
        (":9000", {"listen": "127.0.0.1:9000"}, "workers[0].proxy.listen"),
        (":8000", {}, "workers[0].proxy.listen"),  # the worker's own port
        (["x"], {}, "workers[0].proxy"),
    ],
)
def test_bad_settings_name_the_key(tmp_path: Path, proxy: object, top: dict, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(_config(tmp_path, proxy, **top), env={})
    assert err.value.key == key


def test_bad_settings_exit_2_with_one_line(tmp_path: Path) -> None:
    path = _config(tmp_path, {"listen": ":8001", "idle_timeout": "never"})
    result = subprocess.run(
        inferwatch_cmd("run", "--config", path, "--gpu-backend", "none"),
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "workers[0].proxy.idle_timeout" in lines[0]


def test_a_taken_proxy_port_is_refused_at_start(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        path = tmp_path / "c.yaml"
        path.write_text(yaml.safe_dump({"workers": [{
            "url": f"http://127.0.0.1:{free_port()}", "proxy": f"127.0.0.1:{port}"}]}))  # fmt: skip
        result = subprocess.run(
            inferwatch_cmd("run", "--config", str(path), "--gpu-backend", "none",
                           "--listen", f"127.0.0.1:{free_port()}"),
            capture_output=True, text=True, timeout=60, cwd=REPO,
        )  # fmt: skip
    assert result.returncode == 2
    assert "proxy.listen" in result.stderr and "cannot listen" in result.stderr


# --------------------------------------------------------------------------- the agent
def _metrics(port: int) -> str:
    return http_get(f"http://127.0.0.1:{port}/metrics", timeout=5)[1].decode()


def _upstream_process(tmp_path: Path, *args: str) -> tuple[Process, int]:
    port = free_port()
    script = REPO / "tests" / "support" / "sseupstream.py"
    proc = Process([sys.executable, str(script), "--port", str(port), *args], tmp_path / "up.log")
    wait_until(lambda: http_get(f"http://127.0.0.1:{port}/stats")[0] == 200, 30,
               message="synthetic upstream")  # fmt: skip
    return proc, port


def test_the_agent_exports_the_proxy_under_the_contract_for_llamacpp(tmp_path: Path) -> None:
    """llama.cpp has no latency histogram: the proxy's become the worker's contract
    histograms (what every rule reads), with window quantiles; the proxy's own
    families are there too."""
    up, up_port = _upstream_process(tmp_path, "--first", "0.03", "--interval", "0.01")
    proxy_port = free_port()
    config = {
        "collect_interval": "500ms",
        "stats_window": "5s",
        "gpu": {"backend": "none"},
        "workers": [{"name": "llama", "url": f"http://127.0.0.1:{up_port}",
                     "proxy": {"listen": f"127.0.0.1:{proxy_port}"}}],
    }  # fmt: skip
    agent, port = start_agent(tmp_path, config=config)
    try:
        wait_until(lambda: 'engine="llamacpp"' in _metrics(port), 30, message="engine found")

        def send(n: int) -> None:
            for _ in range(n):
                doc = {"model": "tiny", "stream": True, "max_tokens": 4}
                req = urllib.request.Request(
                    f"http://127.0.0.1:{proxy_port}{CHAT}", data=json.dumps(doc).encode(),
                    headers={"Content-Type": "application/json"},
                )  # fmt: skip
                with urllib.request.urlopen(req, timeout=10) as resp:
                    assert resp.status == 200 and resp.read().count(b"data: ") == 7

        # the windows start where the series first appears: a second round fills them
        send(2)
        wait_until(lambda: "inferwatch_ttft_seconds_count{" in _metrics(port), 30,
                   message="the proxy's series")  # fmt: skip
        send(3)
        text = wait_until(
            lambda: t if "inferwatch_ttft_quantile_seconds{" in (t := _metrics(port)) else None,
            30,
            message="quantiles from the proxy's buckets",
        )
        labels = 'engine="llamacpp",model="tiny"'
        worker = 'worker="llama"'
        assert f"inferwatch_ttft_seconds_count{{{labels},{worker}}} 5.0" in text
        assert f"inferwatch_tpot_seconds_count{{{labels},{worker}}} 15.0" in text
        assert f"inferwatch_e2e_latency_seconds_count{{{labels},{worker}}} 5.0" in text
        assert f"inferwatch_proxy_ttft_seconds_count{{{labels},{worker}}} 5.0" in text
        assert (
            f'inferwatch_proxy_requests_total{{{labels},status_class="2xx",{worker}}} 5.0' in text
        )
        # the engine's own token counters stay the contract's (it has them)
        assert f"inferwatch_proxy_generation_tokens_total{{{labels},{worker}}} 20.0" in text
        assert 'inferwatch_generation_tokens_total{engine="llamacpp",model=""' in text
        for family in ("ttft", "tpot", "e2e_latency"):
            assert (
                f'inferwatch_{family}_quantile_seconds{{{labels},quantile="0.99",{worker}}}' in text
            )
    finally:
        agent.stop()
        up.stop()


@pytest.mark.slow
def test_soak_1000_concurrent_streams_memory_held(tmp_path: Path) -> None:
    """Three rounds of 1,000 concurrent streams through the agent (bounded: 40 tokens at
    50 ms each per stream, a 120 s deadline): every stream whole, and the agent's
    resident memory after the third round within 32 MiB of the first's."""
    up, up_port = _upstream_process(tmp_path, "--interval", "0.05")
    proxy_port = free_port()
    config = {
        "gpu": {"backend": "none"},
        "workers": [{"name": "w", "url": f"http://127.0.0.1:{up_port}",
                     "proxy": {"listen": f"127.0.0.1:{proxy_port}", "max_connections": 2000}}],
    }  # fmt: skip
    agent, port = start_agent(tmp_path, config=config)
    rss: list[float] = []
    try:

        async def one(session: aiohttp.ClientSession) -> int:
            doc = {"stream": True, "max_tokens": 40}
            async with session.post(f"http://127.0.0.1:{proxy_port}{CHAT}", json=doc) as resp:
                return (await resp.read()).count(b'"content":"x "')

        async def rounds() -> None:
            conn = aiohttp.TCPConnector(limit=0)
            timeout = aiohttp.ClientTimeout(total=120)
            async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
                for _ in range(3):
                    tokens = await asyncio.gather(*(one(session) for _ in range(1000)))
                    assert tokens == [40] * 1000
                    rss.append(psutil.Process(agent.popen.pid).memory_info().rss / 2**20)

        asyncio.run(asyncio.wait_for(rounds(), 240))
        print(f"agent RSS after each round of 1,000 streams: {[round(r, 1) for r in rss]} MiB")
        assert rss[-1] - rss[0] < 32, rss
        done = (
            'inferwatch_proxy_requests_total{engine="llamacpp",model="synthetic",'
            'status_class="2xx",worker="w"} 3000.0'
        )
        # the exposition is rebuilt at the next collection after the last stream ends
        wait_until(lambda: done in _metrics(port), timeout=30, message="3,000 requests counted")
        assert 'inferwatch_proxy_requests_in_flight{worker="w"} 0.0' in _metrics(port)
    finally:
        agent.stop()
        up.stop()


class _DropsKeptAlive:
    """A worker that answers one request per connection and drops the connection when
    the next request comes (plain blocking sockets, one thread per connection).

    ``unread``: it closes with that request's bytes unread, so its kernel resets the
    connection, as any worker that closes an idle connection just as a request is sent
    on it (llama-server after a streamed answer, uvicorn's idle time-out) is seen;
    otherwise it reads the whole request first, as a worker that got the request and
    died before answering."""

    def __init__(self, unread: bool = True) -> None:
        self.unread = unread
        self.answered = 0
        #: requests that came on a connection the worker then dropped
        self.dropped = 0
        self.lock = threading.Lock()
        self.server: socket.socket | None = None

    async def start(self) -> int:
        srv = self.server = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()
        return int(srv.getsockname()[1])

    def close(self) -> None:
        if self.server is not None:
            self.server.close()

    def _accept(self) -> None:
        assert self.server is not None
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._conn, args=(conn,), daemon=True).start()

    def _read_request(self, conn: socket.socket, buf: bytes) -> bytes:
        while b"\r\n\r\n" not in buf:
            chunk = conn.recv(65536)
            if not chunk:
                raise ConnectionError
            buf += chunk
        head, _, rest = buf.partition(b"\r\n\r\n")
        length = 0
        for line in head.decode("latin-1").split("\r\n"):
            if line.lower().startswith("content-length:"):
                length = int(line.split(":", 1)[1])
        while len(rest) < length:
            chunk = conn.recv(65536)
            if not chunk:
                raise ConnectionError
            rest += chunk
        return rest[length:]

    def _conn(self, conn: socket.socket) -> None:
        with conn:
            try:
                left = self._read_request(conn, b"")
                body = b'{"model":"m","choices":[{"text":"hi","finish_reason":"stop"}]}'
                with self.lock:  # counted before the client can see the answer
                    self.answered += 1
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                if self.unread:
                    select.select([conn], [], [], 30)  # the next request is there: unread
                    if not conn.recv(1, socket.MSG_PEEK):
                        return  # the proxy closed it: no request came
                else:
                    self._read_request(conn, left)
                with self.lock:  # counted before the close the proxy sees
                    self.dropped += 1
            except (ConnectionError, OSError):
                pass


@contextlib.asynccontextmanager
async def _proxy_before(worker: _DropsKeptAlive) -> AsyncIterator[ProxyServer]:
    """The proxy in front of ``worker`` (started here), both stopped after."""
    port = await worker.start()
    spec = ProxySpec("127.0.0.1", 0)
    server = ProxyServer(
        WorkerSpec(name="w", url=f"http://127.0.0.1:{port}", proxy=spec), spec, ProxyStats()
    )
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
        worker.close()


async def test_a_worker_that_drops_kept_alive_connections_fails_no_request() -> None:
    """Each reused connection is closed by the worker with the request unread: every
    completion goes again on a fresh connection, counted as a retry, none fails."""
    worker = _DropsKeptAlive(unread=True)
    statuses = []
    async with _proxy_before(worker) as server, aiohttp.ClientSession() as session:
        for _ in range(20):
            async with session.post(
                server.url + COMPLETIONS, json={"model": "m", "prompt": "x"}
            ) as resp:
                await resp.read()
                statuses.append(resp.status)
    assert statuses == [200] * 20
    assert worker.answered == 20 and worker.dropped == 19
    assert server.stats.retries["closed"] == 19
    assert server.stats.upstream_errors["reset"] == 0
    assert server.stats.models["m"].requests == {"2xx": 20}  # none lost from the measurements


async def test_a_completion_the_worker_may_have_read_is_never_sent_twice() -> None:
    """A worker that read the request and then closed without a byte of an answer may
    have begun it: a completion gets a 502 (counted), never a second send; a GET, which
    may be sent twice, goes once more."""
    worker = _DropsKeptAlive(unread=False)
    async with _proxy_before(worker) as server, aiohttp.ClientSession() as session:
        statuses = []
        for _ in range(2):
            async with session.post(
                server.url + COMPLETIONS, json={"model": "m", "prompt": "x"}
            ) as resp:
                await resp.read()
                statuses.append(resp.status)
        assert statuses == [200, 502]
        assert worker.answered == 1 and worker.dropped == 1  # the second one seen once
        assert server.stats.upstream_errors["reset"] == 1
        assert server.stats.retries["closed"] == 0
        # the 502 counted (under no model: no answer named one)
        assert server.stats.models["m"].requests == {"2xx": 1}
        assert server.stats.models[""].requests == {"5xx": 1}
        async with session.get(server.url + "/health") as resp:  # a fresh connection
            assert resp.status == 200
        async with session.get(server.url + "/health") as resp:  # reused, read, dropped
            assert resp.status == 200
        assert server.stats.retries["closed"] == 1


# --------------------------------------------------------------------------- the wire
@pytest.fixture
async def keep_rig() -> AsyncIterator[Rig]:
    async for r in _rig(Upstream(interval=0.002, keep_alive=1.0)):
        yield r


async def test_connections_to_a_worker_that_announces_keep_alive_are_reused(
    keep_rig: Rig,
) -> None:
    """llama-server announces ``Keep-Alive: timeout=5, max=100``: completions share a
    connection while it is idle for less than half of that, never past it."""
    rig = keep_rig
    for _ in range(5):
        status, body = await rig.stream(COMPLETIONS, max_tokens=3)
        assert status == 200 and body.count(b"data: ") == 5
    assert rig.upstream.connections == 1
    await asyncio.sleep(0.7)  # past half the announced second: a fresh connection
    status, _ = await rig.stream(COMPLETIONS, max_tokens=1)
    assert status == 200 and rig.upstream.connections == 2
    assert sum(rig.stats.models["m"].ttft.counts) == 6


async def test_connections_to_a_worker_that_announces_nothing_are_reused_within_2_s(
    rig: Rig,
) -> None:
    """vLLM's and SGLang's uvicorn announce no keep-alive and close a connection idle
    for 5 s: every request may reuse one idle for less than 2 s (UNANNOUNCED_IDLE_S),
    since one the worker closed unread goes again on a fresh connection."""
    for _ in range(3):
        status, _ = await rig.stream(COMPLETIONS, max_tokens=1, x_first=0)
        assert status == 200
    for _ in range(3):
        async with rig.session.get(rig.url + "/metrics") as resp:
            assert resp.status == 200
            await resp.read()
    assert rig.upstream.connections == 1
    await asyncio.sleep(UNANNOUNCED_IDLE_S + 0.2)
    status, _ = await rig.stream(COMPLETIONS, max_tokens=1, x_first=0)
    assert status == 200 and rig.upstream.connections == 2


async def test_a_worker_that_closes_after_each_stream_is_learned_and_fails_nothing() -> None:
    """llama-server closes the connection after every streamed answer, unannounced:
    the proxy learns it from the first close and keeps no connection after a stream
    (plain answers' connections are still reused); no request fails."""
    async for rig in _rig(Upstream(interval=0.001, keep_alive=5.0, close_after_stream=True)):
        statuses = []
        for i in range(20):
            status, _ = await rig.stream(COMPLETIONS, max_tokens=2, stream=i % 2 == 0)
            statuses.append(status)
            await asyncio.sleep(0.01)
        assert statuses == [200] * 20
        assert rig.server.closes_after_stream
        assert rig.stats.upstream_errors["reset"] == 0
        assert rig.stats.retries["closed"] <= 1  # at most the one that taught it
        # 10 streams, each on a connection of its own; the plain answers reuse one
        assert 10 <= rig.upstream.connections <= 11
        assert rig.stats.models["m"].requests == {"2xx": 20}


async def test_a_restarting_worker_gets_the_request_when_it_listens_again() -> None:
    """A refused connect sent nothing: it is tried again (counted) until the worker
    listens again, within connect_timeout; past it, 502 worker unreachable."""
    up = Upstream(interval=0.001)
    port = free_port()
    spec = ProxySpec("127.0.0.1", 0, connect_timeout=3.0)
    server = ProxyServer(WorkerSpec(name="w", url=f"http://127.0.0.1:{port}", proxy=spec),
                         spec, ProxyStats())  # fmt: skip
    await server.start()
    try:
        async with aiohttp.ClientSession() as session:

            async def later() -> None:
                await asyncio.sleep(0.6)
                await up.start(port=port)

            starter = asyncio.ensure_future(later())
            async with session.post(server.url + CHAT, json={"stream": True}) as resp:
                assert resp.status == 200 and (await resp.read()).endswith(b"[DONE]\n\n")
            await starter
            assert server.stats.retries["refused"] >= 3
            assert server.stats.upstream_errors["connect"] == 0
    finally:
        await server.stop()
        await up.stop()


async def _raw(url: str, data: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(data)
    try:
        return await asyncio.wait_for(reader.read(-1), 10)
    finally:
        writer.close()


async def test_an_http10_client_gets_the_stream_unchunked_then_the_close(rig: Rig) -> None:
    body = json.dumps({"model": "m", "stream": True, "max_tokens": 2, "x_first": 0}).encode()
    answer = await _raw(rig.url, b"POST /v1/completions HTTP/1.0\r\nContent-Length: %d\r\n"
                        b"\r\n%s" % (len(body), body))  # fmt: skip
    head, _, rest = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"Connection: close" in head
    assert b"Transfer-Encoding" not in head
    assert rest.startswith(b"data: ") and rest.endswith(b"data: [DONE]\n\n")
    assert sum(rig.stats.models["m"].ttft.counts) == 1


async def test_pipelined_requests_are_answered_in_order(rig: Rig) -> None:
    answer = await _raw(rig.url, b"GET /stats HTTP/1.1\r\nHost: x\r\n\r\n"
                        b"GET /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")  # fmt: skip
    first = answer.index(b"HTTP/1.1 200")
    assert answer.index(b"HTTP/1.1 404") > first


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        # a body framed twice: the request smuggling that RFC 9112 6.1 forbids passing
        (b"POST /v1/completions HTTP/1.1\r\nContent-Length: 3\r\n"
         b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", b"400"),
        (b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", b"501"),
        (b"GET /stats HTTP/1.1\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n", b"431"),
        (b"GET /stats HTTP/2.0\r\n\r\n", b"505"),
        (b"GET http://elsewhere/ HTTP/1.1\r\n\r\n", b"400"),
        (b"GET /stats HTTP/1.1\r\n folded: x\r\n\r\n", b"400"),
    ],
)  # fmt: skip
async def test_malformed_requests_are_refused_not_passed(
    rig: Rig, request_bytes: bytes, status: bytes
) -> None:
    answer = await _raw(rig.url, request_bytes)
    assert answer.startswith(b"HTTP/1.1 " + status), answer[:80]
    assert rig.upstream.connections == 0


def test_the_proxy_runs_on_uvloop_too() -> None:
    """``inferwatch[fast]``: the agent runs on uvloop where it is installed."""
    uvloop = pytest.importorskip("uvloop")

    async def main() -> tuple[int, bytes, int]:
        seen = (0, b"", 0)
        async for rig in _rig(Upstream(interval=0.002, keep_alive=5.0)):
            for _ in range(3):
                status, body = await rig.stream(CHAT, max_tokens=4)
            seen = (status, body, sum(rig.stats.models["m"].tpot.counts))
        return seen  # the rig stopped

    status, body, gaps = uvloop.run(main())
    assert status == 200 and body.count(b"data: ") == 7 and gaps == 9


async def test_a_slow_client_pauses_the_worker_and_the_connection_is_reused_after() -> None:
    """Back-pressure: a client that reads slowly pauses the read from the worker (the
    proxy holds no more than its buffers); the answer arrives whole, and the worker's
    connection then serves the next request (a connection still paused for the last
    client's sake is resumed before it is pooled)."""
    async for rig in _rig(Upstream(keep_alive=5.0)):
        await _slow_client_then_another(rig)


async def _slow_client_then_another(rig: Rig) -> None:
    n = 1_000_000  # a 2 MB JSON answer
    body = json.dumps({"model": "m", "max_tokens": n, "x_interval": 0}).encode()
    host, port = rig.url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, (host, int(port)))
    await loop.sock_sendall(sock, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                            b"%d\r\nConnection: close\r\n\r\n%s" % (len(body), body))  # fmt: skip
    await asyncio.sleep(0.5)  # the answer waits in the proxy's and the kernel's buffers
    got = bytearray()
    while chunk := await asyncio.wait_for(loop.sock_recv(sock, 65536), 10):
        got += chunk
        await asyncio.sleep(0)
    sock.close()
    head, _, answer = bytes(got).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert json.loads(answer)["usage"]["completion_tokens"] == n
    status, data = await rig.stream(COMPLETIONS, max_tokens=2)
    assert status == 200 and data.endswith(b"data: [DONE]\n\n")
    assert rig.upstream.connections == 1
    # both measured (the 2 MB answer, past the 1 MiB read for its usage, under no model)
    assert sum(m.requests.get("2xx", 0) for m in rig.stats.models.values()) == 2


async def test_a_get_on_a_connection_the_worker_dropped_is_sent_once_more() -> None:
    """A GET on a kept-alive connection that the worker drops instead of answering goes
    once more on a new connection, whether or not the worker read it (a GET may be
    sent twice)."""
    for unread in (True, False):
        worker = _DropsKeptAlive(unread=unread)
        statuses = []
        async with _proxy_before(worker) as server, aiohttp.ClientSession() as session:
            for _ in range(5):
                async with session.get(server.url + "/health") as resp:
                    await resp.read()
                    statuses.append(resp.status)
        assert statuses == [200] * 5
        assert worker.answered == 5 and worker.dropped == 4  # each reuse dropped, each resent
        assert server.stats.upstream_errors["reset"] == 0
        assert server.stats.retries["closed"] == 4


async def test_half_closed_connections_get_their_whole_answer(rig: Rig) -> None:
    """A client that half-closes after its request still reads the whole streamed
    answer, then the close; a worker that ends its answer by closing (no length, not
    chunked) gets it passed whole, and the client's connection closed after."""
    body = json.dumps({"model": "m", "stream": True, "max_tokens": 5, "x_first": 0}).encode()
    host, port = rig.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                 % (len(body), body))  # fmt: skip
    writer.write_eof()  # half-closed: nothing more from this client
    answer = await asyncio.wait_for(reader.read(-1), 10)  # read to the proxy's close
    writer.close()
    head, _, rest = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and rest.endswith(b"0\r\n\r\n")
    assert rest.count(b"data: ") == 7  # 5 tokens, the stop event, [DONE]
    await wait_for(lambda: rig.stats.in_flight == 0, 5)
    assert rig.stats.models["m"].requests == {"2xx": 1} and rig.stats.models["m"].aborts == 0

    # the worker's side: an answer framed by the worker's close
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n'
                         b'{"model":"w","choices":[{"text":"hi","finish_reason":"stop"}]}')  # fmt: skip
            conn.shutdown(socket.SHUT_WR)  # the answer's end
            conn.recv(1)

    threading.Thread(target=serve, daemon=True).start()
    spec = ProxySpec("127.0.0.1", 0)
    port = srv.getsockname()[1]
    server = ProxyServer(WorkerSpec(name="w", url=f"http://127.0.0.1:{port}", proxy=spec),
                         spec, ProxyStats())  # fmt: skip
    await server.start()
    try:
        answer = await _raw(server.url, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                            b"Content-Length: 2\r\n\r\n{}")  # fmt: skip
        head, _, rest = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and b"Connection: close" in head
        assert json.loads(rest)["choices"][0]["text"] == "hi"
        assert server.stats.models["w"].requests == {"2xx": 1}
    finally:
        await server.stop()
        srv.close()
