"""The proxy's HTTP/1.1 wire format: request and answer heads parsed and checked
(smuggling-prone framing refused), headers to pass on, chunked bodies followed as
they pass, error answers, the worker's ``Keep-Alive`` announcement."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

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

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAD_TARGET = re.compile(rb"[\x00-\x20\x7f]")
_HEX = re.compile(rb"[0-9A-Fa-f]{1,15}")
#: methods a worker may get twice: sent again when a reused connection closed before
#: any byte of the answer, even where the worker may have read them
RETRYABLE = frozenset({"GET", "HEAD", "OPTIONS"})
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


def parse_fields(lines: list[bytes]) -> tuple[list[tuple[str, str]], dict[str, list[str]]]:
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


def tokens(values: list[str] | None) -> set[str]:
    if not values:
        return set()
    return {t.strip().lower() for v in values for t in v.split(",")} - {""}


def framing(read: dict[str, list[str]]) -> tuple[int | None, bool]:
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
    headers, read = parse_fields(lines[1:])
    length, chunked = framing(read)
    connection = tokens(read.get("connection"))
    http10 = version == b"HTTP/1.0"
    # an HTTP/1.0 client's connection closes after its answer (no 1.0 keep-alive)
    keep = not http10 and "close" not in connection
    expect = tokens(read.get("expect"))
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
        named = tokens([v for k, v in headers if k.lower() == "connection"])
    if named:
        return [(k, v) for k, v in headers if (low := k.lower()) not in _DROP and low not in named]
    return [(k, v) for k, v in headers if k.lower() not in _DROP]


def head_bytes(first: str, headers: Iterable[tuple[str, str]]) -> bytes:
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


def parse_keep_alive(value: str) -> tuple[float, int] | None:
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
