"""trtllm-serve's Prometheus text at ``/prometheus/metrics``, written with prometheus_client.

Labels ``model_name`` and ``engine_type``; the iteration gauges (queue, active
requests, KV utilization, batch limits) and the per-request counters and
histograms of TensorRT-LLM's ``MetricsCollector``, with its default buckets
(vLLM's). Names and units: see ``agent/inferwatch/engines/trtllm.py``
(NVIDIA/TensorRT-LLM ``tensorrt_llm/metrics/collector.py``).

trtllm-serve reports one executor: with ``--data-parallel`` > 1 the simulated
engines add up.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from inferwatch.engines.trtllm import (  # the engine's own bounds, defined once
    LATENCY_BUCKETS,
    PREFILL_BUCKETS,
    TPOT_BUCKETS,
    TTFT_BUCKETS,
)
from inferwatch.sim.config import SimConfig
from inferwatch.sim.expo import Exposition
from inferwatch.sim.stats import EngineSnapshot, HttpRecord, StepStats

FORMATS = ("v1",)

LABELS = ["model_name", "engine_type"]


class TrtllmWriter:
    metrics_path = "/prometheus/metrics"
    supports_gzip = True

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        reg = self.registry = CollectorRegistry()
        self.lv = (cfg.model, "trtllm")
        p = "trtllm_"

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(p + name, doc, LABELS, registry=reg)

        def hist(name: str, doc: str, buckets: Sequence[float]) -> Histogram:
            h = Histogram(p + name, doc, LABELS, buckets=buckets, registry=reg)
            h.labels(*self.lv)
            return h

        self.running = gauge("num_requests_running", "Number of active requests")
        self.waiting = gauge("num_requests_waiting", "Number of queued requests")
        self.kv = gauge("kv_cache_utilization", "KV cache utilization")
        self.max_active = gauge("max_num_active_requests", "Maximum number of active requests")
        self.max_batch = gauge("max_batch_size_static", "Static maximum batch size")
        self.used_blocks = gauge("kv_cache_used_blocks", "Number of used KV cache blocks")
        self.max_blocks = gauge("kv_cache_max_blocks", "Maximum number of KV cache blocks")
        self.success = Counter(p + "request_success_total",
                               "Count of successfully processed requests.",
                               [*LABELS, "finished_reason"], registry=reg)  # fmt: skip
        self.prompt = Counter(p + "prompt_tokens_total",
                              "Cumulative number of prompt (input) tokens processed.", LABELS,
                              registry=reg)  # fmt: skip
        self.generation = Counter(p + "generation_tokens_total",
                                  "Cumulative number of generation (output) tokens produced.",
                                  LABELS, registry=reg)  # fmt: skip
        self.cached = Counter(p + "prompt_cached_tokens_total",
                              "Process-lifetime total prompt tokens served from KV cache.",
                              LABELS, registry=reg)  # fmt: skip
        for c in (self.prompt, self.generation, self.cached):
            c.labels(*self.lv)
        self.ttft = hist(
            "time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
        )
        self.tpot = hist(
            "time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            TPOT_BUCKETS,
        )
        self.e2e = hist(
            "e2e_request_latency_seconds",
            "Histogram of end to end request latency in seconds.",
            LATENCY_BUCKETS,
        )
        self.queue_time = hist("request_queue_time_seconds",
                               "Histogram of time spent in WAITING phase for request.",
                               LATENCY_BUCKETS)  # fmt: skip
        self.prefill_time = hist("request_prefill_time_seconds",
                                 "Histogram of prefill (context) phase duration in seconds "
                                 "(first_token_time - first_scheduled_time).",
                                 PREFILL_BUCKETS)  # fmt: skip
        self.decode_time = hist("request_decode_time_seconds",
                                "Histogram of decode (generation) phase duration in seconds "
                                "(last_token_time - first_token_time).",
                                LATENCY_BUCKETS)  # fmt: skip

    def on_step(self, engine: int, stats: StepStats) -> None:
        lv = self.lv
        # TensorRT-LLM logs per-request metrics once the request has finished
        for req in stats.finished:
            self.success.labels(*lv, req.finish_reason).inc()
            self.e2e.labels(*lv).observe(req.e2e)
            if req.generation_tokens:
                # time to first token = queue + prefill, as the engine measures it
                self.ttft.labels(*lv).observe(req.queue_time + req.prefill_time)
            if req.mean_tpot:
                self.tpot.labels(*lv).observe(req.mean_tpot)
            self.queue_time.labels(*lv).observe(req.queue_time)
            if req.generation_tokens:
                self.prefill_time.labels(*lv).observe(req.prefill_time)
                self.decode_time.labels(*lv).observe(req.decode_time)
            self.prompt.labels(*lv).inc(req.prompt_tokens)
            self.generation.labels(*lv).inc(req.generation_tokens)
            if req.cached_tokens > 0:
                self.cached.labels(*lv).inc(req.cached_tokens)

    def on_rejection(self, reason: str) -> None:
        """trtllm-serve has no admission-rejection counter."""

    def on_http(self, record: HttpRecord) -> None:
        """Not simulated for trtllm-serve."""

    def render(self, states: Sequence[EngineSnapshot], accept: str = "") -> Exposition:
        lv = self.lv
        used = sum(s.blocks_in_use for s in states)
        total = sum(s.num_gpu_blocks for s in states)
        self.running.labels(*lv).set(sum(s.running for s in states))
        self.waiting.labels(*lv).set(sum(s.waiting for s in states))
        self.kv.labels(*lv).set(used / total if total else 0.0)
        self.max_active.labels(*lv).set(sum(s.max_num_seqs for s in states))
        self.max_batch.labels(*lv).set(sum(s.max_num_seqs for s in states))
        self.used_blocks.labels(*lv).set(used)
        self.max_blocks.labels(*lv).set(total)
        # Always the 0.0.4 text format: prometheus_client's OpenMetrics encoder rewrites
        # ":" in sample names but not in TYPE lines, which no parser accepts.
        encoder, content_type = generate_latest, CONTENT_TYPE_LATEST
        return Exposition(encoder(self.registry), content_type)


def create(cfg: SimConfig) -> TrtllmWriter:
    return TrtllmWriter(cfg)
