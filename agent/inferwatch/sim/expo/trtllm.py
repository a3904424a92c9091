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

from inferwatch.engines.trtllm import (  # the engine's own bounds, defined once
    LATENCY_BUCKETS,
    PREFILL_BUCKETS,
    TPOT_BUCKETS,
    TTFT_BUCKETS,
)
from inferwatch.sim.config import SimConfig
from inferwatch.sim.expo import Exposition
from inferwatch.sim.expo.common import E2E_HELP, RegistryWriter
from inferwatch.sim.stats import EngineSnapshot, StepStats

FORMATS = ("v1",)


class TrtllmWriter(RegistryWriter):
    """No admission rejections: trtllm-serve has no counter for them."""

    metrics_path = "/prometheus/metrics"
    prefix = "trtllm_"
    labels = ("model_name", "engine_type")

    def __init__(self, cfg: SimConfig) -> None:
        super().__init__(cfg)
        self.lv = (cfg.model, "trtllm")
        gauge, counter = self.gauge, self.counter
        self.running = gauge("num_requests_running", "Number of active requests")
        self.waiting = gauge("num_requests_waiting", "Number of queued requests")
        self.kv = gauge("kv_cache_utilization", "KV cache utilization")
        self.max_active = gauge("max_num_active_requests", "Maximum number of active requests")
        self.max_batch = gauge("max_batch_size_static", "Static maximum batch size")
        self.used_blocks = gauge("kv_cache_used_blocks", "Number of used KV cache blocks")
        self.max_blocks = gauge("kv_cache_max_blocks", "Maximum number of KV cache blocks")
        self.success = counter("request_success_total", "Count of successfully processed requests.",
                               [*self.labels, "finished_reason"])  # fmt: skip
        self.prompt = counter("prompt_tokens_total",
                              "Cumulative number of prompt (input) tokens processed.")  # fmt: skip
        self.generation = counter("generation_tokens_total",
                                  "Cumulative number of generation (output) tokens "
                                  "produced.")  # fmt: skip
        self.cached = counter("prompt_cached_tokens_total",
                              "Process-lifetime total prompt tokens served from KV "
                              "cache.")  # fmt: skip
        for c in (self.prompt, self.generation, self.cached):
            c.labels(*self.lv)
        self.ttft, self.tpot = self.ttft_tpot(TTFT_BUCKETS, TPOT_BUCKETS)
        # TensorRT-LLM logs per-request metrics once the request has finished
        self.finished = self.per_request((
            ("e2e", "e2e_request_latency_seconds", LATENCY_BUCKETS, E2E_HELP),
            ("queue_time", "request_queue_time_seconds", LATENCY_BUCKETS,
             "Histogram of time spent in WAITING phase for request."),
        ))  # fmt: skip
        # prefill and decode of the requests that generated a token
        self.generated = self.per_request((
            ("prefill_time", "request_prefill_time_seconds", PREFILL_BUCKETS,
             "Histogram of prefill (context) phase duration in seconds "
             "(first_token_time - first_scheduled_time)."),
            ("decode_time", "request_decode_time_seconds", LATENCY_BUCKETS,
             "Histogram of decode (generation) phase duration in seconds "
             "(last_token_time - first_token_time)."),
        ))  # fmt: skip
        for h in (self.ttft, self.tpot, *self.finished.histograms, *self.generated.histograms):
            h.labels(*self.lv)

    def on_step(self, engine: int, stats: StepStats) -> None:
        lv = self.lv
        for req in stats.finished:
            self.success.labels(*lv, req.finish_reason).inc()
            self.finished.observe(lv, req)
            if req.generation_tokens:
                # time to first token = queue + prefill, as the engine measures it
                self.ttft.labels(*lv).observe(req.queue_time + req.prefill_time)
                self.generated.observe(lv, req)
            if req.mean_tpot:
                self.tpot.labels(*lv).observe(req.mean_tpot)
            self.prompt.labels(*lv).inc(req.prompt_tokens)
            self.generation.labels(*lv).inc(req.generation_tokens)
            if req.cached_tokens > 0:
                self.cached.labels(*lv).inc(req.cached_tokens)

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
        return self.text(self.registry)


def create(cfg: SimConfig) -> TrtllmWriter:
    return TrtllmWriter(cfg)
