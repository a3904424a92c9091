"""A bounded soak of OpenAI chat completions against one address (issue 39 item 2).

``clients`` threads share a budget of ``total`` requests. Even-numbered clients keep
one connection alive (Python's ``http.client``, as the OpenAI client libraries'
pools do); odd-numbered ones open a connection per request (``Connection:
close``). Each client alternates streamed and plain answers. A request counts as
served when its status is 200 and its answer is whole (a stream that ends with
``data: [DONE]``, a JSON answer with ``choices``); anything else is a failure,
named by what the client saw: a status (``502``), ``cut`` (the answer began and
broke off), ``closed`` (the connection closed before any answer), ``refused``,
``timeout``.

Every request's start and end (``time.monotonic()``) are kept, so that a restart
of the engine at a known moment splits the failures into those that were in
flight then and the others. Used by tests/live/test_proxy_soak.py and
bench/bench_proxy_soak.py; nothing here times anything for a pass or a fail.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

PROMPT = "Name three colours of the sea."


@dataclass
class Done:
    """One request as its client saw it."""

    start: float
    end: float
    stream: bool
    keep: bool
    outcome: str  # "ok", or the failure's name


@dataclass
class Result:
    done: list[Done] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> int:
        return sum(1 for d in self.done if d.outcome == "ok")

    @property
    def failed(self) -> list[Done]:
        return [d for d in self.done if d.outcome != "ok"]

    def failures(self) -> Counter[str]:
        return Counter(d.outcome for d in self.failed)

    def by_kind(self) -> dict[str, tuple[int, int]]:
        """(requests, failures) for each of stream/plain x keep-alive/close."""
        out: dict[str, tuple[int, int]] = {}
        for d in self.done:
            key = f"{'stream' if d.stream else 'plain'}/{'keep-alive' if d.keep else 'close'}"
            n, f = out.get(key, (0, 0))
            out[key] = (n + 1, f + (d.outcome != "ok"))
        return out

    def in_flight_at(self, first: float, last: float | None = None) -> list[Done]:
        """The requests under way at some moment from ``first`` to ``last`` (a kill: from
        the signal to the process gone)."""
        last = first if last is None else last
        return [d for d in self.done if d.start <= last and d.end > first]


def body(stream: bool, max_tokens: int) -> bytes:
    return json.dumps(
        {
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": max_tokens,
            "stream": stream,
            "ignore_eos": True,
        }
    ).encode()


def one(conn: http.client.HTTPConnection, stream: bool, keep: bool, max_tokens: int) -> str:
    """One request on ``conn``: "ok" or the failure's name."""
    headers = {"Content-Type": "application/json"}
    if not keep:
        headers["Connection"] = "close"
    try:
        conn.request("POST", "/v1/chat/completions", body(stream, max_tokens), headers)
    except ConnectionRefusedError:
        return "refused"
    except (OSError, http.client.HTTPException):
        return "closed"
    try:
        resp = conn.getresponse()
    except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
        return "closed"
    except TimeoutError:
        return "timeout"
    except (OSError, http.client.HTTPException):
        return "closed"
    try:
        data = resp.read()
    except TimeoutError:
        return "timeout"
    except (OSError, http.client.HTTPException):
        return "cut" if resp.status == 200 else str(resp.status)
    if resp.status != 200:
        return str(resp.status)
    if stream:
        return "ok" if data.rstrip().endswith(b"data: [DONE]") else "cut"
    try:
        return "ok" if json.loads(data).get("choices") else "cut"
    except ValueError:
        return "cut"


def run(
    port: int,
    total: int,
    clients: int = 6,
    max_tokens: int = 4,
    deadline_s: float = 600.0,
    at: dict[int, Callable[[], None]] | None = None,
    timeout: float = 60.0,
    keep_alive: bool | None = None,
) -> Result:
    """``total`` requests from ``clients`` threads to 127.0.0.1:``port``, stopped at
    ``deadline_s`` at the latest. ``at``: {request number: action}, each action run once
    in a thread of its own when that many requests have been started. ``keep_alive``:
    every client keeps its connection (True) or none does (False); None: half do."""
    result = Result()
    lock = threading.Lock()
    started = [0]
    stop_at = time.monotonic() + deadline_s
    actions = dict(at or {})
    side: list[threading.Thread] = []

    def take() -> bool:
        with lock:
            if started[0] >= total or time.monotonic() > stop_at:
                return False
            started[0] += 1
            action = actions.pop(started[0], None)
        if action is not None:
            t = threading.Thread(target=action, daemon=True)
            t.start()
            side.append(t)
        return True

    def client(i: int) -> None:
        keep = i % 2 == 0 if keep_alive is None else keep_alive
        conn: http.client.HTTPConnection | None = None
        n = 0
        while take():
            stream = (n + i) % 2 == 0
            n += 1
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
            t0 = time.monotonic()
            outcome = one(conn, stream, keep, max_tokens)
            t1 = time.monotonic()
            if outcome != "ok" or not keep:
                conn.close()
                conn = None
            with lock:
                result.done.append(Done(t0, t1, stream, keep, outcome))
            if outcome != "ok":
                time.sleep(0.05)  # a failing client does not spin

    t0 = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(1.0, stop_at - time.monotonic() + timeout + 5))
    for t in side:
        t.join(120)
    result.seconds = time.monotonic() - t0
    return result


def port_closed(port: int) -> bool:
    """Nothing listens on 127.0.0.1:``port``."""
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0
