"""Pictures from an agent's ``/metrics``: a few samples read over a span, each worker's
``pack.reading`` reading as advise's picture."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

from inferwatch.advise.model import Unreachable, WorkerPicture, name_pictures
from inferwatch.pack.reading import (
    Scrape,
    maximum,
    mean,
    parse_exposition,
    read_workers,
    workers_of,
)

__all__ = [
    "Scrape",
    "fetch_exposition",
    "maximum",
    "mean",
    "metrics_url",
    "parse_exposition",
    "pictures_from_scrapes",
    "read_agent",
    "sample_agent",
    "sample_times",
    "workers_of",
]


def pictures_from_scrapes(
    scrapes: Sequence[tuple[float, Scrape]],
    instance: str,
    min_rate_span: float,
    cold_within: float | None = None,
) -> list[WorkerPicture]:
    """Each worker's picture from one agent's expositions read at the given unix times:
    its ``pack.reading.read_workers`` reading (rates over ``min_rate_span`` seconds at
    least; TTFT P95 since the start for a worker started within ``cold_within``)."""
    readings = read_workers(scrapes, min_rate_span, cold_within)
    return name_pictures([WorkerPicture.of(r, instance) for r in readings.values()])


def sample_times(samples: int, every: float, min_span: float) -> list[float]:
    """Offsets of the scrapes from the first: ``samples`` of them (at least two), ``every``
    apart, stretched so that the first and the last are ``min_span`` apart at least."""
    n = max(2, samples)
    step = max(every, min_span / (n - 1))
    return [i * step for i in range(n)]


def metrics_url(url: str) -> str:
    """An agent's ``/metrics`` URL from its base URL (or the metrics URL itself)."""
    base = url.rstrip("/")
    return base if base.endswith("/metrics") else base + "/metrics"


def fetch_exposition(target: str, timeout: float) -> Scrape:
    """One scrape of ``target``, parsed; :class:`Unreachable` when it cannot be read or
    is no exposition."""
    try:
        with urllib.request.urlopen(target, timeout=timeout) as resp:
            text = resp.read().decode("utf-8", errors="replace")
    except (urllib.error.URLError, OSError) as exc:
        raise Unreachable(f"cannot read {target}: {getattr(exc, 'reason', exc)}") from None
    try:
        return parse_exposition(text)
    except ValueError as exc:
        raise Unreachable(f"{target} is not a Prometheus exposition: {exc}") from None


def sample_agent(
    url: str,
    offsets: Sequence[float],
    timeout: float = 10.0,
    check: Callable[[Scrape], object] | None = None,
) -> list[tuple[float, Scrape]]:
    """An agent's ``/metrics`` (its base URL or that URL) parsed at each of ``offsets``
    seconds after the first scrape's own time stamp (so the span is never short);
    ``check`` reads the first scrape before the others are waited for (it raises to
    refuse at once)."""
    target = metrics_url(url)
    scrapes: list[tuple[float, Scrape]] = []
    for offset in offsets:
        if scrapes and (delay := scrapes[0][0] + offset - time.time()) > 0:
            time.sleep(delay)
        scrapes.append((time.time(), fetch_exposition(target, timeout)))
        if check is not None and len(scrapes) == 1:
            check(scrapes[0][1])
    return scrapes


def read_agent(
    url: str,
    samples: int,
    every: float,
    min_span: float,
    timeout: float = 10.0,
    cold_within: float | None = None,
    check: Callable[[Scrape], object] | None = None,
) -> list[WorkerPicture]:
    """Scrape an agent over at least ``min_span`` seconds (see :func:`sample_times` and
    :func:`sample_agent`); ``cold_within``: see :func:`pictures_from_scrapes`."""
    scrapes = sample_agent(url, sample_times(samples, every, min_span), timeout, check)
    base = url.rstrip("/")
    return pictures_from_scrapes(scrapes, urlsplit(base).netloc or base, min_span, cold_within)
