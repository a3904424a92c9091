"""Scrapes each worker's /metrics and exports the contract's worker families.

Per worker and per pass: fetch (:mod:`inferwatch.agent.httpio`: time-out, size cap, no redirects),
parse only the families the engine's table needs, map them, feed the windows
(quantiles from histogram increases, queue slope, hit ratios), and keep the
result as that worker's snapshot. A failed scrape drops the worker's engine
series at once (no stale values) and says why in ``inferwatch_target_up`` and
``inferwatch_target_scrape_errors_total{reason}``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

from inferwatch.agent.collectors import selfdesc
from inferwatch.agent.collectors.base import ReasonError, Source
from inferwatch.agent.config import SAMPLES_PER_SERIES, AgentConfig, WorkerSpec
from inferwatch.agent.fdbudget import descriptor_limit, outbound_budget
from inferwatch.agent.httpio import Client, HttpError, TooLarge, basic_auth
from inferwatch.agent.redact import redact_url
from inferwatch.engines import ENGINES, EngineMap, contract, detect, metrics_locations, status_hint
from inferwatch.engines.base import E2E, TPOT, TTFT
from inferwatch.engines.mapping import (
    LORA_ACTIVE,
    LORA_MAX,
    Histogram,
    LabelKey,
    Mapped,
    ParseError,
    cap_series,
    family_names,
    map_families,
    parse,
    prefilter_limited,
    sample_names,
)
from inferwatch.stats import CumulativeWindow, GaugeWindow, window_quantiles

log = logging.getLogger(__name__)

#: work done before handing the event loop back to the agent's scrapes (seconds)
_SLICE = 0.002
SCRAPE_ERROR_REASONS = (
    "connect",
    "timeout",
    "http_status",
    "too_large",
    "parse",
    "no_engine_metrics",
)
QUANTILES = (0.5, 0.95, 0.99)
#: histogram family -> its window-quantile gauge
QUANTILE_GAUGES = {
    TTFT: contract.TTFT_QUANTILE_SECONDS.name,
    TPOT: contract.TPOT_QUANTILE_SECONDS.name,
    E2E: contract.E2E_LATENCY_QUANTILE_SECONDS.name,
}


class ScrapeError(ReasonError):
    """A worker's /metrics could not be read or parsed."""


@dataclass
class WorkerState:
    """What the agent knows about one worker between passes."""

    spec: WorkerSpec
    engine: EngineMap | None = None
    metrics_path: str = "/metrics"
    #: where the exposition is read from: the worker URL, or another port (Triton)
    base_url: str = ""
    #: (base URL, path) pairs to try until one carries engine data; see ``_scrape_body``
    locations: list[tuple[str, str]] = field(default_factory=list)
    #: True once the exposition was found (or its path was configured)
    located: bool = False
    up: bool = False
    duration: float | None = None
    errors: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SCRAPE_ERROR_REASONS, 0))
    mapped: Mapped | None = None
    hist_windows: dict[tuple[str, LabelKey], CumulativeWindow] = field(default_factory=dict)
    ratio_windows: dict[tuple[str, LabelKey], CumulativeWindow] = field(default_factory=dict)
    queue_windows: dict[LabelKey, GaugeWindow] = field(default_factory=dict)
    quantiles: dict[tuple[str, LabelKey], dict[float, float]] = field(default_factory=dict)
    ratios: dict[tuple[str, LabelKey], float] = field(default_factory=dict)
    slopes: dict[LabelKey, float] = field(default_factory=dict)
    #: what the engine says of itself (selfdesc); None until it could be asked
    described: selfdesc.SelfDescription | None = None
    #: series cut by the per-worker cap, summed over scrapes; whether the last was cut
    series_dropped: int = 0
    capped: bool = False
    #: contract targets filled from the measuring proxy (the engine has none of its own)
    proxy_filled: frozenset[str] = frozenset()

    def forget(self) -> None:
        """Drop engine data and history: a worker that is gone leaves nothing stale."""
        self.mapped = None
        self.hist_windows.clear()
        self.ratio_windows.clear()
        self.queue_windows.clear()
        self.quantiles.clear()
        self.ratios.clear()
        self.slopes.clear()
        self.described = None  # a worker that comes back may be another build


def _labels(
    worker: str, engine: str, key: LabelKey, extra: LabelKey = ()
) -> tuple[list[str], list[str]]:
    names = ["worker", "engine"]
    values = [worker, engine]
    for k, v in (*key, *extra):
        names.append(k)
        values.append(v)
    return names, values


def endpoint(state: WorkerState) -> str:
    """The ``instance`` Prometheus gives the engine when it scrapes it itself.

    Configured (``workers[].endpoint``), else the host:port the agent reads the
    exposition from, written the way Prometheus writes a target address (an IPv6
    host in brackets, the scheme's port when the URL has none).
    """
    if state.spec.endpoint is not None:
        return state.spec.endpoint
    parts = urlsplit(state.base_url or state.spec.url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


def _auth(spec: WorkerSpec) -> dict[str, str] | None:
    if spec.username is None or spec.password is None:
        return None
    return {"Authorization": basic_auth(spec.username, spec.password)}


class _Families:
    """Metric families assembled across workers, created on first use."""

    def __init__(self) -> None:
        self.by_name: dict[str, Metric] = {}

    def _get(self, cls: type, name: str, labels: list[str]) -> Metric:
        fam = self.by_name.get(name)
        if fam is None:
            fam = cls(name, contract.BY_NAME[name].help, labels=labels)
            self.by_name[name] = fam
        return fam

    def gauge(self, name: str, labels: list[str], values: list[str], value: float) -> None:
        self._get(GaugeMetricFamily, name, labels).add_metric(values, value)  # type: ignore[attr-defined]

    def counter(self, name: str, labels: list[str], values: list[str], value: float) -> None:
        self._get(CounterMetricFamily, name, labels).add_metric(values, value)  # type: ignore[attr-defined]

    def histogram(self, name: str, labels: list[str], values: list[str], hist: object) -> None:
        fam = self._get(HistogramMetricFamily, name, labels)
        buckets = [
            (floatToGoString(b), c)
            for b, c in zip(hist.bounds, hist.counts, strict=True)  # type: ignore[attr-defined]
        ]
        fam.add_metric(values, buckets, hist.sum)  # type: ignore[attr-defined]


#: (worker, the engine's model labels, the contract targets the engine has) -> the
#: proxy's histograms and counters by target and label key
ProxyFill = Callable[
    [str, set[str], frozenset[str]],
    tuple[Mapping[str, Mapping[LabelKey, Histogram]], Mapping[str, Mapping[LabelKey, float]]],
]


class EngineSource(Source):
    """All configured workers' engine metrics."""

    name = "engine"

    def __init__(
        self,
        config: AgentConfig,
        *,
        launch_max_num_seqs: Callable[[str], int | None] = lambda worker: None,
    ) -> None:
        super().__init__()
        self.config = config
        self.interval = config.collect_interval
        self.window = config.stats_window
        self.workers = {w.name: self._new_state(w) for w in config.workers}
        self._launch_max_num_seqs = launch_max_num_seqs
        self._session: Client | None = None
        self.passes = 0
        # One worker's exposition is parsed at a time, each in its own turn of the event
        # loop, so that a scrape of the agent waits for one worker's parse, not for all.
        self._parsing = asyncio.Lock()
        self._families_cache: tuple[tuple[object, ...], list[Metric]] | None = None
        # Decoding, parsing and mapping a body run on this thread, off the event loop,
        # so that /healthz and /metrics answer while a large exposition is read.
        self._parser = concurrent.futures.ThreadPoolExecutor(1, "inferwatch-parse")
        self._parser_closed = False
        #: scrapes still running from an earlier pass (a hanging worker): not restarted
        self._inflight: dict[str, asyncio.Task[None]] = {}
        #: the measuring proxy's histograms and counters for the contract targets an
        #: engine lacks (``ProxySource.contract_fill``); None without proxies
        self.proxy_fill: ProxyFill | None = None

    @staticmethod
    def _new_state(spec: WorkerSpec) -> WorkerState:
        state = WorkerState(spec)
        if spec.engine != "auto":
            state.engine = ENGINES.get(spec.engine)
        if spec.metrics_path:
            state.locations = [(spec.url, spec.metrics_path)]
            state.located = True
        else:
            state.locations = metrics_locations(spec.url, state.engine)
        state.base_url, state.metrics_path = state.locations[0]
        return state

    def reconfigure(self, config: AgentConfig) -> None:
        """Take a reloaded configuration (SIGHUP): a worker whose settings did not
        change keeps its state (windows, counters, series); the others start afresh."""
        workers: dict[str, WorkerState] = {}
        for spec in config.workers:
            old = self.workers.get(spec.name)
            workers[spec.name] = (
                old if old is not None and old.spec == spec else self._new_state(spec)
            )
        for name, task in list(self._inflight.items()):
            if workers.get(name) is not self.workers.get(name):
                task.cancel()
                del self._inflight[name]
        self.config = config
        self.interval = config.collect_interval
        self.window = config.stats_window
        self.workers = workers
        self._families_cache = None

    def set_workers(self, specs: Iterable[WorkerSpec]) -> None:
        """Replace the worker list (Kubernetes discovery): a worker that is gone takes
        its series with it at the next rebuild; one whose URL, engine, path or labels
        changed starts afresh; one that only changed otherwise (its pid) keeps its state."""
        current: dict[str, WorkerState] = {}
        for spec in specs:
            state = self.workers.get(spec.name)
            same = state is not None and (
                state.spec.url,
                state.spec.engine,
                state.spec.metrics_path,
                state.spec.labels,
            ) == (spec.url, spec.engine, spec.metrics_path, spec.labels)
            if state is not None and same:
                state.spec = spec
            else:
                state = self._new_state(spec)
            current[spec.name] = state
        if list(current) != list(self.workers) or any(
            current[n] is not self.workers.get(n) for n in current
        ):
            self._families_cache = None
        self.workers = current

    async def start(self) -> None:
        if self._parser_closed:
            self._parser = concurrent.futures.ThreadPoolExecutor(1, "inferwatch-parse")
            self._parser_closed = False
        self._session = Client(
            headers={"Accept": "text/plain;version=0.0.4;q=1.0, */*;q=0.1"},
            # Scrapes in flight are bounded by the descriptors the agent has, so that
            # many workers never take the ones /metrics and /healthz are served on.
            limit=outbound_budget(descriptor_limit()),
            idle_per_host=2,
        )

    async def stop(self) -> None:
        for task in self._inflight.values():
            task.cancel()
        self._inflight.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None
        self._parser.shutdown(wait=False, cancel_futures=True)
        self._parser_closed = True

    async def refresh(self) -> None:
        started = time.perf_counter()
        if self._session is None:
            await self.start()
        fresh: list[asyncio.Task[None]] = []
        carried: list[asyncio.Task[None]] = []
        for name, state in self.workers.items():
            task = self._inflight.get(name)
            if task is None or task.done():
                task = self._inflight[name] = asyncio.create_task(self._scrape(state))
                fresh.append(task)
            else:
                carried.append(task)
        await self._await_pass(fresh or carried)
        # The new pass's families are built here, a few workers at a time, so that the
        # agent's rebuild finds them ready; until then families() serves the last pass.
        self._families_cache = (
            self._families_key(self.passes + 1),
            await self._build_families_in_slices(),
        )
        self.passes += 1
        self.health.finished_pass(started)

    async def _await_pass(self, tasks: list[asyncio.Task[None]]) -> None:
        """Wait for this pass's scrapes, each worker on its own clock (issue 32).

        The pass publishes as soon as every scrape started in it has finished. A
        worker still in flight from an earlier pass (a hang, a time-out longer than
        the interval) is not waited for: its scrape goes on in the background and
        lands in the pass after it ends, with its data or its scrape error. Once
        some scrape has finished, the pass waits at most one interval for the rest,
        so one slow worker never stretches the others' interval to its time-out;
        while none has finished, there is nothing new to publish and it waits up to
        the longest time-out.
        """
        started = time.monotonic()
        short = started + self.interval
        long = started + self._pass_deadline()
        pending = set(tasks)
        finished = False
        while pending:
            remaining = (short if finished else long) - time.monotonic()
            if remaining <= 0:
                break
            done, pending = await asyncio.wait(
                pending, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
            )
            finished = finished or bool(done)

    def _pass_deadline(self) -> float:
        longest = max(
            (w.spec.timeout or self.config.scrape.timeout for w in self.workers.values()),
            default=0.0,
        )
        return max(self.interval, longest) + 0.25

    # ------------------------------------------------------------------ scraping
    async def _fetch(self, state: WorkerState, base_url: str, path: str) -> bytes:
        assert self._session is not None
        spec = state.spec
        timeout = spec.timeout or self.config.scrape.timeout
        limit = self.config.scrape.max_body_bytes
        url = base_url + path
        shown = redact_url(url)
        try:
            resp = await self._session.get(
                url, timeout=timeout, max_body=limit, headers=_auth(spec)
            )
        except TooLarge:
            raise ScrapeError("too_large", f"{shown} body over {limit} bytes, cut") from None
        except asyncio.TimeoutError:
            raise ScrapeError("timeout", f"{shown} did not answer within {timeout:g}s") from None
        except HttpError as exc:
            # the client's messages never quote the URL; this keeps it so
            detail = str(exc).replace(url, shown).replace(base_url, redact_url(base_url))
            raise ScrapeError("connect", f"{shown}: {type(exc).__name__}: {detail}") from None
        if resp.status != 200:
            hint = status_hint(resp.status, state.engine)
            raise ScrapeError("http_status", f"{shown} answered HTTP {resp.status}{hint}")
        return resp.body

    def _map(self, state: WorkerState, text: str) -> tuple[Mapped, int]:
        """The mapped scrape and how many series the cap dropped (runs on the parse thread)."""
        engine = state.engine
        if engine is None:
            names = family_names(text) or sample_names(text)
            engine = detect(names)
            if engine is None:
                shown = ", ".join(n[:64] for n in sorted(names)[:8]) or "no metric families"
                raise ScrapeError("no_engine_metrics", f"no known engine's metrics (saw: {shown})")
        max_series = self.config.scrape.max_series
        try:
            kept, cut = prefilter_limited(
                text, engine.source_families(), max_series * SAMPLES_PER_SERIES
            )
            families = parse(kept)
        except ParseError as exc:
            raise ScrapeError("parse", f"unparsable exposition: {exc}") from None
        mapped, dropped = cap_series(map_families(families, engine), max_series)
        if not mapped.has_data:
            raise ScrapeError(
                "no_engine_metrics",
                f"up, but no {engine.name} engine data (statistics logging disabled?)",
            )
        if state.engine is None:
            log.info("worker %s: detected engine %s", state.spec.name, engine.name)
            state.engine = engine
        return mapped, dropped + cut

    async def _map_in_turn(self, state: WorkerState, body: bytes) -> Mapped:
        async with self._parsing:
            loop = asyncio.get_running_loop()
            mapped, dropped = await loop.run_in_executor(
                self._parser, lambda: self._map(state, body.decode("utf-8", errors="replace"))
            )
        self._count_dropped(state, dropped)
        return mapped

    def _count_dropped(self, state: WorkerState, dropped: int) -> None:
        """Count series over the cap; say so once when it starts and once when it ends."""
        state.series_dropped += dropped
        if dropped and not state.capped:
            log.warning(
                "worker %s: over scrape.max_series (%d): %d series dropped, "
                f"counted in {contract.TARGET_SERIES_DROPPED}",
                state.spec.name, self.config.scrape.max_series, dropped,
            )  # fmt: skip
        elif not dropped and state.capped:
            log.info("worker %s: back under scrape.max_series", state.spec.name)
        state.capped = bool(dropped)

    async def _scrape_body(self, state: WorkerState) -> Mapped:
        """Fetch and map the exposition; until it is found, try the engines' other paths.

        ``engine: auto`` starts at ``/metrics``. When that answers an HTTP error or
        carries no known engine's metrics, the other engines' locations are tried in
        turn (NIM ``/v1/metrics``, trtllm-serve ``/prometheus/metrics``, Triton's
        port 8002); the first with engine data is kept for good. When none has any,
        the error says what each location gave.
        """
        try:
            body = await self._fetch(state, state.base_url, state.metrics_path)
            mapped = await self._map_in_turn(state, body)
        except ScrapeError as first:
            if (
                state.located
                or len(state.locations) < 2
                or first.reason not in ("http_status", "no_engine_metrics")
            ):
                raise
            tried = [f"{redact_url(state.base_url)}{state.metrics_path}: {first}"]
            for base_url, path in state.locations:
                if (base_url, path) == (state.base_url, state.metrics_path):
                    continue
                try:
                    body = await self._fetch(state, base_url, path)
                    mapped = await self._map_in_turn(state, body)
                except ScrapeError as exc:
                    tried.append(f"{redact_url(base_url)}{path}: {exc}")
                    continue
                log.info(
                    "worker %s: %s metrics found at %s%s",
                    state.spec.name, mapped.engine, redact_url(base_url), path,
                )  # fmt: skip
                state.base_url, state.metrics_path = base_url, path
                state.located = True
                return mapped
            raise ScrapeError(first.reason, "; ".join(tried)) from None
        state.located = True
        return mapped

    async def _scrape(self, state: WorkerState) -> None:
        name = state.spec.name
        started = time.perf_counter()
        try:
            mapped = await self._scrape_body(state)
        except ScrapeError as exc:
            self._failed(state, started, exc.reason, exc.reason, str(exc))
            self._maybe_redetect(state, exc.reason)
            return
        except Exception as exc:  # a bug must not stop the other workers
            log.debug("worker %s scrape failed", name, exc_info=True)
            self._failed(state, started, "parse", "internal", f"{type(exc).__name__}: {exc}")
            return
        state.duration = time.perf_counter() - started
        state.up = True
        self.health.ok(key=name)
        if state.mapped is not None and state.mapped.engine != mapped.engine:
            state.forget()  # another engine on the port: its counters start elsewhere
            state.described = None
        if state.mapped is not None and selfdesc.restarted(state.mapped, mapped):
            state.described = None  # restarted between two scrapes: maybe with other flags
        if state.described is None:
            timeout = state.spec.timeout or self.config.scrape.timeout
            assert self._session is not None
            state.described = await selfdesc.fetch(
                self._session, state.spec.url, mapped.engine, timeout
            )
        if state.described is not None:
            mapped = selfdesc.with_model(mapped, state.described.model)
        if self.proxy_fill is not None and state.spec.proxy is not None:
            mapped = self._with_proxy(state, mapped)
        # Monotonic time: a step of the wall clock (NTP) must not freeze the windows.
        self._update_windows(state, mapped, time.monotonic())
        state.mapped = mapped

    def _with_proxy(self, state: WorkerState, mapped: Mapped) -> Mapped:
        """The proxy's measurements under the contract's names the engine has none for
        (llama.cpp: TTFT, TPOT, end to end; TGI: TTFT): one definition per worker, the
        engine's where it has one (docs/proxy.md)."""
        assert self.proxy_fill is not None
        table = ENGINES.get(mapped.engine)
        has = frozenset(s.target for s in table.signals) if table else frozenset()
        hists, counters = self.proxy_fill(state.spec.name, mapped.models() - {""}, has)
        state.proxy_filled = frozenset(hists) | frozenset(counters)
        if not state.proxy_filled:
            return mapped
        return replace(
            mapped,
            histograms={**mapped.histograms, **hists},
            counters={**mapped.counters, **counters},
        )

    def proxy_view(self, worker: str) -> tuple[str, set[str], frozenset[str]]:
        """The engine's name, its model labels and the contract targets it has (for the
        proxy's own families, labelled like the engine's)."""
        state = self.workers.get(worker)
        if state is None:
            return "", set(), frozenset()
        engine = state.engine.name if state.engine else ""
        if state.mapped is None:
            return engine, set(), frozenset()
        return state.mapped.engine, state.mapped.models() - {""}, state.proxy_filled

    def _maybe_redetect(self, state: WorkerState, reason: str) -> None:
        """With ``engine: auto``, a port that stops carrying its engine's data is looked
        at afresh next pass: another engine may serve it now (vLLM replaced by SGLang)."""
        if state.spec.engine != "auto" or state.engine is None:
            return
        if reason not in ("no_engine_metrics", "http_status"):
            return
        log.info("worker %s: no %s data any more, detecting the engine again",
                 state.spec.name, state.engine.name)  # fmt: skip
        state.engine = None
        if not state.spec.metrics_path:
            state.locations = metrics_locations(state.spec.url, None)
            state.located = False
            state.base_url, state.metrics_path = state.locations[0]

    def _failed(
        self, state: WorkerState, started: float, reason: str, health_reason: str, message: str
    ) -> None:
        """Count a failed scrape and drop the worker's engine data (nothing stale stays)."""
        state.duration = time.perf_counter() - started
        state.errors[reason] += 1
        state.up = False
        state.forget()
        self.health.error(health_reason, message, key=state.spec.name)

    # ------------------------------------------------------------------ windows
    def _update_windows(self, state: WorkerState, mapped: Mapped, now: float) -> None:
        seen: set[tuple[str, LabelKey]] = set()
        quantiles: dict[tuple[str, LabelKey], dict[float, float]] = {}
        for target, series in mapped.histograms.items():
            if target not in QUANTILE_GAUGES:
                continue
            for key, hist in series.items():
                slot = (target, key)
                seen.add(slot)
                win = state.hist_windows.get(slot)
                if win is None:
                    win = state.hist_windows[slot] = CumulativeWindow(self.window)
                win.add(now, hist.counts)
                inc = win.increase()
                if inc is not None:
                    qs = window_quantiles(hist.bounds, inc, QUANTILES)
                    if qs:
                        quantiles[slot] = qs
        for slot in set(state.hist_windows) - seen:
            del state.hist_windows[slot]
        state.quantiles = quantiles

        ratios: dict[tuple[str, LabelKey], float] = {}
        engine = state.engine
        for ratio in engine.ratios if engine else ():
            num = mapped.counters.get(ratio.numerator, {})
            den = mapped.counters.get(ratio.denominator, {})
            # A declared counter without series yet has counted nothing (SGLang creates
            # the cached-token series on the first hit): zero, not unknown.
            zero = ratio.zero_numerator and ratio.numerator in mapped.declared
            for key in den.keys() if zero else num.keys() & den.keys():
                slot = (ratio.target, key)
                win = state.ratio_windows.get(slot)
                if win is None:
                    win = state.ratio_windows[slot] = CumulativeWindow(self.window)
                win.add(now, (num.get(key, 0.0), den[key]))
                inc = win.increase()
                if inc is not None and inc[1] > 0:
                    value = inc[0] / inc[1]
                    ratios[slot] = value if ratio.cap is None else min(ratio.cap, value)
        state.ratios = ratios

        slopes: dict[LabelKey, float] = {}
        queue = mapped.gauges.get(contract.QUEUE_DEPTH.name, {})
        for key in set(state.queue_windows) - queue.keys():
            del state.queue_windows[key]
        for key, depth in queue.items():
            gw = state.queue_windows.get(key)
            if gw is None:
                gw = state.queue_windows[key] = GaugeWindow(self.window)
            gw.add(now, depth)
            slope = gw.slope()
            if slope is not None:
                slopes[key] = slope
        state.slopes = slopes

    # ------------------------------------------------------------------ export
    def engine_facts(self, worker: str) -> Mapping[str, str]:
        """Engine, model and version learned from the worker's metrics (for process info)."""
        state = self.workers.get(worker)
        if state is None or state.mapped is None:
            return {}
        facts = {"engine": state.mapped.engine}
        models = sorted(state.mapped.models())
        if models:
            facts["model"] = models[0]
        described = state.described or selfdesc.SelfDescription()
        if described.version:
            facts["version"] = described.version
        if described.max_num_seqs is not None:
            facts["max_num_seqs"] = str(described.max_num_seqs)
        for key, value in state.mapped.facts.items():
            facts.setdefault(key, value)
        return facts

    def max_num_seqs(self, state: WorkerState) -> int | None:
        if state.spec.max_num_seqs is not None:
            return state.spec.max_num_seqs
        launched = self._launch_max_num_seqs(state.spec.name)
        if launched is not None:
            return launched
        if state.mapped is not None:
            engine_value = state.mapped.gauges.get(contract.MAX_NUM_SEQS.name)
            if engine_value:
                return int(max(engine_value.values()))
        if state.described is not None:
            return state.described.max_num_seqs
        return None

    def families(self) -> Iterable[Metric]:
        # The same list until the next pass (or a new capacity from the process source):
        # the agent then keeps its rendered text instead of rendering it again.
        key = self._families_key(self.passes)
        cached = self._families_cache
        if cached is not None and cached[0] == key:
            return cached[1]
        families = self._build_families()
        self._families_cache = (key, families)
        return families

    def _families_key(self, passes: int) -> tuple[int | None, ...]:
        """What the families depend on besides the scrapes: the pass and each capacity."""
        return (passes, *(self.max_num_seqs(state) for state in self.workers.values()))

    def _build_families(self) -> list[Metric]:
        out = _Families()
        for name, state in self.workers.items():
            self._add_worker(out, name, state)
        return list(out.by_name.values())

    async def _build_families_in_slices(self) -> list[Metric]:
        """_build_families(), handing the event loop back between workers now and then."""
        out = _Families()
        mark = time.perf_counter()
        for name, state in list(self.workers.items()):
            self._add_worker(out, name, state)
            if time.perf_counter() - mark > _SLICE:
                await asyncio.sleep(0)
                mark = time.perf_counter()
        return list(out.by_name.values())

    def _add_worker(self, out: _Families, name: str, state: WorkerState) -> None:
        extra = state.spec.labels
        wl = ["worker", *(k for k, _ in extra)]
        wv = [name, *(v for _, v in extra)]
        out.gauge(contract.TARGET_UP.name, wl, wv, 1.0 if state.up else 0.0)
        out.gauge(
            contract.WORKER_ENDPOINT_INFO.name, [*wl, "endpoint"], [*wv, endpoint(state)], 1.0
        )
        if state.duration is not None:
            out.gauge(contract.TARGET_SCRAPE_DURATION_SECONDS.name, wl, wv, state.duration)
        for reason, count in state.errors.items():
            out.counter(contract.TARGET_SCRAPE_ERRORS.base, [*wl, "reason"], [*wv, reason], count)
        out.counter(contract.TARGET_SERIES_DROPPED.base, wl, wv, state.series_dropped)
        mapped = state.mapped
        if mapped is None:
            return
        engine = mapped.engine
        exported = {s.target for s in state.engine.signals if s.export} if state.engine else set()
        if state.engine is not None and state.engine.lora is not None:
            exported |= {LORA_ACTIVE, LORA_MAX}
        exported |= state.proxy_filled
        for target, series in sorted(mapped.gauges.items()):
            if target not in exported or target == contract.MAX_NUM_SEQS.name:
                continue
            for key, value in sorted(series.items()):
                out.gauge(target, *_labels(name, engine, key, extra), value)
        for target, series in sorted(mapped.counters.items()):
            if target not in exported:
                continue
            for key, value in sorted(series.items()):
                out.counter(target, *_labels(name, engine, key, extra), value)
        # export_histograms: false keeps the buckets out of the agent's exposition when
        # Prometheus stores the engine's own (issue 23 item 2); the windows above still
        # read them, so the quantile gauges stay.
        for target, hseries in sorted(mapped.histograms.items()):
            if not state.spec.export_histograms and target not in state.proxy_filled:
                continue
            for key, hist in sorted(hseries.items()):
                out.histogram(target, *_labels(name, engine, key, extra), hist)
        for (target, key), qs in sorted(state.quantiles.items()):
            labels, values = _labels(name, engine, key, extra)
            for q, v in sorted(qs.items()):
                out.gauge(QUANTILE_GAUGES[target], [*labels, "quantile"], [*values, f"{q:g}"], v)
        for (target, key), ratio in sorted(state.ratios.items()):
            out.gauge(target, *_labels(name, engine, key, extra), ratio)
        for key, slope in sorted(state.slopes.items()):
            out.gauge(contract.QUEUE_DEPTH_SLOPE.name, *_labels(name, engine, key, extra), slope)
        capacity = self.max_num_seqs(state)
        if capacity is not None:
            for model in sorted(mapped.models()) or [""]:
                out.gauge(
                    contract.MAX_NUM_SEQS.name,
                    ["worker", "engine", "model", *(k for k, _ in extra)],
                    [name, engine, model, *(v for _, v in extra)],
                    float(capacity),
                )
