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
import re
import socket
import ssl
import time
from bisect import bisect_left
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import urlsplit

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

from inferwatch.agent.collectors.base import Source
from inferwatch.agent.config import ProxySpec, WorkerSpec
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


def _plain_token(payload: bytes) -> bool:
    """An OpenAI chunk still generating: its finish reason null, no usage and no empty
    text in it (a token whose text is not yet whole UTF-8 comes empty: parsed instead).
    Byte searches only: the bulk of a stream is never parsed as JSON."""
    if b'"finish_reason":null' not in payload and b'"finish_reason": null' not in payload:
        return False
    # an empty string anywhere (``"text":""``, ``"content": ""``): parsed, to be sure
    return b'"usage"' not in payload and b'":""' not in payload and b'": ""' not in payload


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
        if (
            not self._pending
            and chunk.startswith(b"data:")
            and chunk.find(b"\n", 5) == len(chunk) - 2
            and chunk.endswith(b"\n\n")
        ):  # the common case: one whole event
            self._event(chunk[5:-2].strip(), now)
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


# --------------------------------------------------------------------------- HTTP/1.1
#: a request or answer head larger than this is refused (431 / 502)
MAX_HEAD_BYTES = 64 * 1024
#: request bytes held while the worker's connection is being opened; reading pauses past it
MAX_PENDING_BYTES = 256 * 1024
#: a transport's write buffer past this pauses the other side's reading (back-pressure)
WRITE_BUFFER_BYTES = 64 * 1024
#: idle connections to the worker kept for reuse, at most
MAX_POOLED = 256
#: a connection to a worker that announced no keep-alive time is reused within this
#: long, and only for a request that can be sent again (GET, HEAD, OPTIONS, no body)
UNANNOUNCED_IDLE_S = 2.0
#: after a 413 the client's remaining body is read and dropped this long at most, so
#: that the client reads the answer instead of a reset
LINGER_S = 2.0

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAD_TARGET = re.compile(rb"[\x00-\x20\x7f]")
_HEX = re.compile(rb"[0-9A-Fa-f]{1,15}")
_RETRYABLE = frozenset({"GET", "HEAD", "OPTIONS"})
_REASONS = {
    400: "Bad Request", 417: "Expectation Failed", 413: "Content Too Large", 431: "Request Header Fields Too Large",
    501: "Not Implemented", 502: "Bad Gateway", 504: "Gateway Timeout",
    505: "HTTP Version Not Supported",
}  # fmt: skip


class HTTPError(Exception):
    """A message the proxy cannot pass on: answered with ``status`` and a fixed text."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


#: the headers the proxy itself reads, collected as the head is parsed (one pass)
_READ = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive",
                   "expect", "content-type", "content-encoding"})  # fmt: skip
#: never forwarded: hop-by-hop, and what the proxy sets or answers itself
_DROP = HOP_BY_HOP | {"host", "content-length", "expect"}
_CTL = re.compile(rb"[\r\n\x00]")


def _fields(lines: list[bytes]) -> tuple[list[tuple[str, str]], dict[str, list[str]]]:
    """A head's fields, in order, and the values of those the proxy reads (``_READ``)
    by lower-case name."""
    out = []
    read: dict[str, list[str]] = {}
    for line in lines:
        name, sep, value = line.partition(b":")
        if not sep or not _TOKEN.fullmatch(name):  # obs-fold, a space before the colon
            raise HTTPError(400, "malformed header\n")
        value = value.strip(b" \t")
        if _CTL.search(value):
            raise HTTPError(400, "malformed header\n")
        k, v = name.decode("latin-1"), value.decode("latin-1")
        out.append((k, v))
        low = k.lower()
        if low in _READ:
            read.setdefault(low, []).append(v)
    return out, read


def _tokens(values: list[str] | None) -> set[str]:
    if not values:
        return set()
    return {t.strip().lower() for v in values for t in v.split(",")} - {""}


def _framing(read: dict[str, list[str]]) -> tuple[int | None, bool]:
    """(Content-Length, chunked) of a message; smuggling-prone combinations refused."""
    lengths = {v.strip() for v in read.get("content-length", ())}
    codings = read.get("transfer-encoding")
    if codings:
        if lengths or ",".join(codings).strip().lower() != "chunked":
            raise HTTPError(501 if not lengths else 400, "unsupported transfer coding\n")
        return None, True
    if not lengths:
        return None, False
    if len(lengths) > 1 or not all(c in "0123456789" for c in next(iter(lengths))):
        raise HTTPError(400, "bad content-length\n")
    value = next(iter(lengths))
    if not value or len(value) > 18:
        raise HTTPError(400, "bad content-length\n")
    return int(value), False


@dataclass(slots=True)
class RequestHead:
    method: str
    target: str
    http10: bool
    headers: list[tuple[str, str]]
    length: int | None
    chunked: bool
    keep_alive: bool
    expect_continue: bool
    #: the tokens of its Connection header (headers named there are hop-by-hop)
    connection: set[str]

    @property
    def has_body(self) -> bool:
        return self.chunked or bool(self.length)


def parse_request_head(raw: bytes) -> RequestHead:
    """A request head (without its blank line), checked the way a server must."""
    lines = raw.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]):
        raise HTTPError(400, "malformed request line\n")
    method, target, version = parts
    if version not in (b"HTTP/1.1", b"HTTP/1.0"):
        raise HTTPError(505, "HTTP/1.0 or 1.1 only\n")
    if _BAD_TARGET.search(target) or not (
        target.startswith(b"/") or (target == b"*" and method == b"OPTIONS")
    ):
        raise HTTPError(400, "malformed request target\n")
    headers, read = _fields(lines[1:])
    length, chunked = _framing(read)
    connection = _tokens(read.get("connection"))
    http10 = version == b"HTTP/1.0"
    # an HTTP/1.0 client's connection closes after its answer (no 1.0 keep-alive)
    keep = not http10 and "close" not in connection
    expect = _tokens(read.get("expect"))
    if expect - {"100-continue"}:
        raise HTTPError(417, "unsupported expectation\n")
    return RequestHead(method.decode("ascii"), target.decode("latin-1"), http10, headers,
                       length, chunked, keep, bool(expect), connection)  # fmt: skip


def forward_headers(
    headers: Iterable[tuple[str, str]], named: set[str] | None = None
) -> list[tuple[str, str]]:
    """The headers to pass on: hop-by-hop ones (and those ``Connection`` names:
    ``named``, read from ``headers`` when not given), ``Host``, the framing and
    ``Expect`` dropped (the proxy frames and answers those itself); everything else,
    credentials included, as it came."""
    headers = list(headers)
    if named is None:
        named = _tokens([v for k, v in headers if k.lower() == "connection"])
    if named:
        return [(k, v) for k, v in headers if (low := k.lower()) not in _DROP and low not in named]
    return [(k, v) for k, v in headers if k.lower() not in _DROP]


def _head(first: str, headers: Iterable[tuple[str, str]]) -> bytes:
    return (first + "\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n").encode(
        "latin-1"
    )


def error_answer(status: int, text: str, *, close: bool) -> bytes:
    body = text.encode()
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n" + ("Connection: close\r\n" if close else "") + "\r\n"
    )
    return head.encode() + body


_SIZE, _DATA, _DATA_END, _TRAILER = range(4)


class Chunked:
    """Follows a chunked body as it passes, without re-framing it: the payload's pieces
    (for the measurement) and where the body ends."""

    __slots__ = ("left", "line", "size", "state")

    def __init__(self) -> None:
        self.state = _SIZE
        self.left = 0
        self.line = b""
        self.size = 0  # payload bytes so far

    def feed(self, data: bytes, pieces: list[bytes] | None) -> int:
        """Consume ``data``; the index just past the body's end, or -1 (not ended)."""
        if self.state == _SIZE and not self.line:
            # the common case of a stream: exactly one whole chunk (an event) arrived
            j = data.find(b"\r\n", 0, 18)
            if j > 0 and _HEX.fullmatch(data, 0, j):
                end = j + 2 + int(data[:j], 16)
                if end > j + 2 and len(data) == end + 2 and data.endswith(b"\r\n"):
                    self.size += end - j - 2
                    if pieces is not None:
                        pieces.append(data[j + 2 : end])
                    return -1
        i, n = 0, len(data)
        while i < n:
            if self.state == _DATA:
                take = min(self.left, n - i)
                if pieces is not None:
                    pieces.append(data[i : i + take])
                i += take
                self.left -= take
                if not self.left:
                    self.state = _DATA_END
                continue
            j = data.find(b"\n", i)
            if j < 0:
                self.line += data[i:]
                if len(self.line) > 4096:
                    raise HTTPError(400, "malformed chunked body\n")
                return -1
            line = (self.line + data[i:j]) if self.line else data[i:j]
            self.line = b""
            i = j + 1
            if line.endswith(b"\r"):
                line = line[:-1]
            if self.state == _SIZE:
                digits = line.split(b";", 1)[0].strip(b" \t")
                if not _HEX.fullmatch(digits):
                    raise HTTPError(400, "malformed chunked body\n")
                self.left = int(digits, 16)
                self.size += self.left
                self.state = _DATA if self.left else _TRAILER
            elif self.state == _DATA_END:
                if line:
                    raise HTTPError(400, "malformed chunked body\n")
                self.state = _SIZE
            elif not line:  # the blank line after the last chunk (and any trailers)
                return i
        return -1


# --------------------------------------------------------------------------- forwarding
class ClientConn(asyncio.Protocol):
    """One client connection: its requests one at a time, each forwarded as it arrives."""

    def __init__(self, server: ProxyServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.state = "head"  # head, body, wait (for the answer), linger, closed
        self.busy = False
        self.last_active = 0.0  # loop clock: the sweeper's idle and head time-outs
        self.req: RequestHead | None = None
        self.body_left = 0
        self.body_chunked: Chunked | None = None
        self.pending: list[bytes] | None = None  # bytes for a worker connection not open yet
        self.pending_size = 0
        self.up: UpstreamConn | None = None
        self.connecting: asyncio.Task[None] | None = None
        self.measure: Measure | None = None
        self.started = 0.0
        self.status = 502
        self.answered = False  # the answer's head went out
        self.keep = True
        self.dechunk = False
        self.extra = b""  # a pipelined next request, read when this one ends
        self.reading = True
        self.up_paused = False
        self.retried = False
        self.fresh = True  # no request yet: its head is due within header_timeout
        self.gen = 0  # the request's number on this connection

    # ------------------------------------------------------------ asyncio protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are no asyncio.Transport subclass: no isinstance check
        self.transport = transport = cast(asyncio.Transport, transport)
        transport.set_write_buffer_limits(high=WRITE_BUFFER_BYTES)
        self.last_active = self.server.loop.time()
        if not self.server.admit(self):
            self.state = "closed"
            transport.abort()
            return
        with contextlib.suppress(OSError):
            sock = transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        try:
            state = self.state
            if state == "body":
                self._body(data)
            elif state == "head":
                self._head_bytes(data)
            elif state == "linger" or state == "closed":
                return
            else:  # wait: a pipelined request, read when this answer ends
                self.extra += data
                self._pause_client()
        except Exception as exc:  # a defect: one connection, one fixed line
            _defect(exc, self.transport)

    def eof_received(self) -> bool | None:
        # the client half-closed: an answer under way still goes out, then the
        # connection closes
        self.keep = False
        if not self.busy:
            self._close()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        prior = self.state
        self.state = "closed"
        self.server.release(self)
        if self.busy and prior != "linger":
            # the client went away before the answer's end: cancel the upstream request
            self._end(aborted=True)

    def pause_writing(self) -> None:
        up = self.up
        if up is not None and up.transport is not None and not self.up_paused:
            self.up_paused = True
            up.transport.pause_reading()

    def resume_writing(self) -> None:
        up = self.up
        if up is not None and up.transport is not None and self.up_paused:
            self.up_paused = False
            up.transport.resume_reading()

    # ------------------------------------------------------------ the request
    def _head_bytes(self, data: bytes) -> None:
        buf = self.buf
        if not buf:
            self.last_active = self.server.loop.time()  # the head time-out runs from here
        start = max(0, len(buf) - 3)
        buf += data
        end = buf.find(b"\r\n\r\n", start)
        if end < 0:
            if len(buf) > MAX_HEAD_BYTES:
                self._refuse(431, "request head too large\n")
            return
        if end > MAX_HEAD_BYTES:
            self._refuse(431, "request head too large\n")
            return
        raw, rest = bytes(buf[:end]), bytes(buf[end + 4 :])
        self.buf = bytearray()
        self._request(raw)
        if rest:
            self.data_received(rest)
        if self.up is not None and self.pending is not None:
            self._flush()  # the head and the body that came with it, in one write

    def _request(self, raw: bytes) -> None:
        server = self.server
        self.started = time.monotonic()
        try:
            req = parse_request_head(raw)
        except HTTPError as err:
            self._refuse(err.status, err.text)
            return
        spec = server.spec
        if req.length is not None and req.length > spec.max_body_bytes:
            server.stats.rejected["too_large"] += 1
            self._refuse(413, "request body too large\n")
            return
        self.req = req
        self.gen += 1
        self.fresh = False
        self.busy = True
        server.stats.in_flight += 1
        self.status = 502
        self.answered = False
        self.retried = False
        self.keep = req.keep_alive
        path = req.target.split("?", 1)[0]
        self.measure = (
            Measure(server.stats, self.started)
            if req.method == "POST" and path in MEASURED_PATHS
            else None
        )
        headers = [("Host", server.host_header), *forward_headers(req.headers, req.connection)]
        retryable = req.method in _RETRYABLE and not req.has_body
        if server.announces is False and not retryable:
            # a worker that announces no keep-alive gets this connection back only for
            # a request that could be sent again: it closes this one itself (as nginx's
            # default), so the closed sockets wait on its side, not on the proxy's
            headers.append(("Connection", "close"))
        if req.chunked:
            headers.append(("Transfer-Encoding", "chunked"))
            self.body_chunked = Chunked()
        elif req.length is not None:
            headers.append(("Content-Length", str(req.length)))
            self.body_left = req.length
            self.body_chunked = None
        head = _head(f"{req.method} {server.prefix}{req.target} HTTP/1.1", headers)
        if req.expect_continue and req.has_body:
            assert self.transport is not None
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        self.state = "body" if req.has_body else "wait"
        self.pending = [head]
        self.pending_size = len(head)
        up = server.pool_get(req.method, req.has_body)
        if up is not None:
            self._attach(up)  # the head goes when the bytes that came with it are read
        else:
            self.connecting = server.spawn(self._connect(self.gen))

    def _body(self, data: bytes) -> None:
        limit = self.server.spec.max_body_bytes
        rest = b""
        dec = self.body_chunked
        if dec is not None:
            try:
                end = dec.feed(data, None)
            except HTTPError as err:
                self._fail_request(err.status, err.text)
                return
            if dec.size > limit:
                self.server.stats.rejected["too_large"] += 1
                self._fail_request(413, "request body too large\n", measured=False)
                return
            if end >= 0:
                data, rest = data[:end], data[end:]
                self.state = "wait"
        else:
            left = self.body_left
            if len(data) >= left:
                data, rest = data[:left], data[left:]
                self.state = "wait"
            self.body_left = left - len(data)
        up = self.up
        if self.pending is not None:
            self.pending.append(data)
            self.pending_size += len(data)
            if self.pending_size > MAX_PENDING_BYTES:
                self._pause_client()
        elif up is not None:
            up.send(data)
        if rest:
            self.extra += rest
            self._pause_client()

    async def _connect(self, gen: int) -> None:
        """A new connection to the worker for request ``gen``. Never cancelled while it
        connects (a cancelled connect can lose the connection it made): a request that
        ended meanwhile (the client went away) closes it here."""
        server = self.server
        try:
            up = await server.connect()
        except (asyncio.TimeoutError, OSError) as exc:
            if gen != self.gen or not self.busy:
                return
            self.connecting = None
            if isinstance(exc, asyncio.TimeoutError):
                server.stats.upstream_errors["timeout"] += 1
                self._fail_request(504, "worker did not answer in time\n")
            else:
                server.stats.upstream_errors["connect"] += 1
                self._fail_request(502, "worker unreachable\n")
            return
        if gen != self.gen or not self.busy or self.state in ("closed", "linger", "failed"):
            up.close()
            return
        self.connecting = None
        self._attach(up)
        self._flush()

    def _flush(self) -> None:
        """What waited for the worker's connection goes out in one write."""
        pending, self.pending = self.pending or [], None
        self.pending_size = 0
        if self.up is not None:
            self.up.send(b"".join(pending))
        if not self.reading and not self.extra:
            self._resume_client()

    def _attach(self, up: UpstreamConn) -> None:
        self.up = up
        up.owner = self
        up.last_read = time.monotonic()

    # ------------------------------------------------------------ the answer
    def answer_head(self, status: int, reason: str, headers: list[tuple[str, str]],
                    read: dict[str, list[str]], connection: set[str],
                    length: int | None, chunked: bool, until_close: bool, *,
                    declared_chunked: bool) -> None:  # fmt: skip
        """The worker's answer head: passed on with its framing as it came."""
        req = self.req
        assert req is not None and self.transport is not None
        self.status = status
        self.answered = True
        out = forward_headers(headers, connection)
        keep = self.keep and not until_close and self.state == "wait"
        self.dechunk = chunked and req.http10
        if length is not None:
            out.append(("Content-Length", str(length)))
        elif declared_chunked and not self.dechunk:
            out.append(("Transfer-Encoding", "chunked"))
        elif self.dechunk:
            keep = False
        if not keep:
            out.append(("Connection", "close"))
        self.keep = keep
        if self.measure is not None:
            ctype = read.get("content-type", [""])[-1]
            cenc = ",".join(read.get("content-encoding", ()))
            self.measure.answer(ctype, cenc.strip().lower())
        self.transport.write(_head(f"HTTP/1.1 {status} {reason}", out))

    def answer_done(self) -> None:
        """The answer's last byte went out."""
        self._end(aborted=False)
        if self.state == "closed":
            return
        if not self.keep or self.state != "wait":
            self._close()
            return
        self.state = "head"
        self.last_active = self.server.loop.time()
        extra, self.extra = self.extra, b""
        if not self.reading:
            self._resume_client()
        if extra:
            self._head_bytes(extra)

    def upstream_failed(self, up: UpstreamConn, reason: str, timed_out: bool) -> None:
        """The worker's connection broke (or timed out) before the answer's end."""
        server = self.server
        if self.up is not up:
            return
        self.up = None
        if (not self.answered and not timed_out and up.reused and not up.got_bytes
                and not self.retried and self.req is not None
                and self.req.method in _RETRYABLE and not self.req.has_body):  # fmt: skip
            # a kept-alive connection the worker had closed: a request that can be sent
            # again goes once more on a fresh connection
            self.retried = True
            assert self.req is not None
            req = self.req
            headers = [("Host", server.host_header), *forward_headers(req.headers, req.connection)]
            head = _head(f"{self.req.method} {server.prefix}{self.req.target} HTTP/1.1",
                         headers)  # fmt: skip
            self.pending = [head]
            self.connecting = server.spawn(self._connect(self.gen))
            return
        server.stats.upstream_errors[reason] += 1
        if timed_out:
            self._fail_request(504, "worker did not answer in time\n")
        else:
            self._fail_request(502, "worker connection failed\n")

    # ------------------------------------------------------------ ends
    def _end(self, *, aborted: bool) -> None:
        """The exchange is over: measure it, free or drop the worker's connection."""
        if not self.busy:
            return
        self.busy = False
        self.server.stats.in_flight -= 1
        self.connecting = None  # it finishes on its own, and closes what it opened
        self.pending = None
        up, self.up = self.up, None
        if up is not None:
            up.owner = None
            if self.up_paused and up.transport is not None and not up.closed:
                # paused for this client's back-pressure: the next user reads again
                up.transport.resume_reading()
            req = self.req
            if aborted or not up.done or self.state != "wait" or req is None:
                up.close()
            else:
                self.server.pool_put(up, req.method in _RETRYABLE and not req.has_body)
        self.up_paused = False
        measure, self.measure = self.measure, None
        if measure is not None:
            measure.finish(self.status, time.monotonic(), aborted=aborted)

    def _fail_request(self, status: int, text: str, *, measured: bool = True) -> None:
        """An error answer, or, once the answer's head is out, the connection cut so
        the client sees a broken answer rather than a well-formed short one."""
        if not measured:
            self.measure = None
        answered = self.answered
        self.status = status
        body_unread = self.state == "body"
        self.state = "failed"
        self._end(aborted=False)
        if self.transport is None or self.transport.is_closing():
            return
        if answered:
            self._close()
            return
        self.transport.write(error_answer(status, text, close=True))
        if body_unread:
            self._linger()
        else:
            self._close()

    def _refuse(self, status: int, text: str) -> None:
        """A request refused before it was forwarded; its body (if any) left unread."""
        if self.transport is None:
            return
        self.transport.write(error_answer(status, text, close=True))
        self._linger()

    def _linger(self) -> None:
        """Half-close, and read the rest of the client's bytes for a while, so that the
        client reads the answer rather than a reset."""
        self.state = "linger"
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if not self.reading:
            self._resume_client()
        with contextlib.suppress(OSError, RuntimeError):
            if transport.can_write_eof():
                transport.write_eof()
        self.server.loop.call_later(LINGER_S, self._close)

    def _close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def _pause_client(self) -> None:
        if self.reading and self.transport is not None and not self.transport.is_closing():
            self.reading = False
            self.transport.pause_reading()

    def _resume_client(self) -> None:
        if not self.reading and self.transport is not None and not self.transport.is_closing():
            self.reading = True
            self.transport.resume_reading()

    def upstream_paused(self, paused: bool) -> None:
        """The worker's connection's write buffer is full (or drained): the request
        body waits in the client's socket meanwhile."""
        if self.state != "body":
            return
        if paused:
            self._pause_client()
        elif not self.extra:
            self._resume_client()


class UpstreamConn(asyncio.Protocol):
    """One connection to the worker: an answer's head parsed, its body passed on."""

    def __init__(self, server: ProxyServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.owner: ClientConn | None = None
        self.buf = bytearray()
        self.in_head = True
        self.length: int | None = None
        self.chunked: Chunked | None = None
        self.until_close = False
        self.done = False
        self.reusable = False
        self.closed = False
        self.reused = False
        self.got_bytes = False
        self.uses = 0
        #: the keep-alive the worker announced: (seconds, requests), or None
        self.announced: tuple[float, int] | None = None
        self.idle_since = 0.0
        self.last_read = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are no asyncio.Transport subclass: no isinstance check
        self.transport = transport = cast(asyncio.Transport, transport)
        transport.set_write_buffer_limits(high=WRITE_BUFFER_BYTES)
        with contextlib.suppress(OSError):
            sock = transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, data: bytes) -> None:
        if data and self.transport is not None and not self.closed:
            self.transport.write(data)

    def start(self) -> None:
        """A request goes out on this connection."""
        self.buf = bytearray()
        self.in_head = True
        self.done = False
        self.reusable = False
        self.got_bytes = False
        self.length = None
        self.chunked = None
        self.until_close = False
        self.uses += 1

    def data_received(self, data: bytes) -> None:
        owner = self.owner
        if owner is None or self.done:
            self.close()  # bytes nobody asked for: the connection is not reusable
            return
        self.got_bytes = True
        now = self.last_read = time.monotonic()
        try:
            if self.in_head:
                self._head(data, owner)
            else:
                self._body(data, owner, now)
        except Exception as exc:  # a defect: one connection, one fixed line
            _defect(exc, owner.transport)
            self.close()

    def _head(self, data: bytes, owner: ClientConn) -> None:
        buf = self.buf
        start = max(0, len(buf) - 3)
        buf += data
        end = buf.find(b"\r\n\r\n", start)
        if end < 0:
            if len(buf) > MAX_HEAD_BYTES:
                self._broken(owner)
            return
        raw, rest = bytes(buf[:end]), bytes(buf[end + 4 :])
        self.buf = bytearray()
        lines = raw.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        try:
            if len(parts) < 2 or parts[0] not in (b"HTTP/1.1", b"HTTP/1.0"):
                raise HTTPError(502, "")
            status = int(parts[1])
            headers, read = _fields(lines[1:])
            if not 100 <= status <= 999 or status == 101:
                raise HTTPError(502, "")
            if status < 200:  # 100 Continue, 103 Early Hints: not passed on
                if rest:
                    self._head(rest, owner)
                return
            req = owner.req
            assert req is not None
            length, chunked = _framing(read)
        except (HTTPError, ValueError):
            self._broken(owner)
            return
        reason = parts[2].decode("latin-1") if len(parts) > 2 else ""
        self.in_head = False
        connection = _tokens(read.get("connection"))
        http11 = parts[0] == b"HTTP/1.1"
        no_body = req.method == "HEAD" or status in (204, 304)
        self.until_close = not no_body and length is None and not chunked
        self.length = 0 if no_body else length
        self.chunked = Chunked() if chunked and not no_body else None
        self.reusable = http11 and "close" not in connection and not self.until_close
        keep_alive = read.get("keep-alive")
        announced = _keep_alive(keep_alive[-1]) if keep_alive else None
        self.announced = announced
        self.server.announces = announced is not None
        owner.answer_head(status, reason, headers, read, connection, length, chunked and not no_body,
                          self.until_close, declared_chunked=chunked)  # fmt: skip
        if self.length == 0:
            self._finished(owner)
            if rest:
                self.reusable = False
            return
        if rest:
            self._body(rest, owner, time.monotonic())

    def _body(self, data: bytes, owner: ClientConn, now: float) -> None:
        transport = owner.transport
        measure = owner.measure
        dec = self.chunked
        if dec is not None:
            pieces: list[bytes] | None = [] if (measure is not None or owner.dechunk) else None
            try:
                end = dec.feed(data, pieces)
            except HTTPError:
                self._broken(owner)
                return
            if end >= 0 and end != len(data):
                data = data[:end]
                self.reusable = False
            if transport is not None:
                if owner.dechunk:
                    if pieces:
                        transport.write(b"".join(pieces))
                else:
                    transport.write(data)
            if measure is not None and pieces:
                for piece in pieces:
                    measure.feed(piece, now)
            if end >= 0:
                self._finished(owner)
            return
        left = self.length
        if left is not None and len(data) >= left:
            if len(data) > left:
                self.reusable = False
                data = data[:left]
            left = 0
        elif left is not None:
            left -= len(data)
        self.length = left
        if transport is not None:
            transport.write(data)
        if measure is not None:
            measure.feed(data, now)
        if left == 0:
            self._finished(owner)

    def _finished(self, owner: ClientConn) -> None:
        self.done = True
        owner.answer_done()

    def _broken(self, owner: ClientConn) -> None:
        """An answer the proxy cannot follow: a 502 (or a cut answer)."""
        self.close()
        owner.upstream_failed(self, "reset", timed_out=False)

    def eof_received(self) -> bool | None:
        return False  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.pool_drop(self)
        owner = self.owner
        if owner is None or self.done:
            return
        if self.until_close and not self.in_head:
            self.done = True
            if owner.dechunk is False:
                owner.keep = False
            owner.answer_done()
            return
        owner.upstream_failed(self, "reset", timed_out=False)

    def timed_out(self) -> None:
        owner = self.owner
        self.close()
        if owner is not None and not self.done:
            owner.upstream_failed(self, "timeout", timed_out=True)

    def pause_writing(self) -> None:
        if self.owner is not None:
            self.owner.upstream_paused(True)

    def resume_writing(self) -> None:
        if self.owner is not None:
            self.owner.upstream_paused(False)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


def _defect(exc: Exception, transport: asyncio.Transport | None) -> None:
    """A defect of the proxy's own: the connection is cut and one line logged, naming
    the error's type only (its text could quote the request)."""
    log.error("proxy: %s while forwarding; connection closed", type(exc).__name__)
    if transport is not None:
        transport.abort()


def _keep_alive(value: str) -> tuple[float, int] | None:
    """``Keep-Alive: timeout=5, max=100`` (RFC 2068 19.7.1.1): (seconds, requests)."""
    timeout, most = None, 1 << 30
    for part in value.split(","):
        k, _, v = part.strip().partition("=")
        with contextlib.suppress(ValueError):
            if k.strip().lower() == "timeout":
                timeout = float(v.strip())
            elif k.strip().lower() == "max":
                most = int(v.strip())
    return None if timeout is None or timeout <= 0 else (timeout, most)


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
        self.open: dict[ClientConn, None] = {}  # insertion order: oldest first
        self.refused = 0
        self.idle: list[UpstreamConn] = []
        #: whether the worker's last answer announced its keep-alive (None: no answer yet)
        self.announces: bool | None = None
        self._server: asyncio.AbstractServer | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._ssl: ssl.SSLContext | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        self.url = ""

    @property
    def connections(self) -> int:
        return len(self.open)

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
        host = self.spec.listen_host
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        self.url = f"http://{f'[{shown}]' if ':' in shown else shown}:{port}"
        return self.url

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if self._server is not None:
            self._server.close()
            self._server = None
        for conn in list(self.open):
            if conn.transport is not None:
                conn.transport.abort()
        for up in list(self.idle):
            up.close()
        self.idle.clear()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.sleep(0)

    # ------------------------------------------------------------ client connections
    def admit(self, conn: ClientConn) -> bool:
        """At the cap, the quietest connection not serving a request makes room (an
        idle keep-alive, a slow head); when every one is busy the new one is refused."""
        if len(self.open) >= self.spec.max_connections:
            victim = min(
                (c for c in self.open if not c.busy),
                key=lambda c: c.last_active,
                default=None,
            )
            if victim is None:
                self.refused += 1
                return False
            self.release(victim)
            if victim.transport is not None:
                victim.transport.abort()
        self.open[conn] = None
        return True

    def release(self, conn: ClientConn) -> None:
        self.open.pop(conn, None)

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

    def pool_get(self, method: str, has_body: bool) -> UpstreamConn | None:
        """A kept-alive connection the request may use (docs/proxy.md, "Connections to
        the worker"), or None: open a new one."""
        idle = self.idle
        if not idle:
            return None
        retryable = method in _RETRYABLE and not has_body
        now = time.monotonic()
        while idle:
            up = idle[-1]
            limit = _reuse_window(up)
            if up.closed or now - up.idle_since >= limit:
                idle.pop()
                up.close()
                continue
            if up.announced is None and not retryable:
                return None
            idle.pop()
            up.reused = True
            up.start()
            return up
        return None

    def pool_put(self, up: UpstreamConn, retryable: bool) -> None:
        announced = up.announced
        if (
            not up.reusable
            or up.closed
            or (announced is None and not retryable)
            or len(self.idle) >= MAX_POOLED
            or (announced is not None and up.uses + 1 >= announced[1])
        ):
            up.close()
            return
        up.idle_since = time.monotonic()
        self.idle.append(up)

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
        for conn in list(self.open):
            if conn.state == "head" and not conn.busy:
                limit = spec.header_timeout if conn.buf or conn.fresh else spec.idle_timeout
                if now - conn.last_active > limit and conn.transport is not None:
                    conn.transport.abort()
            up = conn.up
            if (conn.busy and up is not None and not conn.up_paused
                    and mono - up.last_read > spec.read_timeout):  # fmt: skip
                up.timed_out()
        for up in list(self.idle):
            if mono - up.idle_since >= _reuse_window(up):
                self.pool_drop(up)
                up.close()


def _reuse_window(up: UpstreamConn) -> float:
    """How long an idle connection to the worker stays reusable: half the keep-alive
    time it announced (llama.cpp: 5 s), else UNANNOUNCED_IDLE_S."""
    if up.announced is not None:
        return up.announced[0] / 2
    return UNANNOUNCED_IDLE_S


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
