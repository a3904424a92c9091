"""A fast synthetic OpenAI-compatible upstream for the proxy's tests and benchmark.

Plain asyncio (no HTTP framework), so that at a thousand streams the upstream is
not what is measured. It answers:

- ``POST /v1/completions`` and ``/v1/chat/completions``: with ``"stream": true``
  server-sent events, one token per event after ``first`` seconds, then one
  every ``interval`` seconds, ``max_tokens`` of them, a usage chunk when
  ``stream_options.include_usage`` is set, and ``[DONE]``; else one JSON answer
  with usage after ``first + interval * max_tokens``. Each event carries
  ``"t"``, the upstream's ``time.monotonic()`` when it was written (one clock
  for every process of the machine), so a client can tell the latency a proxy
  added to each event. ``first``/``interval`` come from the request body
  (``"x_first"``, ``"x_interval"``) or the server's defaults;
- ``GET /metrics``: llama.cpp's families (counters of what it served), so the
  agent sees a llama.cpp worker;
- ``GET /hang``: the head never comes;
- ``GET /stats``: JSON ``{"streams": open, "cancelled": n, "completed": n}``:
  ``cancelled`` counts answers whose client connection closed before their end.

With ``keep_alive`` (seconds) it keeps connections the way llama-server does:
each answer announces ``Keep-Alive: timeout=N, max=100``, a connection idle for
N seconds is closed, and the 100th answer says ``Connection: close``. Without
it, it announces nothing and keeps a connection until the client closes it.
``close_after_stream`` closes the connection after every streamed answer without
saying so, as llama-server does (../shared/notes/llamacpp-http.md).

Run ``python sseupstream.py --port N [--first S] [--interval S] [--keep-alive S]
[--close-after-stream]``;
it prints ``READY <port>`` once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import json
import sys
import time
from typing import Any

#: the keep-alive header of the answer being written (per connection task)
_KEEP: contextvars.ContextVar[bytes] = contextvars.ContextVar("keep", default=b"")
KEEP_MAX = 100


class Upstream:
    def __init__(self, first: float = 0.0, interval: float = 0.01, tokens: int = 16,
                 keep_alive: float = 0.0, close_after_stream: bool = False) -> None:  # fmt: skip
        self.keep_alive = keep_alive
        self.close_after_stream = close_after_stream
        self.first = first
        self.interval = interval
        self.tokens = tokens
        self.streams = 0
        #: connections accepted
        self.connections = 0
        self.cancelled = 0
        self.completed = 0
        self.prompt_tokens = 0
        self.generated = 0
        self.seconds = 0.0
        self.server: asyncio.AbstractServer | None = None
        self.port = 0

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        self.server = await asyncio.start_server(self._conn, host, port, backlog=4096)
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 2)

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served = 0
        self.connections += 1
        try:
            while True:
                if self.keep_alive and served:
                    try:
                        head = await asyncio.wait_for(
                            reader.readuntil(b"\r\n\r\n"), self.keep_alive
                        )
                    except asyncio.TimeoutError:
                        break
                else:
                    head = await reader.readuntil(b"\r\n\r\n")
                served += 1
                if self.keep_alive:
                    last = served >= KEEP_MAX
                    _KEEP.set(
                        b"Connection: close\r\n" if last
                        else b"Keep-Alive: timeout=%d, max=%d\r\n" % (self.keep_alive, KEEP_MAX)
                    )  # fmt: skip
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                body = b""
                if "content-length" in headers:
                    body = await reader.readexactly(int(headers["content-length"]))
                elif headers.get("transfer-encoding", "").lower() == "chunked":
                    body = await _read_chunked(reader)
                keep = await self._answer(method, path, headers, body, writer)
                if self.keep_alive and served >= KEEP_MAX:
                    keep = False
                if not keep or headers.get("connection", "").lower() == "close":
                    await writer.drain()
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def _answer(
        self, method: str, path: str, headers: dict[str, str], body: bytes, w: asyncio.StreamWriter
    ) -> bool:
        if path == "/hang":
            await asyncio.sleep(3600)
            return False
        if path == "/stats":
            data = json.dumps({"streams": self.streams, "cancelled": self.cancelled,
                               "completed": self.completed, "headers": headers}).encode()  # fmt: skip
            _plain(w, 200, "application/json", data)
            return True
        if path == "/metrics":
            data = (
                "# TYPE llamacpp:prompt_tokens_total counter\n"
                f"llamacpp:prompt_tokens_total {self.prompt_tokens}\n"
                "# TYPE llamacpp:tokens_predicted_total counter\n"
                f"llamacpp:tokens_predicted_total {self.generated}\n"
                "# TYPE llamacpp:tokens_predicted_seconds_total counter\n"
                f"llamacpp:tokens_predicted_seconds_total {self.seconds}\n"
                "# TYPE llamacpp:requests_processing gauge\n"
                f"llamacpp:requests_processing {self.streams}\n"
                "# TYPE llamacpp:requests_deferred gauge\n"
                "llamacpp:requests_deferred 0\n"
            ).encode()
            _plain(w, 200, "text/plain; version=0.0.4", data)
            return True
        if method != "POST" or path.split("?")[0] not in (
            "/v1/completions",
            "/v1/chat/completions",
        ):
            _plain(w, 404, "text/plain", b"not found\n")
            return True
        try:
            req: dict[str, Any] = json.loads(body or b"{}")
        except ValueError:
            _plain(w, 400, "application/json", b'{"error":"bad json"}')
            return True
        n = int(req.get("max_tokens") or self.tokens)
        first = float(req.get("x_first", self.first))
        interval = float(req.get("x_interval", self.interval))
        chat = path.startswith("/v1/chat")
        model = str(req.get("model") or "synthetic")
        self.prompt_tokens += 7
        if not req.get("stream"):
            await asyncio.sleep(first + interval * max(0, n - 1))
            usage = {"prompt_tokens": 7, "completion_tokens": n, "total_tokens": 7 + n}
            choice = (
                {"index": 0, "message": {"role": "assistant", "content": "x " * n}}
                if chat
                else {"index": 0, "text": "x " * n}
            )
            data = json.dumps({"model": model, "choices": [choice], "usage": usage}).encode()
            self.generated += n
            self.completed += 1
            _plain(w, 200, "application/json", data)
            return True
        usage_wanted = bool((req.get("stream_options") or {}).get("include_usage"))
        w.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n" + _KEEP.get() + b"\r\n"
        )
        self.streams += 1
        started = time.monotonic()
        done = False
        try:
            if chat:
                _chunk(
                    w,
                    _event(
                        model, {"index": 0, "delta": {"role": "assistant", "content": ""}}, chat
                    ),
                )
            await w.drain()
            await asyncio.sleep(first)
            for i in range(n):
                if i:
                    await asyncio.sleep(interval)
                choice = (
                    {"index": 0, "delta": {"content": "x "}, "finish_reason": None}
                    if chat
                    else {"index": 0, "text": "x ", "finish_reason": None}
                )
                _chunk(w, _event(model, choice, chat))
                await w.drain()
                self.generated += 1
            end = {"index": 0, "delta": {}, "finish_reason": "stop"} if chat else {
                "index": 0, "text": "", "finish_reason": "stop"}  # fmt: skip
            _chunk(w, _event(model, end, chat))
            if usage_wanted:
                usage = {"prompt_tokens": 7, "completion_tokens": n, "total_tokens": 7 + n}
                _chunk(w, b"data: " + json.dumps({"model": model, "choices": [],
                                                  "usage": usage}).encode() + b"\n\n")  # fmt: skip
            _chunk(w, b"data: [DONE]\n\n")
            w.write(b"0\r\n\r\n")
            await w.drain()
            done = True
            self.completed += 1
            return not self.close_after_stream
        except (ConnectionError, asyncio.CancelledError):
            return False
        finally:
            self.streams -= 1
            self.seconds += time.monotonic() - started
            if not done:
                self.cancelled += 1


def _event(model: str, choice: dict[str, Any], chat: bool) -> bytes:
    obj = {
        "id": "x",
        "object": "chat.completion.chunk" if chat else "text_completion",
        "model": model,
        "t": time.monotonic(),
        "choices": [choice],
    }
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _chunk(w: asyncio.StreamWriter, data: bytes) -> None:
    w.write(b"%x\r\n%s\r\n" % (len(data), data))
    if w.transport.is_closing():
        raise ConnectionResetError


def _plain(w: asyncio.StreamWriter, status: int, ctype: str, data: bytes) -> None:
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}.get(status, "X")
    w.write(
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\n"
        f"Content-Length: {len(data)}\r\n".encode()
        + _KEEP.get()
        + b"\r\n"
        + data
    )


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    out = bytearray()
    while True:
        size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
        if size == 0:
            await reader.readline()
            return bytes(out)
        out += await reader.readexactly(size)
        await reader.readline()


async def _main(args: argparse.Namespace) -> None:
    up = Upstream(args.first, args.interval, args.tokens, args.keep_alive, args.close_after_stream)
    port = await up.start(args.host, args.port)
    print(f"READY {port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--first", type=float, default=0.0)
    p.add_argument("--interval", type=float, default=0.01)
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--keep-alive", type=float, default=0.0)
    p.add_argument("--close-after-stream", action="store_true")
    args = p.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(args))
    sys.exit(0)
