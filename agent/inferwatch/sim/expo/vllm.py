"""vLLM's ``/metrics``, written with prometheus_client in a private registry.

Formats (``--format``):

``v1``
    vLLM 0.33: ``model_name`` and ``engine`` labels, ``_created`` samples,
    prometheus_client's ``python_*``/``process_*`` collectors, FastAPI
    instrumentator ``http_*`` series.
``v0``
    The names of servers from before the renames (``gpu_cache_usage_perc``,
    ``gpu_prefix_cache_*``, ``time_per_output_token_seconds``, the V0 gauges and
    throughput averages), the ``model_name`` label only, no ``_created``.
``multiprocess``
    v1 names as an API server in Prometheus multiprocess mode writes them: no
    ``_created``, no ``python_*``/``process_*``, and ``vllm:kv_cache_usage_perc``
    once per process with a ``pid`` label (the value on the engine's pid, 0.0
    on two idle API-server pids), as before vLLM PR #28792.

Names, types, labels and bucket boundaries follow vLLM's source (see
``../shared/reference/vllm-metrics.md``); the HELP sentences are our own.
With ``--disable-log-stats`` no ``vllm:`` family is registered at all.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from inferwatch.engines.vllm import (  # the engine's own bounds, defined once
    HTTP_HIGHR_BUCKETS,
    HTTP_LOWR_BUCKETS,
    ITERATION_TOKEN_BUCKETS,
    ITL_BUCKETS,
    N_BUCKETS,
    PREEMPTION_BUCKETS,
    REQUEST_LATENCY_BUCKETS,
    TTFT_BUCKETS,
)
from inferwatch.sim.config import SimConfig
from inferwatch.sim.expo import Exposition
from inferwatch.sim.expo.common import (
    PerRequest,
    RequestField,
    WithoutCreated,
    buckets_1_2_5,
    process_collectors,
)
from inferwatch.sim.stats import FINISH_REASONS, EngineSnapshot, HttpRecord, StepStats

FORMATS = ("v1", "v0", "multiprocess")

#: handlers vLLM leaves out of the http_* series
HTTP_EXCLUDED = frozenset({"/metrics", "/health", "/load", "/ping", "/version", "/server_info"})
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
WAITING_REASONS = ("capacity", "deferred")
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
#: V0 logged its throughput averages over this interval
V0_THROUGHPUT_INTERVAL = 5.0
#: the per-request phase histograms (end-to-end buckets): (what each observes, name, HELP)
LATENCY_HISTOGRAMS: tuple[tuple[RequestField, str, str], ...] = (
    ("e2e", "vllm:e2e_request_latency_seconds", "End-to-end latency."),
    ("queue_time", "vllm:request_queue_time_seconds", "Time waiting before first scheduled."),
    ("inference_time", "vllm:request_inference_time_seconds",
     "Time from first scheduled to last token."),
    ("prefill_time", "vllm:request_prefill_time_seconds",
     "Time from first scheduled to first token."),
    ("decode_time", "vllm:request_decode_time_seconds", "Time from first to last token."),
)  # fmt: skip


def cache_config_labels(cfg: SimConfig) -> dict[str, str]:
    """CacheConfig fields as vLLM's ``metrics_info()`` renders them (``str()`` of each)."""
    return {
        "block_size": str(cfg.block_size),
        "gpu_memory_utilization": str(cfg.gpu_memory_utilization),
        "cache_dtype": cfg.cache_dtype,
        "is_attention_free": "False",
        "num_gpu_blocks_override": str(cfg.num_gpu_blocks),
        "sliding_window": "None",
        "enable_prefix_caching": str(cfg.enable_prefix_caching),
        "prefix_caching_hash_algo": "sha256",
        "calculate_kv_scales": "False",
        "kv_sharing_fast_prefill": "False",
        "mamba_cache_dtype": "auto",
        "mamba_ssm_cache_dtype": "auto",
        "mamba_block_size": "None",
        "num_gpu_blocks": str(cfg.blocks),
        "num_cpu_blocks": "None",
        "kv_cache_memory_bytes": "None",
        "kv_offloading_size": "None",
        "kv_offloading_backend": "native",
    }


class _PerPidGauge:
    """A gauge without a multiprocess mode: one series per process that wrote it."""

    def __init__(self, name: str, documentation: str, model: str, pids: Sequence[int]) -> None:
        self.name = name
        self.documentation = documentation
        self.model = model
        self.pids = [str(p) for p in pids]
        self.values: dict[int, float] = {}

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            self.name, self.documentation, labels=["model_name", "engine", "pid"]
        )
        for engine, value in sorted(self.values.items()):
            family.add_metric([self.model, str(engine), self.pids[0]], value)
            for idle_pid in self.pids[1:]:
                family.add_metric([self.model, str(engine), idle_pid], 0.0)
        yield family


class VllmWriter:
    metrics_path = "/metrics"
    #: prometheus_client's exposition compresses when the client accepts gzip
    supports_gzip = True

    def __init__(self, cfg: SimConfig, pid: int | None = None) -> None:
        self.cfg = cfg
        self.format = cfg.format
        self.pid = pid if pid is not None else os.getpid()
        self.registry = CollectorRegistry()
        self._v0 = cfg.format == "v0"
        self._multiprocess = cfg.format == "multiprocess"
        if not self._multiprocess:
            process_collectors(self.registry)
        self.engines = list(range(cfg.data_parallel))
        self.kv_usage: Gauge | None = None
        self.kv_usage_per_pid: _PerPidGauge | None = None
        #: the histograms observed once per finished request
        self.finished = PerRequest()
        self.stats_enabled = not cfg.disable_log_stats
        if self.stats_enabled:
            if self._v0:
                self._build_v0()
            else:
                self._build_v1()
        self._build_http()
        self._source: CollectorRegistry | WithoutCreated = (
            self.registry if cfg.format == "v1" else WithoutCreated(self.registry)
        )

    # -- families ------------------------------------------------------------------
    def _labels(self) -> list[str]:
        return ["model_name"] if self._v0 else ["model_name", "engine"]

    def _lv(self, engine: int) -> tuple[str, ...]:
        return (self.cfg.model,) if self._v0 else (self.cfg.model, str(engine))

    def _gauge(self, name: str, doc: str, extra: Sequence[str] = ()) -> Gauge:
        return Gauge(
            name,
            doc,
            [*self._labels(), *extra],
            registry=self.registry,
            multiprocess_mode="mostrecent",
        )

    def _each(self, values: Sequence[str]) -> Iterator[tuple[str, ...]]:
        """Every engine's label values with each of ``values`` of one more label."""
        for e in self.engines:
            for value in values:
                yield (*self._lv(e), value)

    def _counter(self, name: str, doc: str, by: tuple[str, Sequence[str]] | None = None) -> Counter:
        """A counter whose zero series exist from the start: one per engine, or ``by`` a
        further label one per engine and each of that label's values."""
        extra = [by[0]] if by else []
        counter = Counter(name, doc, [*self._labels(), *extra], registry=self.registry)
        for lv in self._each(by[1]) if by else map(self._lv, self.engines):
            counter.labels(*lv)
        return counter

    def _histogram(
        self,
        name: str,
        doc: str,
        buckets: Sequence[float],
        observes: RequestField | None = None,
    ) -> Histogram:
        """A histogram with a series per engine; with ``observes``, one that observes
        that number of every finished request."""
        hist = Histogram(name, doc, self._labels(), buckets=buckets, registry=self.registry)
        for e in self.engines:
            hist.labels(*self._lv(e))
        if observes is not None:
            self.finished.add(observes, hist)
        return hist

    def _build_v1(self) -> None:
        cfg = self.cfg
        self.running = self._gauge("vllm:num_requests_running", "Requests in the running batch.")
        self.waiting = self._gauge(
            "vllm:num_requests_waiting", "Requests waiting to be scheduled, deferred ones included."
        )
        self.waiting_by_reason = self._gauge(
            "vllm:num_requests_waiting_by_reason", "Waiting requests by why they wait.", ["reason"]
        )
        self.sleep_state = self._gauge(
            "vllm:engine_sleep_state",
            "Engine sleep state (1 for the current one).",
            ["sleep_state"],
        )
        for lv in self._each(SLEEP_STATES):
            self.sleep_state.labels(*lv).set(1 if lv[-1] == "awake" else 0)
        kv_doc = "Share of KV-cache blocks in use (0..1)."
        if self._multiprocess:
            # No multiprocess_mode on this gauge: each process writes its own copy.
            pids = [self.pid, self.pid + 1, self.pid + 2]
            self.kv_usage_per_pid = _PerPidGauge(
                "vllm:kv_cache_usage_perc", kv_doc, cfg.model, pids
            )
            self.registry.register(self.kv_usage_per_pid)
        else:
            self.kv_usage = Gauge(
                "vllm:kv_cache_usage_perc", kv_doc, self._labels(), registry=self.registry
            )
        self.prefix_queries = self._counter(
            "vllm:prefix_cache_queries", "Prefix cache lookups, in prompt tokens."
        )
        self.prefix_hits = self._counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in prompt tokens."
        )
        self._counter(
            "vllm:external_prefix_cache_queries", "KV-connector cache lookups, in tokens."
        )
        self._counter("vllm:external_prefix_cache_hits", "KV-connector cache hits, in tokens.")
        self.preemptions = self._counter("vllm:num_preemptions", "Preemptions by the scheduler.")
        self.prompt_tokens = self._counter("vllm:prompt_tokens", "Prompt tokens processed.")
        self.prompt_by_source = self._counter(
            "vllm:prompt_tokens_by_source",
            "Prompt tokens by where their KV came from.",
            by=("source", PROMPT_SOURCES),
        )
        self.prompt_cached = self._counter(
            "vllm:prompt_tokens_cached", "Prompt tokens served from a cache."
        )
        self.generation_tokens = self._counter("vllm:generation_tokens", "Generated tokens.")
        self.success = self._counter(
            "vllm:request_success",
            "Finished requests by finish reason.",
            by=("finished_reason", FINISH_REASONS),
        )
        self._token_histograms()
        self._histogram(
            "vllm:request_prefill_kv_computed_tokens",
            "Prompt tokens whose KV was computed (not cached), per request.",
            buckets_1_2_5(cfg.max_model_len),
            observes="computed_prompt_tokens",
        )
        self._histogram(
            "vllm:request_num_preemptions",
            "Preemptions per finished request.",
            PREEMPTION_BUCKETS,
            observes="preemptions",
        )
        self.ttft = self._histogram(
            "vllm:time_to_first_token_seconds", "Time to first token.", TTFT_BUCKETS
        )
        self.itl = self._histogram(
            "vllm:inter_token_latency_seconds", "Time between two output tokens.", ITL_BUCKETS
        )
        self.tpot = self._histogram(
            "vllm:request_time_per_output_token_seconds",
            "Mean time per output token of each finished request.",
            ITL_BUCKETS,
        )
        self._latency_histograms()
        self.rejections = Counter(
            "vllm:admission_rejections",
            "Requests refused at admission (HTTP 503).",
            ["model_name", "reason"],
            registry=self.registry,
        )
        if cfg.max_queued_requests is not None:
            self.rejections.labels(cfg.model, "max_num_queued_reqs")
        self._cache_config_info()

    def _build_v0(self) -> None:
        self.running = self._gauge("vllm:num_requests_running", "Requests in the running batch.")
        self.swapped = self._gauge("vllm:num_requests_swapped", "Requests swapped to CPU.")
        self.waiting = self._gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled.")
        self.kv_usage = self._gauge(
            "vllm:gpu_cache_usage_perc", "Share of GPU KV-cache blocks in use (0..1)."
        )
        self.cpu_cache = self._gauge(
            "vllm:cpu_cache_usage_perc", "Share of CPU KV-cache blocks in use (0..1)."
        )
        self.hit_rate = self._gauge(
            "vllm:gpu_prefix_cache_hit_rate", "GPU prefix cache hit rate (0..1)."
        )
        self.prefix_queries = self._counter(
            "vllm:gpu_prefix_cache_queries", "GPU prefix cache lookups, in tokens."
        )
        self.prefix_hits = self._counter("vllm:gpu_prefix_cache_hits", "GPU prefix cache hits.")
        self.avg_prompt = self._gauge(
            "vllm:avg_prompt_throughput_toks_per_s", "Prompt tokens per second, last interval."
        )
        self.avg_generation = self._gauge(
            "vllm:avg_generation_throughput_toks_per_s",
            "Generated tokens per second, last interval.",
        )
        self.preemptions = self._counter("vllm:num_preemptions", "Preemptions by the scheduler.")
        self.prompt_tokens = self._counter("vllm:prompt_tokens", "Prompt tokens processed.")
        self.generation_tokens = self._counter("vllm:generation_tokens", "Generated tokens.")
        # V0 created these children on the first finished request of each reason.
        self.success = Counter(
            "vllm:request_success",
            "Finished requests by finish reason.",
            ["model_name", "finished_reason"],
            registry=self.registry,
        )
        self._token_histograms()
        self.ttft = self._histogram(
            "vllm:time_to_first_token_seconds", "Time to first token.", TTFT_BUCKETS
        )
        self.itl = self._histogram(
            "vllm:time_per_output_token_seconds", "Time per output token.", ITL_BUCKETS
        )
        self._latency_histograms()
        self._cache_config_info()
        self._v0_mark = (time.monotonic(), 0.0, 0.0)
        self._v0_totals = [0.0, 0.0]
        self._v0_hits = [0, 0]

    def _token_histograms(self) -> None:
        max_len = self.cfg.max_model_len
        self._histogram(
            "vllm:request_prompt_tokens",
            "Prompt length of each finished request.",
            buckets_1_2_5(max_len),
            observes="prompt_tokens",
        )
        self._histogram(
            "vllm:request_generation_tokens",
            "Generated tokens of each finished request.",
            buckets_1_2_5(max_len),
            observes="generation_tokens",
        )
        self.iteration_tokens = self._histogram(
            "vllm:iteration_tokens_total",
            "Tokens per engine step.",
            (1, *ITERATION_TOKEN_BUCKETS),
        )
        self.max_gen = self._histogram(
            "vllm:request_max_num_generation_tokens",
            "Most tokens a request may generate.",
            buckets_1_2_5(max_len),
        )
        self.params_n = self._histogram(
            "vllm:request_params_n", "The n request parameter.", N_BUCKETS
        )
        self.params_max_tokens = self._histogram(
            "vllm:request_params_max_tokens",
            "The max_tokens request parameter.",
            buckets_1_2_5(max_len),
        )

    def _latency_histograms(self) -> None:
        for field, name, doc in LATENCY_HISTOGRAMS:
            self._histogram(name, doc, REQUEST_LATENCY_BUCKETS, observes=field)

    def _cache_config_info(self) -> None:
        labels = cache_config_labels(self.cfg)
        names = list(labels) if self._v0 else [*labels, "engine"]
        info = Gauge(
            "vllm:cache_config_info",
            "KV-cache configuration, one label per CacheConfig field.",
            names,
            registry=self.registry,
            multiprocess_mode="mostrecent",
        )
        if self._v0:
            info.labels(**labels).set(1)
        else:
            for e in self.engines:
                info.labels(**labels, engine=str(e)).set(1)

    def _build_http(self) -> None:
        reg = self.registry
        self.http_total = Counter(
            "http_requests_total",
            "HTTP requests by method, status class and handler.",
            ["method", "status", "handler"],
            registry=reg,
        )
        self.http_in = Summary(
            "http_request_size_bytes",
            "Request Content-Length by handler.",
            ["handler"],
            registry=reg,
        )
        self.http_out = Summary(
            "http_response_size_bytes",
            "Response Content-Length by handler.",
            ["handler"],
            registry=reg,
        )
        self.http_highr = Histogram(
            "http_request_duration_highr_seconds",
            "HTTP latency, many buckets, no labels.",
            buckets=HTTP_HIGHR_BUCKETS,
            registry=reg,
        )
        self.http_lowr = Histogram(
            "http_request_duration_seconds",
            "HTTP latency by handler, few buckets.",
            ["method", "handler"],
            buckets=HTTP_LOWR_BUCKETS,
            registry=reg,
        )

    # -- records in ---------------------------------------------------------------
    def on_step(self, engine: int, stats: StepStats) -> None:
        if not self.stats_enabled:
            return
        lv = self._lv(engine)
        if stats.step:
            self.prefix_queries.labels(*lv).inc(stats.prefix_queries)
            self.prefix_hits.labels(*lv).inc(stats.prefix_hits)
            self.preemptions.labels(*lv).inc(stats.preemptions)
            self.prompt_tokens.labels(*lv).inc(stats.prompt_tokens)
            self.generation_tokens.labels(*lv).inc(stats.generation_tokens)
            if stats.iteration_tokens:
                self.iteration_tokens.labels(*lv).observe(stats.iteration_tokens)
            if self._v0:
                self._v0_totals[0] += stats.prompt_tokens
                self._v0_totals[1] += stats.generation_tokens
                self._v0_hits[0] += stats.prefix_queries
                self._v0_hits[1] += stats.prefix_hits
            else:
                computed = stats.prompt_tokens - stats.cached_prompt_tokens
                self.prompt_by_source.labels(*lv, "local_compute").inc(computed)
                self.prompt_by_source.labels(*lv, "local_cache_hit").inc(stats.cached_prompt_tokens)
                self.prompt_cached.labels(*lv).inc(stats.cached_prompt_tokens)
        for started in stats.started:
            self.max_gen.labels(*lv).observe(started.max_tokens * started.n)
            self.params_n.labels(*lv).observe(started.n)
        for value in stats.ttfts:
            self.ttft.labels(*lv).observe(value)
        itl = self.itl.labels(*lv)
        for value in stats.itls:
            itl.observe(value)
        for req in stats.finished:
            if self._v0:
                self.success.labels(self.cfg.model, req.finish_reason).inc()
            else:
                self.success.labels(*lv, req.finish_reason).inc()
                if req.generation_tokens > 1:
                    self.tpot.labels(*lv).observe(req.mean_tpot)
            self.finished.observe(lv, req)
            if req.max_tokens_param:
                self.params_max_tokens.labels(*lv).observe(req.max_tokens_param)

    def on_rejection(self, reason: str) -> None:
        if self.stats_enabled and not self._v0:
            self.rejections.labels(self.cfg.model, reason).inc()

    def on_http(self, record: HttpRecord) -> None:
        if record.handler in HTTP_EXCLUDED:
            return
        status = f"{record.status // 100}xx"
        self.http_total.labels(record.method, status, record.handler).inc()
        self.http_in.labels(record.handler).observe(record.request_bytes)
        self.http_out.labels(record.handler).observe(record.response_bytes)
        self.http_highr.observe(record.seconds)
        self.http_lowr.labels(record.method, record.handler).observe(record.seconds)

    # -- exposition out -------------------------------------------------------------
    def render(self, states: Sequence[EngineSnapshot], accept: str = "") -> Exposition:
        """The text format 0.0.4, whatever ``accept`` asks for.

        vLLM's prometheus_client app would negotiate OpenMetrics, but
        prometheus_client 0.26 then rewrites the colons of sample names and
        not of their TYPE lines, which no parser accepts; the reference's
        0.0.4 text is what scrapers of vLLM read in practice.
        """
        if self.stats_enabled:
            self._set_gauges(states)
        return Exposition(generate_latest(self._source), CONTENT_TYPE_PLAIN_0_0_4)

    def _set_gauges(self, states: Sequence[EngineSnapshot]) -> None:
        for s in states:
            lv = self._lv(s.engine)
            self.running.labels(*lv).set(s.running)
            self.waiting.labels(*lv).set(s.waiting)
            if self.kv_usage is not None:
                self.kv_usage.labels(*lv).set(s.kv_usage)
            if self.kv_usage_per_pid is not None:
                self.kv_usage_per_pid.values[s.engine] = s.kv_usage
            if self._v0:
                self.swapped.labels(*lv).set(0)
                self.cpu_cache.labels(*lv).set(0)
            else:
                for reason in WAITING_REASONS:
                    self.waiting_by_reason.labels(*lv, reason).set(
                        s.waiting_by_reason.get(reason, 0)
                    )
        if self._v0:
            self._update_v0_averages()

    def _update_v0_averages(self) -> None:
        now = time.monotonic()
        mark_t, mark_prompt, mark_gen = self._v0_mark
        lv = self._lv(0)
        queries, hits = self._v0_hits
        self.hit_rate.labels(*lv).set(hits / queries if queries else 0.0)
        elapsed = now - mark_t
        if elapsed >= V0_THROUGHPUT_INTERVAL:
            prompt, gen = self._v0_totals
            self.avg_prompt.labels(*lv).set((prompt - mark_prompt) / elapsed)
            self.avg_generation.labels(*lv).set((gen - mark_gen) / elapsed)
            self._v0_mark = (now, prompt, gen)


def create(cfg: SimConfig) -> VllmWriter:
    return VllmWriter(cfg)
