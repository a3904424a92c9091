"""Engine mapping tables, by name.

``detect`` picks a table from an exposition's family names; ``metrics_locations``
lists where to look for an engine's exposition when the worker's URL is only the
API address (NIM serves ``/v1/metrics``, trtllm-serve ``/prometheus/metrics``,
Triton a separate port).
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit, urlunsplit

from inferwatch.engines.base import EngineMap, Ratio, Signal
from inferwatch.engines.llamacpp import LLAMACPP
from inferwatch.engines.lmdeploy import LMDEPLOY
from inferwatch.engines.nim import NIM
from inferwatch.engines.sglang import SGLANG
from inferwatch.engines.tgi import TGI
from inferwatch.engines.triton import TRITON
from inferwatch.engines.trtllm import TRTLLM
from inferwatch.engines.vllm import VLLM

ENGINES: dict[str, EngineMap] = {
    m.name: m for m in (VLLM, SGLANG, TGI, LLAMACPP, TRITON, TRTLLM, LMDEPLOY, NIM)
}

__all__ = [
    "ENGINES",
    "EngineMap",
    "Ratio",
    "Signal",
    "detect",
    "metrics_locations",
    "status_hint",
]


def _score(engine: EngineMap, names: set[str]) -> int:
    score = 0
    if engine.prefixes:
        score += sum(1 for name in names if name.startswith(engine.prefixes))
    if engine.markers:
        found = sum(1 for marker in engine.markers if marker in names)
        if found >= engine.min_markers:
            score += found
    return score


def detect(family_names: Iterable[str]) -> EngineMap | None:
    """The engine whose prefixes or marker names match most family names, or None.

    Prefixes identify most engines (``vllm:``, ``sglang:``, ``nv_inference_``);
    NIM has none, so it needs several of its exact names at once, and a lone
    generic name such as ``num_requests_running`` identifies nothing.
    """
    names = set(family_names)
    scores = {e.name: _score(e, names) for e in ENGINES.values()}
    best = max(scores, key=lambda n: (scores[n], n))
    return ENGINES[best] if scores[best] > 0 else None


def status_hint(status: int, engine: EngineMap | None = None) -> str:
    """What an HTTP status of the metrics path means (" (...)"), or "".

    With the engine unknown, the hint of every engine that gives one for the status.
    """
    engines = [engine] if engine is not None else list(ENGINES.values())
    hints = [e.status_hints[status] for e in engines if status in e.status_hints]
    return f" ({'; '.join(hints)})" if hints else ""


def _with_port(url: str, port: int) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = f"{host}:{port}"
    if parts.username:
        cred = parts.username + (f":{parts.password}" if parts.password else "")
        netloc = f"{cred}@{netloc}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def metrics_locations(url: str, engine: EngineMap | None = None) -> list[tuple[str, str]]:
    """(base URL, path) pairs to try for a worker's exposition, best first.

    With a known engine: its own path, then (Triton) the same path on its metrics
    port when the URL names another port. Without one (``engine: auto``): the
    conventional ``/metrics`` first, then every engine's own path and port.
    """
    engines = [engine] if engine is not None else list(ENGINES.values())
    same_port = [] if engine is not None else [(url, "/metrics")]
    other_ports: list[tuple[str, str]] = []
    port = urlsplit(url).port
    for e in engines:
        same_port.append((url, e.metrics_path))
        if e.metrics_port is not None and port != e.metrics_port:
            other_ports.append((_with_port(url, e.metrics_port), e.metrics_path))
    # paths on the worker's own port first: another port is a guess about the deployment
    out: list[tuple[str, str]] = []
    for candidate in same_port + other_ports:
        if candidate not in out:
            out.append(candidate)
    return out
