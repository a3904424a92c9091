"""Pieces shared by the simulator's exposition writers."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Literal

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import Metric

from inferwatch.sim.config import SimConfig
from inferwatch.sim.expo import Exposition
from inferwatch.sim.stats import FinishedRequest, HttpRecord, StepStats

#: the numbers of a finished request that a per-request histogram observes
RequestField = Literal[
    "e2e",
    "queue_time",
    "prefill_time",
    "decode_time",
    "inference_time",
    "prompt_tokens",
    "generation_tokens",
    "cached_tokens",
    "computed_prompt_tokens",
    "preemptions",
]
#: vLLM's HELP texts, which the engines that took its families over kept
TTFT_HELP = "Histogram of time to first token in seconds."
TPOT_HELP = "Histogram of time per output token in seconds."
E2E_HELP = "Histogram of end to end request latency in seconds."
#: a histogram observed once per finished request: (the number it observes, family name,
#: bucket bounds, HELP)
PerRequestRow = tuple[RequestField, str, Sequence[float], str]


def buckets_1_2_5(max_value: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to ``max_value`` (token-count buckets of vLLM and kin)."""
    out: list[int] = []
    scale = 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_value:
                return out
            out.append(m * scale)
        scale *= 10


def process_collectors(registry: CollectorRegistry) -> None:
    """The default registry's collectors (``python_*``, ``process_*``), in the order
    prometheus_client creates them: what a Python server exposes besides its own families."""
    GCCollector(registry=registry)
    PlatformCollector(registry=registry)
    ProcessCollector(registry=registry)


class WithoutCreated:
    """A view of a registry without ``_created`` samples.

    For servers that do not emit them: vLLM's V0 and multiprocess output, and
    engines that turn them off.
    """

    def __init__(self, inner: CollectorRegistry) -> None:
        self._inner = inner

    def collect(self) -> Iterator[Metric]:
        for family in self._inner.collect():
            if family.type in ("counter", "histogram", "summary"):
                copy = Metric(family.name, family.documentation, family.type, family.unit)
                copy.samples = [s for s in family.samples if not s.name.endswith("_created")]
                yield copy
            else:
                yield family


class PerRequest:
    """Histograms that each observe one number of every finished request."""

    def __init__(self, observed: Iterable[tuple[RequestField, Histogram]] = ()) -> None:
        self._observed = list(observed)

    def add(self, field: RequestField, histogram: Histogram) -> Histogram:
        self._observed.append((field, histogram))
        return histogram

    @property
    def histograms(self) -> tuple[Histogram, ...]:
        return tuple(histogram for _, histogram in self._observed)

    def observe(self, labels: Sequence[str], req: FinishedRequest) -> None:
        for field, histogram in self._observed:
            histogram.labels(*labels).observe(getattr(req, field))


def observe_latencies(
    stats: StepStats, labels: Sequence[str], ttft: Histogram, *per_token: Histogram
) -> None:
    """A step's times to first token, and its inter-token latencies into ``per_token``."""
    for value in stats.ttfts:
        ttft.labels(*labels).observe(value)
    for value in stats.itls:
        for histogram in per_token:
            histogram.labels(*labels).observe(value)


class RegistryWriter:
    """The part of a writer that every engine written with prometheus_client shares.

    Its families live in a private registry; those made with :meth:`gauge`,
    :meth:`counter` and :meth:`histogram` are named ``prefix + name`` and carry
    ``labels`` unless told otherwise. Engines that count no admission rejections
    and no HTTP requests keep the no-op handlers.
    """

    metrics_path = "/metrics"
    #: prometheus_client's exposition compresses when the client accepts gzip
    supports_gzip = True
    #: the response's Content-Type (prometheus_client's default for its text)
    content_type = CONTENT_TYPE_LATEST
    prefix = ""
    labels: Sequence[str] = ()

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.registry = CollectorRegistry()

    def gauge(self, name: str, doc: str, labels: Sequence[str] | None = None) -> Gauge:
        return Gauge(self.prefix + name, doc, self._names(labels), registry=self.registry)

    def counter(self, name: str, doc: str, labels: Sequence[str] | None = None) -> Counter:
        return Counter(self.prefix + name, doc, self._names(labels), registry=self.registry)

    def histogram(
        self, name: str, doc: str, buckets: Sequence[float], labels: Sequence[str] | None = None
    ) -> Histogram:
        return Histogram(
            self.prefix + name, doc, self._names(labels), buckets=buckets, registry=self.registry
        )

    def per_request(
        self, rows: Iterable[PerRequestRow], labels: Sequence[str] | None = None
    ) -> PerRequest:
        """The histograms of ``rows``, made in order, each observing its number."""
        return PerRequest(
            (field, self.histogram(name, doc, buckets, labels))
            for field, name, buckets, doc in rows
        )

    def ttft_tpot(
        self, ttft_buckets: Sequence[float], tpot_buckets: Sequence[float]
    ) -> tuple[Histogram, Histogram]:
        """vLLM's time-to-first-token and time-per-output-token histograms, with the
        names and HELP that the engines which took them over kept."""
        return (
            self.histogram("time_to_first_token_seconds", TTFT_HELP, ttft_buckets),
            self.histogram("time_per_output_token_seconds", TPOT_HELP, tpot_buckets),
        )

    def _names(self, labels: Sequence[str] | None) -> Sequence[str]:
        return self.labels if labels is None else labels

    def on_rejection(self, reason: str) -> None:
        """Nothing: the engine has no admission-rejection counter (unless overridden)."""

    def on_http(self, record: HttpRecord) -> None:
        """Nothing: the engine's per-HTTP-request series are not simulated."""

    def text(self, source: CollectorRegistry | WithoutCreated) -> Exposition:
        """``source`` in the text format, whatever the client accepts.

        prometheus_client's OpenMetrics encoder rewrites ":" in sample names but not
        in TYPE lines, which no parser accepts.
        """
        return Exposition(generate_latest(source), self.content_type)
