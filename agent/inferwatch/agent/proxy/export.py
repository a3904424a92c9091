"""The proxy's measurements exported: its own families, and the contract's
histograms and counters for an engine that has none (``ProxySource``)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

from inferwatch.agent.collectors.base import Source
from inferwatch.agent.config import WorkerSpec
from inferwatch.agent.proxy.measure import ModelStats, ProxyStats
from inferwatch.agent.proxy.server import ProxyServer
from inferwatch.engines import contract
from inferwatch.engines.base import E2E, TPOT, TTFT
from inferwatch.engines.mapping import Histogram
from inferwatch.errors import UsageError

#: one logger for the whole proxy package (its lines keep the name they always had)
log = logging.getLogger("inferwatch.agent.proxy")

#: contract histogram -> the proxy's family of the same measurement
PROXY_HISTOGRAMS = {
    TTFT: contract.PROXY_TTFT_SECONDS.name,
    TPOT: contract.PROXY_TPOT_SECONDS.name,
    E2E: contract.PROXY_E2E_LATENCY_SECONDS.name,
}
#: contract counter -> the proxy's
PROXY_COUNTERS = {
    contract.PROMPT_TOKENS.base: contract.PROXY_PROMPT_TOKENS.base,
    contract.GENERATION_TOKENS.base: contract.PROXY_GENERATION_TOKENS.base,
}
#: the proxy's families' HELP texts, by prometheus_client's family name (engines.contract)
HELP = {row.base: row.help for row in contract.FAMILIES if row.name.startswith("inferwatch_proxy_")}


def resolve_models(models: Iterable[str], engine_models: set[str]) -> dict[str, str]:
    """The model label each measured model is exported under: the engine's model when
    it serves exactly one (clients may ask for aliases), else the answer's own."""
    if len(engine_models) == 1:
        only = next(iter(engine_models))
        return dict.fromkeys(models, only)
    return {m: m for m in models}


def merged(stats: ProxyStats, engine_models: set[str]) -> dict[str, ModelStats]:
    """The stats per exported model label (answers under aliases of one model summed)."""
    names = resolve_models(stats.models, engine_models)
    out: dict[str, ModelStats] = {}
    for model, series in stats.models.items():
        label = names[model]
        if label not in out:
            out[label] = series
            continue
        total = out[label] = _copy(out[label])
        for target in PROXY_HISTOGRAMS:
            total.histogram(target).add(series.histogram(target))
        total.prompt_tokens += series.prompt_tokens
        total.generation_tokens += series.generation_tokens
        total.aborts += series.aborts
        for k, v in series.requests.items():
            total.requests[k] = total.requests.get(k, 0) + v
        for k, v in series.finished.items():
            total.finished[k] = total.finished.get(k, 0) + v
    return out


def _copy(series: ModelStats) -> ModelStats:
    out = ModelStats(prompt_tokens=series.prompt_tokens,
                     generation_tokens=series.generation_tokens,
                     requests=dict(series.requests), aborts=series.aborts,
                     finished=dict(series.finished))  # fmt: skip
    for target in PROXY_HISTOGRAMS:
        out.histogram(target).add(series.histogram(target))
    return out


#: (engine name, the engine's model labels, whether the engine has each contract
#: histogram and counter) of a worker, as the engine source knows it
EngineView = Callable[[str], tuple[str, set[str], frozenset[str]]]


class ProxySource(Source):
    """The proxies' own families, and the contract's where the engine has none.

    ``engine_view(worker)`` says what the engine source knows: the engine's name,
    its model labels, and which contract histograms and counters it exports.
    """

    name = "proxy"

    def __init__(
        self, workers: Iterable[WorkerSpec], interval: float, engine_view: EngineView
    ) -> None:
        super().__init__()
        self.interval = interval
        self.engine_view = engine_view
        self.stats: dict[str, ProxyStats] = {}
        self.servers: dict[str, ProxyServer] = {}
        self.specs: dict[str, WorkerSpec] = {}
        for worker in workers:
            if worker.proxy is not None:
                self.stats[worker.name] = ProxyStats()
                self.specs[worker.name] = worker
                self.servers[worker.name] = ProxyServer(
                    worker, worker.proxy, self.stats[worker.name]
                )

    async def start(self) -> None:
        started: list[ProxyServer] = []
        try:
            for server in self.servers.values():
                url = await server.start()
                started.append(server)
                log.info("worker %s: measuring proxy on %s", server.worker.name, url)
        except UsageError:
            for server in started:
                await server.stop()
            raise

    async def stop(self) -> None:
        for server in self.servers.values():
            with contextlib.suppress(Exception):
                await server.stop()

    async def refresh(self) -> None:
        started = time.perf_counter()
        self.health.finished_pass(started)

    def contract_fill(self, worker: str, engine_models: set[str], has: frozenset[str]) -> tuple[
        dict[str, dict[tuple[tuple[str, str], ...], Histogram]],
        dict[str, dict[tuple[tuple[str, str], ...], float]],
    ]:  # fmt: skip
        """The contract histograms and counters the engine lacks, from the proxy's
        measurements (keys: the model label), for the engine source to export."""
        stats = self.stats.get(worker)
        hists: dict[str, dict[tuple[tuple[str, str], ...], Histogram]] = {}
        counters: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
        if stats is None:
            return hists, counters
        for model, series in merged(stats, engine_models).items():
            key = (("model", model),)
            for target in PROXY_HISTOGRAMS:
                if target not in has:
                    hists.setdefault(target, {})[key] = series.histogram(target).snapshot()
            for target in PROXY_COUNTERS:
                if target not in has:
                    counters.setdefault(target, {})[key] = float(series.counter(target))
            if contract.REQUESTS_FINISHED.base not in has:
                for reason, n in series.finished.items():
                    finished = counters.setdefault(contract.REQUESTS_FINISHED.base, {})
                    finished[(("model", model), ("reason", reason))] = float(n)
        return hists, counters

    def families(self) -> Iterable[Metric]:
        fams: dict[str, Metric] = {}

        def fam(cls: type, name: str, labels: list[str]) -> Metric:
            found = fams.get(name)
            if found is None:
                found = fams[name] = cls(name, contract.BY_NAME[name].help, labels=labels)
            return found

        for worker, stats in self.stats.items():
            spec = self.specs[worker]
            engine, models, _ = self.engine_view(worker)
            extra = spec.labels
            wl = ["worker", *(k for k, _ in extra)]
            wv = [worker, *(v for _, v in extra)]
            ml = ["worker", "engine", "model", *(k for k, _ in extra)]
            server = self.servers[worker]
            fam(GaugeMetricFamily, contract.PROXY_CONNECTIONS.name, wl).add_metric(  # type: ignore[attr-defined]
                wv, float(server.connections)
            )
            fam(GaugeMetricFamily, contract.PROXY_REQUESTS_IN_FLIGHT.name, wl).add_metric(  # type: ignore[attr-defined]
                wv, float(stats.in_flight)
            )
            for reason, n in stats.upstream_errors.items():
                fam(CounterMetricFamily, contract.PROXY_UPSTREAM_ERRORS.base, [*wl, "reason"]).add_metric(  # type: ignore[attr-defined]
                    [*wv, reason], float(n)
                )  # fmt: skip
            for reason, n in stats.retries.items():
                fam(CounterMetricFamily, contract.PROXY_UPSTREAM_RETRIES.base, [*wl, "reason"]).add_metric(  # type: ignore[attr-defined]
                    [*wv, reason], float(n)
                )  # fmt: skip
            for reason, n in stats.rejected.items():
                fam(CounterMetricFamily, contract.PROXY_REJECTED.base, [*wl, "reason"]).add_metric(  # type: ignore[attr-defined]
                    [*wv, reason], float(n)
                )  # fmt: skip
            fam(CounterMetricFamily, contract.PROXY_SAMPLES_DROPPED.base, wl).add_metric(  # type: ignore[attr-defined]
                wv, float(stats.dropped)
            )
            for model, series in sorted(merged(stats, models).items()):
                mv = [worker, engine, model, *(v for _, v in extra)]
                for target, name in PROXY_HISTOGRAMS.items():
                    hist = series.histogram(target).snapshot()
                    buckets = [
                        (floatToGoString(b), c)
                        for b, c in zip(hist.bounds, hist.counts, strict=True)
                    ]
                    fam(HistogramMetricFamily, name, ml).add_metric(mv, buckets, hist.sum)  # type: ignore[attr-defined]
                for target, name in PROXY_COUNTERS.items():
                    fam(CounterMetricFamily, name, ml).add_metric(mv, float(series.counter(target)))  # type: ignore[attr-defined]
                for status_class, n in sorted(series.requests.items()):
                    fam(CounterMetricFamily, contract.PROXY_REQUESTS.base, [*ml, "status_class"]).add_metric(  # type: ignore[attr-defined]
                        [*mv, status_class], float(n)
                    )  # fmt: skip
                fam(CounterMetricFamily, contract.PROXY_CLIENT_ABORTS.base, ml).add_metric(  # type: ignore[attr-defined]
                    mv, float(series.aborts)
                )
        return list(fams.values())
