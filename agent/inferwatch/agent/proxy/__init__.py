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
connection is closed); a request the worker provably never got (a kept-alive
connection it had closed, a refused connect) goes again on a fresh connection,
and nothing else is ever sent twice; the worker's silence is bounded by ``read_timeout``;
each worker has its own listener, connection cap and upstream pool, so a hung
worker holds only its own clients. Nothing of a request's content, headers or
credentials reaches a log line, a label or an error answer.

The package, one module per job: ``limits`` (sizes, counts, times), ``wire`` (the
HTTP/1.1 heads, framing, chunked bodies, error answers), ``measure`` (token events,
timings, the per-model stats), ``upstream`` (one connection to the worker),
``client`` (one client connection), ``server`` (a worker's listener, pool and
time-outs), ``export`` (``ProxySource``: the families).
"""

from __future__ import annotations

from inferwatch.agent.proxy.client import ClientConn
from inferwatch.agent.proxy.export import (
    HELP,
    PROXY_COUNTERS,
    PROXY_HISTOGRAMS,
    EngineView,
    ProxySource,
    merged,
    resolve_models,
)
from inferwatch.agent.proxy.limits import (
    LINGER_S,
    MAX_EVENT_BYTES,
    MAX_HEAD_BYTES,
    MAX_JSON_BYTES,
    MAX_MODEL_CHARS,
    MAX_MODELS,
    MAX_PENDING_BYTES,
    MAX_POOLED,
    MEASURED_PATHS,
    REPLAY_MAX_BYTES,
    UNANNOUNCED_IDLE_S,
    WRITE_BUFFER_BYTES,
)
from inferwatch.agent.proxy.measure import (
    FINISH_REASONS,
    REJECT_REASONS,
    RETRY_REASONS,
    UPSTREAM_ERRORS,
    Buckets,
    Measure,
    ModelStats,
    ProxyStats,
)
from inferwatch.agent.proxy.server import ProxyServer
from inferwatch.agent.proxy.upstream import UpstreamConn
from inferwatch.agent.proxy.wire import (
    HOP_BY_HOP,
    Chunked,
    HTTPError,
    RequestHead,
    error_answer,
    forward_headers,
    parse_request_head,
)
from inferwatch.engines.proxy import E2E_BUCKETS, TPOT_BUCKETS, TTFT_BUCKETS

__all__ = [
    "E2E_BUCKETS",
    "FINISH_REASONS",
    "HELP",
    "HOP_BY_HOP",
    "LINGER_S",
    "MAX_EVENT_BYTES",
    "MAX_HEAD_BYTES",
    "MAX_JSON_BYTES",
    "MAX_MODELS",
    "MAX_MODEL_CHARS",
    "MAX_PENDING_BYTES",
    "MAX_POOLED",
    "MEASURED_PATHS",
    "PROXY_COUNTERS",
    "PROXY_HISTOGRAMS",
    "REJECT_REASONS",
    "REPLAY_MAX_BYTES",
    "RETRY_REASONS",
    "TPOT_BUCKETS",
    "TTFT_BUCKETS",
    "UNANNOUNCED_IDLE_S",
    "UPSTREAM_ERRORS",
    "WRITE_BUFFER_BYTES",
    "Buckets",
    "Chunked",
    "ClientConn",
    "EngineView",
    "HTTPError",
    "Measure",
    "ModelStats",
    "ProxyServer",
    "ProxySource",
    "ProxyStats",
    "RequestHead",
    "UpstreamConn",
    "error_answer",
    "forward_headers",
    "merged",
    "parse_request_head",
    "resolve_models",
]
