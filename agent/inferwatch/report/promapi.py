"""A small client for the Prometheus HTTP API: ``/api/v1/query`` and ``/api/v1/query_range``.

Only these two endpoints are used, so the report works against anything that
speaks the Prometheus query API (Prometheus, Thanos Query, Mimir, Cortex,
VictoriaMetrics). Errors come out as :class:`PrometheusUnreachable` (nothing
answered) or :class:`QueryError` (something answered, but not with data).
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

# Prometheus refuses a range query of more than 11,000 points per series.
MAX_POINTS = 10_000


class ReportError(Exception):
    """A failure that ends the report with a message and a documented exit code."""

    exit_code = 1


class PrometheusUnreachable(ReportError):
    exit_code = 3


class QueryError(ReportError):
    exit_code = 4


@dataclass(frozen=True)
class Sample:
    """One series of an instant query."""

    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Series:
    """One series of a range query: ``points`` is ``(timestamp, value)``, NaNs dropped."""

    labels: dict[str, str]
    points: tuple[tuple[float, float], ...]


def range_chunks(start: float, end: float, step: float) -> Iterator[tuple[float, float]]:
    """Split ``[start, end]`` into pieces of at most MAX_POINTS steps, sharing no point."""
    span = step * (MAX_POINTS - 1)
    t = start
    while t <= end:
        stop = min(end, t + span)
        yield t, stop
        t = stop + step


class PrometheusClient:
    """Queries one Prometheus-compatible base URL (``http://host:9090``, or a path prefix)."""

    def __init__(self, base_url: str, timeout: float = 60.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.queries = 0

    def _get(self, endpoint: str, params: dict[str, str]) -> object:
        url = f"{self.base_url}/api/v1/{endpoint}?{urllib.parse.urlencode(params)}"
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        self.queries += 1
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body = response.read()
        except urllib.error.HTTPError as err:
            # Prometheus answers bad queries with 400/422/503 and a JSON error body.
            body = err.read()
            raise QueryError(self._error_text(endpoint, params, err.code, body)) from None
        except (TimeoutError, urllib.error.URLError, ConnectionError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise PrometheusUnreachable(
                f"cannot reach Prometheus at {self.base_url}: {reason}"
            ) from None
        try:
            doc = json.loads(body)
        except ValueError:
            raise QueryError(
                f"{self.base_url}/api/v1/{endpoint} did not answer with JSON "
                "(is this the base URL of a Prometheus-compatible API?)"
            ) from None
        if not isinstance(doc, dict) or doc.get("status") != "success":
            raise QueryError(self._error_text(endpoint, params, 200, body))
        return doc.get("data")

    def _error_text(self, endpoint: str, params: dict[str, str], code: int, body: bytes) -> str:
        detail = ""
        try:
            doc = json.loads(body)
            if isinstance(doc, dict):
                detail = f"{doc.get('errorType', 'error')}: {doc.get('error', '')}"
        except ValueError:
            detail = body[:200].decode("utf-8", "replace").strip()
        query = params.get("query", "")
        return f"query failed ({endpoint}, HTTP {code}): {detail}\n  query: {query}"

    def instant(self, query: str, time: float) -> list[Sample]:
        data = self._get("query", {"query": query, "time": _ts(time)})
        if not isinstance(data, dict) or data.get("resultType") not in ("vector", "scalar"):
            raise QueryError(f"unexpected answer to an instant query: {query}")
        if data["resultType"] == "scalar":
            return [Sample({}, float(data["result"][1]))]
        out = []
        for item in data.get("result", []):
            value = float(item["value"][1])
            if not math.isnan(value):
                out.append(Sample(dict(item.get("metric", {})), value))
        return out

    def range(self, query: str, start: float, end: float, step: float) -> list[Series]:
        """A range query, split into chunks when it has too many points."""
        merged: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
        for chunk_start, chunk_end in range_chunks(start, end, step):
            data = self._get(
                "query_range",
                {
                    "query": query,
                    "start": _ts(chunk_start),
                    "end": _ts(chunk_end),
                    "step": _ts(step),
                },
            )
            if not isinstance(data, dict) or data.get("resultType") != "matrix":
                raise QueryError(f"unexpected answer to a range query: {query}")
            for item in data.get("result", []):
                key = tuple(sorted(item.get("metric", {}).items()))
                points = merged.setdefault(key, [])
                for t, v in item.get("values", []):
                    value = float(v)
                    if not math.isnan(value):
                        points.append((float(t), value))
        return [Series(dict(key), tuple(points)) for key, points in merged.items()]


def _ts(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".")
