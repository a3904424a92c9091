"""A small client for the Prometheus HTTP API: ``/api/v1/query`` and ``/api/v1/query_range``.

Only these two endpoints are used, so the report works against anything that
speaks the Prometheus query API (Prometheus, Thanos Query, Mimir, Cortex,
VictoriaMetrics). Errors come out as :class:`PrometheusUnreachable` (nothing
answered), :class:`AccessDenied` (401/403: a configuration problem, exit 2) or
:class:`QueryError` (something answered, but not with data).

Stores that fleets use sit behind authentication and serve several tenants:
:class:`StoreAccess` carries a bearer token or basic-auth credentials (never
shown in a repr or a message) and a tenant header (``X-Scope-OrgID`` for
Mimir and Cortex). Answers 5xx and time-outs are retried with exponential
back-off (``retries`` times, from ``backoff`` seconds, doubling, at most
``MAX_BACKOFF``); 4xx answers are not, they will not change.
"""

from __future__ import annotations

import base64
import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

# Prometheus refuses a range query of more than 11,000 points per series.
MAX_POINTS = 10_000
#: the longest wait between two attempts of one query, seconds
MAX_BACKOFF = 8.0
#: the tenant header of Mimir and Cortex
DEFAULT_TENANT_HEADER = "X-Scope-OrgID"
#: vmauth 1.79 answers an unknown token or user with HTTP 400 and this text, echoing the
#: Authorization header it got (seen with Debian's 1.79.5): a refusal, and a reason to
#: redact every answer's text before it goes into a message
VMAUTH_UNKNOWN = b"cannot find the provided auth token"


class ReportError(Exception):
    """A failure that ends the report with a message and a documented exit code."""

    exit_code = 1


class PrometheusUnreachable(ReportError):
    exit_code = 3


class QueryError(ReportError):
    exit_code = 4


class AccessDenied(ReportError):
    """401 or 403: the credentials or the tenant are wrong, which a retry will not fix."""

    exit_code = 2


@dataclass(frozen=True)
class StoreAccess:
    """How to authenticate to the store and which tenant to ask; secrets stay out of repr."""

    bearer_token: str | None = field(default=None, repr=False)
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tenant: str | None = None
    tenant_header: str = DEFAULT_TENANT_HEADER

    def headers(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if self.bearer_token is not None:
            out["Authorization"] = f"Bearer {self.bearer_token}"
        elif self.username is not None:
            pair = f"{self.username}:{self.password or ''}".encode()
            out["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        if self.tenant is not None:
            out[self.tenant_header] = self.tenant
        return out

    def redact(self, text: str) -> str:
        """``text`` without the token, the password or the Authorization value in any form."""
        secrets = [self.bearer_token, self.password, *self.headers().values()]
        auth = self.headers().get("Authorization")
        if auth is not None:
            secrets.append(auth.split(" ", 1)[1])
        for secret in secrets:
            if secret and secret != self.tenant:
                text = text.replace(secret, "<redacted>")
        return text

    def describe(self) -> str:
        """What was sent, for an error message: never a secret."""
        if self.bearer_token is not None:
            sent = "a bearer token"
        elif self.username is not None:
            sent = f"basic auth as user {self.username!r}"
        else:
            sent = "no credentials"
        if self.tenant is not None:
            sent += f" and {self.tenant_header}: {self.tenant}"
        return sent


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

    def __init__(
        self,
        base_url: str,
        timeout: float = 60.0,
        access: StoreAccess | None = None,
        retries: int = 3,
        backoff: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.access = access or StoreAccess()
        self.retries = retries
        self.backoff = backoff
        self._sleep = sleep
        self.queries = 0
        #: attempts that failed and were tried again (5xx, time-outs, refused connections)
        self.retried = 0

    def _get(self, endpoint: str, params: dict[str, str]) -> object:
        url = f"{self.base_url}/api/v1/{endpoint}?{urllib.parse.urlencode(params)}"
        headers = {"Accept": "application/json", **self.access.headers()}
        self.queries += 1
        attempt = 0
        while True:
            request = urllib.request.Request(url, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    body = response.read()
                break
            except urllib.error.HTTPError as err:
                # Prometheus answers bad queries with 400/422 and a JSON error body;
                # 5xx is the store (or a proxy before it) failing for now.
                body = err.read()
                if err.code in (401, 403) or (err.code == 400 and VMAUTH_UNKNOWN in body):
                    raise AccessDenied(self._denied_text(err.code)) from None
                if err.code < 500 or attempt >= self.retries:
                    raise QueryError(self._error_text(endpoint, params, err.code, body)) from None
            except (TimeoutError, urllib.error.URLError, ConnectionError, OSError) as err:
                if attempt >= self.retries:
                    reason = getattr(err, "reason", err)
                    tries = f" ({attempt + 1} attempts)" if attempt else ""
                    raise PrometheusUnreachable(
                        f"cannot reach Prometheus at {self.base_url}{tries}: {reason}"
                    ) from None
            self._sleep(min(MAX_BACKOFF, self.backoff * 2**attempt))
            attempt += 1
            self.retried += 1
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

    def _denied_text(self, code: int) -> str:
        what = "denied access" if code == 403 else "refused the credentials"
        return (
            f"{self.base_url} {what} (HTTP {code}); sent {self.access.describe()}: "
            "check the token, user and password, and the tenant (docs/report.md)"
        )

    def _error_text(self, endpoint: str, params: dict[str, str], code: int, body: bytes) -> str:
        detail = ""
        try:
            doc = json.loads(body)
            if isinstance(doc, dict):
                detail = f"{doc.get('errorType', 'error')}: {doc.get('error', '')}"
        except ValueError:
            detail = body[:200].decode("utf-8", "replace").strip()
        detail = self.access.redact(detail)
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

    def alerting_rules(self) -> list[str]:
        """The names of the alerting rules the server evaluates (``/api/v1/rules``)."""
        data = self._get("rules", {"type": "alert"})
        groups = data.get("groups", []) if isinstance(data, dict) else []
        return [
            str(rule["name"])
            for group in groups
            if isinstance(group, dict)
            for rule in group.get("rules", [])
            if isinstance(rule, dict) and rule.get("type") == "alerting" and "name" in rule
        ]

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
