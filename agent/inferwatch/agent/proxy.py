"""The measuring proxy: latency as the users feel it, for every engine (docs/proxy.md).

A worker with ``proxy: {listen: HOST:PORT}`` gets a listener of its own. Every
request on it is forwarded to the worker's base URL as it arrives, and the
answer is forwarded back chunk by chunk, never buffered whole. On the way, an
OpenAI-compatible ``POST /v1/completions`` or ``/v1/chat/completions`` is
measured:

- TTFT: from the request's arrival to the first server-sent event that carries
  generated text (a streamed answer only; a plain JSON answer has no first
  token the client could see before the last);
- TPOT: each gap between two such events;
- end to end: arrival to the answer's last byte;
- prompt and generation tokens from the answer's ``usage`` (a stream's last
  chunk when the client asked for it), else the count of token events;
- the status class, and client aborts (the client went away before the end).

Every other path passes through untouched and unmeasured.

Never break traffic: the measurement never awaits anything (a few counter
increments per event); a series over the per-worker model cap drops its
samples, never the request; a body over ``max_body_bytes`` is refused with 413
while it streams; a client that goes away cancels the upstream request (its
connection is closed); the worker's silence is bounded by ``read_timeout``;
each worker has its own listener, connection cap and upstream pool, so a hung
worker holds only its own clients. Nothing of a request's content, headers or
credentials reaches a log line, a label or an error answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import time
from bisect import bisect_left
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString
from yarl import URL

from inferwatch.agent.collectors.base import Source
from inferwatch.agent.config import ProxySpec, WorkerSpec
from inferwatch.agent.connguard import ConnectionGuard, GuardedProtocol
from inferwatch.engines.mapping import Histogram
from inferwatch.engines.proxy import E2E_BUCKETS, TPOT_BUCKETS, TTFT_BUCKETS
from inferwatch.errors import UsageError

log = logging.getLogger(__name__)

#: the measured endpoints (POST); any other request passes through unmeasured
MEASURED_PATHS = frozenset({"/v1/completions", "/v1/chat/completions"})

#: contract histogram -> the proxy's family of the same measurement
PROXY_HISTOGRAMS = {
    "inferwatch_ttft_seconds": "inferwatch_proxy_ttft_seconds",
    "inferwatch_tpot_seconds": "inferwatch_proxy_tpot_seconds",
    "inferwatch_e2e_latency_seconds": "inferwatch_proxy_e2e_latency_seconds",
}
#: contract counter -> the proxy's
PROXY_COUNTERS = {
    "inferwatch_prompt_tokens": "inferwatch_proxy_prompt_tokens",
    "inferwatch_generation_tokens": "inferwatch_proxy_generation_tokens",
}
#: a finish reason outside these is counted as "other" (a label value from the answer)
FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"})

#: distinct model labels per worker; samples of further ones are dropped and counted
MAX_MODELS = 16
#: a model name longer than this is not a label value (it is dropped with its samples)
MAX_MODEL_CHARS = 128
#: one server-sent event line longer than this ends the measurement of that answer
#: (the answer still passes); bounds the parser's memory per connection
MAX_EVENT_BYTES = 256 * 1024
#: a plain JSON answer is read for its usage only up to this size
MAX_JSON_BYTES = 1024 * 1024

UPSTREAM_ERRORS = ("connect", "timeout", "reset")
REJECT_REASONS = ("too_large",)

#: RFC 9110 7.6.1: connection-specific headers, never forwarded
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)

HELP = {
    "inferwatch_proxy_ttft_seconds": (
        "Time to first token as the proxy's clients saw it: request received to the first "
        "server-sent event carrying generated text (streamed answers)."
    ),
    "inferwatch_proxy_tpot_seconds": (
        "Time per output token as the proxy's clients saw it: each gap between two token events."
    ),
    "inferwatch_proxy_e2e_latency_seconds": (
        "End-to-end latency as the proxy's clients saw it: request received to the answer's "
        "last byte (answers the client read to the end)."
    ),
    "inferwatch_proxy_prompt_tokens": "Prompt tokens of proxied answers (their usage).",
    "inferwatch_proxy_generation_tokens": (
        "Generated tokens of proxied answers (their usage, else the token events counted)."
    ),
    "inferwatch_proxy_requests": (
        "Measured requests through the proxy, by the status class the client got."
    ),
    "inferwatch_proxy_client_aborts": (
        "Measured requests whose client went away before the answer's end (the upstream "
        "request is cancelled)."
    ),
    "inferwatch_proxy_upstream_errors": (
        "Requests the worker failed: connect (502), timeout (504 or a cut stream), reset."
    ),
    "inferwatch_proxy_rejected": "Requests the proxy refused itself, by reason (too_large: 413).",
    "inferwatch_proxy_samples_dropped": (
        "Measured requests whose figures were dropped (never the requests themselves): "
        "a model beyond the per-worker cap."
    ),
    "inferwatch_proxy_connections": "Client connections open on the proxy.",
    "inferwatch_proxy_requests_in_flight": "Requests the proxy is forwarding now.",
}


# --------------------------------------------------------------------------- measurements
class Buckets:
    """A histogram being filled: per-bucket counts (the last one is +Inf) and the sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def add(self, other: Buckets) -> None:
        for i, c in enumerate(other.counts):
            self.counts[i] += c
        self.sum += other.sum

    def snapshot(self) -> Histogram:
        cumulative: list[float] = []
        total = 0
        for c in self.counts:
            total += c
            cumulative.append(float(total))
        return Histogram((*self.bounds, float("inf")), tuple(cumulative), self.sum)


@dataclass
class ModelStats:
    """One (worker, model)'s measurements since the agent started (cumulative)."""

    ttft: Buckets = field(default_factory=lambda: Buckets(TTFT_BUCKETS))
    tpot: Buckets = field(default_factory=lambda: Buckets(TPOT_BUCKETS))
    e2e: Buckets = field(default_factory=lambda: Buckets(E2E_BUCKETS))
    prompt_tokens: int = 0
    generation_tokens: int = 0
    #: status class ("2xx", ...) -> requests
    requests: dict[str, int] = field(default_factory=dict)
    aborts: int = 0
    #: finish reason (stop, length, abort, error, ...) -> requests; the contract's
    #: requests_finished for engines without one (llama.cpp)
    finished: dict[str, int] = field(default_factory=dict)

    def histogram(self, target: str) -> Buckets:
        if target == "inferwatch_ttft_seconds":
            return self.ttft
        if target == "inferwatch_tpot_seconds":
            return self.tpot
        return self.e2e

    def counter(self, target: str) -> int:
        return (
            self.prompt_tokens if target == "inferwatch_prompt_tokens" else self.generation_tokens
        )


class ProxyStats:
    """Everything one worker's proxy measured; read by :class:`ProxySource`."""

    def __init__(self) -> None:
        self.models: dict[str, ModelStats] = {}
        self.dropped = 0
        self.upstream_errors = dict.fromkeys(UPSTREAM_ERRORS, 0)
        self.rejected = dict.fromkeys(REJECT_REASONS, 0)
        self.in_flight = 0

    def series(self, model: str) -> ModelStats | None:
        """The model's stats, None (the sample dropped and counted) beyond the cap."""
        stats = self.models.get(model)
        if stats is None:
            if len(self.models) >= MAX_MODELS or len(model) > MAX_MODEL_CHARS:
                self.dropped += 1
                return None
            stats = self.models[model] = ModelStats()
        return stats


def _has_text(choice: object) -> bool:
    """Whether one choice of an OpenAI chunk carries generated output."""
    if not isinstance(choice, dict):
        return False
    if choice.get("text"):
        return True
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return bool(
            delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls")
        )
    return False


_EMPTY = (b'"text":""', b'"text": ""', b'"content":""', b'"content": ""')


def _plain_token(payload: bytes) -> bool:
    """An OpenAI chunk still generating: its finish reason null, no usage and no empty
    text in it (a token whose text is not yet whole UTF-8 comes empty: parsed instead)."""
    return (
        (b'"finish_reason":null' in payload or b'"finish_reason": null' in payload)
        and b'"usage"' not in payload
        and not any(e in payload for e in _EMPTY)
    )


class Measure:
    """One measured request: fed the answer's chunks as they pass."""

    __slots__ = (
        "_broken",
        "_json",
        "_looked",
        "_pending",
        "_series",
        "events",
        "finish_reason",
        "first",
        "last",
        "model",
        "started",
        "stats",
        "stream",
        "usage_generation",
        "usage_prompt",
    )  # fmt: skip

    def __init__(self, stats: ProxyStats, started: float) -> None:
        self.stats = stats
        self.started = started
        self.stream = False
        self.model: str | None = None
        self.first: float | None = None
        self.last: float | None = None
        self.events = 0
        self.usage_prompt: int | None = None
        self.usage_generation: int | None = None
        self.finish_reason: str | None = None
        self._pending = b""
        self._broken = False
        self._json: bytearray | None = None
        self._series: ModelStats | None = None
        self._looked = False

    def answer(self, content_type: str, content_encoding: str) -> None:
        """The answer's head: a server-sent event stream is parsed as it passes, a JSON
        body for its usage at the end; a compressed body is not read (end to end only)."""
        if content_encoding not in ("", "identity"):
            self._broken = True
            return
        ctype = content_type.split(";", 1)[0].strip().lower()
        if ctype == "text/event-stream":
            self.stream = True
        elif ctype == "application/json":
            self._json = bytearray()
        else:
            self._broken = True

    def feed(self, chunk: bytes, now: float) -> None:
        if self._broken:
            return
        if not self.stream:
            buf = self._json
            if buf is not None:
                if len(buf) + len(chunk) > MAX_JSON_BYTES:
                    self._json = None
                else:
                    buf += chunk
            return
        data = self._pending + chunk if self._pending else chunk
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                break
            if data.startswith(b"data:", start):
                self._event(data[start + 5 : end].strip(), now)
            start = end + 1
        rest = data[start:]
        if len(rest) > MAX_EVENT_BYTES:
            self._broken = True
            rest = b""
        self._pending = rest

    def _event(self, payload: bytes, now: float) -> None:
        if not payload or payload == b"[DONE]":
            return
        if self.first is not None and _plain_token(payload):
            # after the first token, a chunk still generating (no finish reason, no usage)
            # is a token event: no JSON parse for the bulk of a stream
            self.events += 1
            series = self._series_now()
            if series is not None and self.last is not None:
                series.tpot.observe(now - self.last)
            self.last = now
            return
        try:
            obj = json.loads(payload)
        except ValueError:
            return
        if not isinstance(obj, dict):
            return
        self._facts(obj)
        choices = obj.get("choices")
        if isinstance(choices, list) and any(_has_text(c) for c in choices):
            self.events += 1
            series = self._series_now()
            if self.first is None:
                self.first = now
                if series is not None:
                    series.ttft.observe(now - self.started)
            elif series is not None and self.last is not None:
                series.tpot.observe(now - self.last)
            self.last = now

    def _facts(self, obj: dict[str, object]) -> None:
        if self.model is None and isinstance(obj.get("model"), str):
            self.model = str(obj["model"])
        choices = obj.get("choices")
        if self.finish_reason is None and isinstance(choices, list):
            for choice in choices:
                reason = choice.get("finish_reason") if isinstance(choice, dict) else None
                if isinstance(reason, str) and reason:
                    self.finish_reason = reason if reason in FINISH_REASONS else "other"
                    break
        usage = obj.get("usage")
        if isinstance(usage, dict):
            prompt = usage.get("prompt_tokens")
            generated = usage.get("completion_tokens")
            if isinstance(prompt, int) and prompt >= 0:
                self.usage_prompt = prompt
            if isinstance(generated, int) and generated >= 0:
                self.usage_generation = generated

    def _series_now(self) -> ModelStats | None:
        """The request's series, looked up once (a dropped request counts once)."""
        if not self._looked:
            self._series = self.stats.series(self.model or "")
            self._looked = True
        return self._series

    def finish(self, status: int, now: float, *, aborted: bool) -> None:
        """Record the request's end: the client read the answer to its end, or went away."""
        if self._json is not None and not aborted:
            try:
                obj = json.loads(bytes(self._json))
            except ValueError:
                obj = None
            if isinstance(obj, dict):
                self._facts(obj)
        self._json = None
        series = self._series_now()
        if series is None:
            return
        key = f"{status // 100}xx"
        series.requests[key] = series.requests.get(key, 0) + 1
        if aborted:
            series.aborts += 1
        else:
            series.e2e.observe(now - self.started)
        # finished as the engines count them: a 4xx was refused before it started
        if aborted:
            reason: str | None = "abort"
        elif status >= 500:
            reason = "error"
        elif status < 400:
            reason = self.finish_reason or "stop"
        else:
            reason = None
        if reason is not None:
            series.finished[reason] = series.finished.get(reason, 0) + 1
        if self.usage_prompt is not None:
            series.prompt_tokens += self.usage_prompt
        generated = self.usage_generation if self.usage_generation is not None else self.events
        series.generation_tokens += generated


# --------------------------------------------------------------------------- forwarding
def forward_headers(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    """The headers to pass on: hop-by-hop ones (and those ``Connection`` names) and
    ``Host`` dropped; everything else, credentials included, as it came."""
    named = {
        token.strip().lower()
        for value in headers.getall("Connection", ())
        for token in value.split(",")
    }
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in headers.items():
        low = name.lower()
        # Expect: the proxy's own server answered "100 Continue" already
        if low in HOP_BY_HOP or low in named or low in ("host", "content-length", "expect"):
            continue
        out.add(name, value)
    return out


_SKIP_AUTO = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")


class _TooLarge(Exception):
    pass


class ProxyServer:
    """One worker's listener and its upstream pool."""

    def __init__(self, worker: WorkerSpec, spec: ProxySpec, stats: ProxyStats) -> None:
        self.worker = worker
        self.spec = spec
        self.stats = stats
        self.base = worker.url
        self.guard = ConnectionGuard(spec.max_connections, spec.header_timeout)
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self._server: asyncio.AbstractServer | None = None
        self._timeout = aiohttp.ClientTimeout(
            total=None, connect=spec.connect_timeout, sock_read=spec.read_timeout
        )
        self.url = ""

    @property
    def connections(self) -> int:
        return len(self.guard.open)

    async def start(self) -> str:
        self._session = aiohttp.ClientSession(
            # the bytes pass as the worker sent them; no cookie crosses between clients
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            # a new connection to the worker for each request, as nginx does by default:
            # llama.cpp's server drops a kept-alive connection after 5 s idle or 5
            # requests, and a request sent on a connection the worker is closing fails
            # (on an H200, 13 of 1,297 requests answered 502 with pooled connections)
            connector=aiohttp.TCPConnector(
                limit=self.spec.max_connections, limit_per_host=0, force_close=True
            ),
            timeout=self._timeout,
            # only what the client sent goes to the worker
            skip_auto_headers=_SKIP_AUTO,
        )
        app = web.Application(client_max_size=self.spec.max_body_bytes)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self._runner = web.AppRunner(
            app,
            access_log=None,
            # a client that goes away cancels its handler, and with it the upstream request
            handler_cancellation=True,
            keepalive_timeout=self.spec.idle_timeout,
            shutdown_timeout=5.0,
        )
        await self._runner.setup()
        server = self._runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(
                lambda: GuardedProtocol(server(), self.guard),
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
        port = self._server.sockets[0].getsockname()[1]
        host = self.spec.listen_host
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        self.url = f"http://{f'[{shown}]' if ':' in shown else shown}:{port}"
        return self.url

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _body(self, request: web.Request) -> AsyncIterator[bytes]:
        """The request body as it arrives, refused past ``max_body_bytes``."""
        seen = 0
        limit = self.spec.max_body_bytes
        async for chunk in request.content.iter_any():
            seen += len(chunk)
            if seen > limit:
                raise _TooLarge
            yield chunk

    async def handle(self, request: web.Request) -> web.StreamResponse:
        started = time.monotonic()
        transport = request.transport
        self.guard.request_started(transport)
        self.stats.in_flight += 1
        try:
            return await self._forward(request, started)
        finally:
            self.stats.in_flight -= 1
            self.guard.request_finished(transport)

    async def _forward(self, request: web.Request, started: float) -> web.StreamResponse:
        stats = self.stats
        length = request.content_length
        if length is not None and length > self.spec.max_body_bytes:
            stats.rejected["too_large"] += 1
            return web.Response(status=413, text="request body too large\n")
        measure = (
            Measure(stats, started)
            if request.method == "POST" and request.path in MEASURED_PATHS
            else None
        )
        headers = forward_headers(request.headers)
        if length is not None:
            headers["Content-Length"] = str(length)
        body = self._body(request) if request.body_exists else None
        url = URL(self.base + request.raw_path, encoded=True)
        assert self._session is not None
        response: web.StreamResponse | None = None
        status = 502
        aborted = False
        try:
            async with self._session.request(
                request.method,
                url,
                headers=headers,
                data=body,
                allow_redirects=False,
            ) as upstream:
                status = upstream.status
                response = web.StreamResponse(status=status, reason=upstream.reason)
                for name, value in forward_headers(upstream.headers).items():
                    response.headers.add(name, value)
                if upstream.content_length is not None and request.method != "HEAD":
                    response.content_length = upstream.content_length
                if measure is not None:
                    measure.answer(
                        upstream.headers.get("Content-Type", ""),
                        upstream.headers.get("Content-Encoding", ""),
                    )
                await response.prepare(request)
                async for chunk in upstream.content.iter_any():
                    if measure is not None:
                        measure.feed(chunk, time.monotonic())
                    await response.write(chunk)
                await response.write_eof()
        except asyncio.CancelledError:
            aborted = True  # the client went away: leaving the block closes the upstream
            raise
        except (ConnectionResetError, aiohttp.ClientConnectionResetError):
            aborted = response is not None and response.prepared
            if not aborted:
                stats.upstream_errors["reset"] += 1
            return self._cut(request, response, 502)
        except _TooLarge:
            stats.rejected["too_large"] += 1
            measure = None
            return self._cut(request, response, 413, "request body too large\n")
        except (asyncio.TimeoutError, aiohttp.ServerTimeoutError):
            stats.upstream_errors["timeout"] += 1
            status = 504
            return self._cut(request, response, 504, "worker did not answer in time\n")
        except aiohttp.ClientError as exc:
            if isinstance(exc.__cause__ or exc.__context__, _TooLarge):
                stats.rejected["too_large"] += 1
                measure = None
                return self._cut(request, response, 413, "request body too large\n")
            reason = "connect" if isinstance(exc, aiohttp.ClientConnectorError) else "reset"
            stats.upstream_errors[reason] += 1
            status = 502
            return self._cut(request, response, 502, "worker unreachable\n")
        finally:
            if measure is not None:
                measure.finish(status, time.monotonic(), aborted=aborted)
        return response

    @staticmethod
    def _cut(
        request: web.Request,
        response: web.StreamResponse | None,
        status: int,
        text: str = "worker connection failed\n",
    ) -> web.StreamResponse:
        """An error answer, or, once the answer's head is out, the connection closed so
        the client sees a cut answer rather than a well-formed short one."""
        if response is None or not response.prepared:
            return web.Response(status=status, text=text)
        if request.transport is not None:
            request.transport.close()
        return response


# --------------------------------------------------------------------------- export
def resolve_models(models: Iterable[str], engine_models: set[str]) -> dict[str, str]:
    """The model label each measured model is exported under: the engine's model when
    it serves exactly one (clients may ask for aliases), else the answer's own."""
    if len(engine_models) == 1:
        only = next(iter(engine_models))
        return dict.fromkeys(models, only)
    return {m: m for m in models}


def merged(stats: ProxyStats, engine_models: set[str]) -> dict[str, ModelStats]:
    """The stats per exported model label (answers under aliases of one model summed)."""
    names = resolve_models(stats.models, engine_models)
    out: dict[str, ModelStats] = {}
    for model, series in stats.models.items():
        label = names[model]
        if label not in out:
            out[label] = series
            continue
        total = out[label] = _copy(out[label])
        for target in PROXY_HISTOGRAMS:
            total.histogram(target).add(series.histogram(target))
        total.prompt_tokens += series.prompt_tokens
        total.generation_tokens += series.generation_tokens
        total.aborts += series.aborts
        for k, v in series.requests.items():
            total.requests[k] = total.requests.get(k, 0) + v
        for k, v in series.finished.items():
            total.finished[k] = total.finished.get(k, 0) + v
    return out


def _copy(series: ModelStats) -> ModelStats:
    out = ModelStats(prompt_tokens=series.prompt_tokens,
                     generation_tokens=series.generation_tokens,
                     requests=dict(series.requests), aborts=series.aborts,
                     finished=dict(series.finished))  # fmt: skip
    for target in PROXY_HISTOGRAMS:
        out.histogram(target).add(series.histogram(target))
    return out


#: (engine name, the engine's model labels, whether the engine has each contract
#: histogram and counter) of a worker, as the engine source knows it
EngineView = Callable[[str], tuple[str, set[str], frozenset[str]]]


class ProxySource(Source):
    """The proxies' own families, and the contract's where the engine has none.

    ``engine_view(worker)`` says what the engine source knows: the engine's name,
    its model labels, and which contract histograms and counters it exports.
    """

    name = "proxy"

    def __init__(
        self, workers: Iterable[WorkerSpec], interval: float, engine_view: EngineView
    ) -> None:
        super().__init__()
        self.interval = interval
        self.engine_view = engine_view
        self.stats: dict[str, ProxyStats] = {}
        self.servers: dict[str, ProxyServer] = {}
        self.specs: dict[str, WorkerSpec] = {}
        for worker in workers:
            if worker.proxy is not None:
                self.stats[worker.name] = ProxyStats()
                self.specs[worker.name] = worker
                self.servers[worker.name] = ProxyServer(
                    worker, worker.proxy, self.stats[worker.name]
                )

    async def start(self) -> None:
        started: list[ProxyServer] = []
        try:
            for server in self.servers.values():
                url = await server.start()
                started.append(server)
                log.info("worker %s: measuring proxy on %s", server.worker.name, url)
        except UsageError:
            for server in started:
                await server.stop()
            raise

    async def stop(self) -> None:
        for server in self.servers.values():
            with contextlib.suppress(Exception):
                await server.stop()

    async def refresh(self) -> None:
        started = time.perf_counter()
        self.health.finished_pass(started)

    def contract_fill(self, worker: str, engine_models: set[str], has: frozenset[str]) -> tuple[
        dict[str, dict[tuple[tuple[str, str], ...], Histogram]],
        dict[str, dict[tuple[tuple[str, str], ...], float]],
    ]:  # fmt: skip
        """The contract histograms and counters the engine lacks, from the proxy's
        measurements (keys: the model label), for the engine source to export."""
        stats = self.stats.get(worker)
        hists: dict[str, dict[tuple[tuple[str, str], ...], Histogram]] = {}
        counters: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
        if stats is None:
            return hists, counters
        for model, series in merged(stats, engine_models).items():
            key = (("model", model),)
            for target in PROXY_HISTOGRAMS:
                if target not in has:
                    hists.setdefault(target, {})[key] = series.histogram(target).snapshot()
            for target in PROXY_COUNTERS:
                if target not in has:
                    counters.setdefault(target, {})[key] = float(series.counter(target))
            if "inferwatch_requests_finished" not in has:
                for reason, n in series.finished.items():
                    finished = counters.setdefault("inferwatch_requests_finished", {})
                    finished[(("model", model), ("reason", reason))] = float(n)
        return hists, counters

    def families(self) -> Iterable[Metric]:
        fams: dict[str, Metric] = {}

        def fam(cls: type, name: str, labels: list[str]) -> Metric:
            found = fams.get(name)
            if found is None:
                found = fams[name] = cls(name, HELP[name], labels=labels)
            return found

        for worker, stats in self.stats.items():
            spec = self.specs[worker]
            engine, models, _ = self.engine_view(worker)
            extra = spec.labels
            wl = ["worker", *(k for k, _ in extra)]
            wv = [worker, *(v for _, v in extra)]
            ml = ["worker", "engine", "model", *(k for k, _ in extra)]
            server = self.servers[worker]
            fam(GaugeMetricFamily, "inferwatch_proxy_connections", wl).add_metric(  # type: ignore[attr-defined]
                wv, float(server.connections)
            )
            fam(GaugeMetricFamily, "inferwatch_proxy_requests_in_flight", wl).add_metric(  # type: ignore[attr-defined]
                wv, float(stats.in_flight)
            )
            for reason, n in stats.upstream_errors.items():
                fam(CounterMetricFamily, "inferwatch_proxy_upstream_errors", [*wl, "reason"]).add_metric(  # type: ignore[attr-defined]
                    [*wv, reason], float(n)
                )  # fmt: skip
            for reason, n in stats.rejected.items():
                fam(CounterMetricFamily, "inferwatch_proxy_rejected", [*wl, "reason"]).add_metric(  # type: ignore[attr-defined]
                    [*wv, reason], float(n)
                )  # fmt: skip
            fam(CounterMetricFamily, "inferwatch_proxy_samples_dropped", wl).add_metric(  # type: ignore[attr-defined]
                wv, float(stats.dropped)
            )
            for model, series in sorted(merged(stats, models).items()):
                mv = [worker, engine, model, *(v for _, v in extra)]
                for target, name in PROXY_HISTOGRAMS.items():
                    hist = series.histogram(target).snapshot()
                    buckets = [
                        (floatToGoString(b), c)
                        for b, c in zip(hist.bounds, hist.counts, strict=True)
                    ]
                    fam(HistogramMetricFamily, name, ml).add_metric(mv, buckets, hist.sum)  # type: ignore[attr-defined]
                for target, name in PROXY_COUNTERS.items():
                    fam(CounterMetricFamily, name, ml).add_metric(mv, float(series.counter(target)))  # type: ignore[attr-defined]
                for status_class, n in sorted(series.requests.items()):
                    fam(CounterMetricFamily, "inferwatch_proxy_requests", [*ml, "status_class"]).add_metric(  # type: ignore[attr-defined]
                        [*mv, status_class], float(n)
                    )  # fmt: skip
                fam(CounterMetricFamily, "inferwatch_proxy_client_aborts", ml).add_metric(  # type: ignore[attr-defined]
                    mv, float(series.aborts)
                )
        return list(fams.values())
