"""The engines, by name: every module ``engines/<name>.py`` that defines ``ENGINE``.

An engine's module is its one home: the mapping table and every other fact
about it (:class:`~inferwatch.engines.base.EngineMap`). The registry imports
each module of this package except the helpers in :data:`HELPERS` and lists
their ``ENGINE`` in the engines' ``position`` order; the configuration's
choices, launch-flag parsing, pod recognition, self-descriptions, the warm-up's
bounds, the SLO checks, the rules' own-histogram branches and the simulator's
writers are all derived from :data:`ENGINES`.

``detect`` picks a table from an exposition's family names; ``metrics_locations``
lists where to look for an engine's exposition when the worker's URL is only the
API address (NIM serves ``/v1/metrics``, trtllm-serve ``/prometheus/metrics``,
Triton a separate port).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from urllib.parse import urlsplit, urlunsplit

from inferwatch.engines.base import EngineMap, Ratio, Signal

#: the modules of this package that are no engine (everything else must define ENGINE)
HELPERS = frozenset({"base", "contract", "launchflags", "mapping", "proxy", "stream"})


def _discover() -> dict[str, EngineMap]:
    found: list[EngineMap] = []
    for info in pkgutil.iter_modules(__path__):
        if info.name in HELPERS or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        engine = getattr(module, "ENGINE", None)
        if not isinstance(engine, EngineMap) or engine.name != info.name:
            raise ImportError(
                f"{module.__name__}: expected ENGINE = EngineMap(name={info.name!r}, ...) "
                "(or the module's name in engines.HELPERS)"
            )
        found.append(engine)
    return {e.name: e for e in sorted(found, key=lambda e: (e.position, e.name))}


#: every engine, in ``position`` order
ENGINES: dict[str, EngineMap] = _discover()

__all__ = [
    "ENGINES",
    "HELPERS",
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
