"""LMDeploy's api_server ``/metrics``, written with prometheus_client.

Every series carries ``model_name`` and ``engine`` (the data-parallel rank);
``_created`` samples are disabled, finish reasons are ``str(ResponseType.X)``.
Names, labels and buckets: see ``agent/inferwatch/engines/lmdeploy.py``
(InternLM/lmdeploy ``lmdeploy/metrics/loggers.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from inferwatch.engines.lmdeploy import (  # the engine's own bounds, defined once
    LATENCY_BUCKETS,
    TPOT_BUCKETS,
    TTFT_BUCKETS,
)
from inferwatch.sim.config import SimConfig
from inferwatch.sim.expo import Exposition
from inferwatch.sim.expo.common import (
    RegistryWriter,
    WithoutCreated,
    buckets_1_2_5,
    observe_latencies,
)
from inferwatch.sim.stats import EngineSnapshot, StepStats

FORMATS = ("pytorch",)

#: lmdeploy.messages.ResponseType members, in their order
RESPONSE_TYPES = (
    "SUCCESS", "FINISH", "ENGINE_STOP_ERROR", "SESSION_REPEAT", "SESSION_NOT_EXIST",
    "HANDLER_NOT_EXIST", "INPUT_LENGTH_ERROR", "INTERNAL_ENGINE_ERROR", "CANCEL",
    "PREFIX_CACHE_CONFLICT", "NO_QUEUE", "NOT_SUPPORTED", "OUT_OF_MEMORY",
)  # fmt: skip
#: the simulator's finish reasons -> the ResponseType LMDeploy reports
REASONS = {
    "stop": "FINISH", "length": "FINISH", "repetition": "FINISH", "abort": "CANCEL",
    "error": "INTERNAL_ENGINE_ERROR",
}  # fmt: skip


class LmdeployWriter(RegistryWriter):
    """No admission rejections: LMDeploy documents no queue-limit refusal."""

    prefix = "lmdeploy:"
    labels = ("model_name", "engine")

    def __init__(self, cfg: SimConfig) -> None:
        super().__init__(cfg)
        gauge, counter, hist = self.gauge, self.counter, self.histogram
        self.waiting = gauge("num_requests_waiting", "Number of requests waiting to be processed.")
        self.running = gauge("num_requests_running",
                             "Number of requests in model execution batches.")  # fmt: skip
        self.kv = gauge("gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.")
        self.prompt = counter("prompt_tokens_total", "Number of prefill tokens processed.")
        self.generation = counter("generation_tokens_total",
                                  "Number of generation tokens processed.")  # fmt: skip
        self.cached = counter("cached_tokens_total", "Total prefix-cached input tokens served.")
        self.success = counter("request_success_total", "Count of successfully processed requests.",
                               [*self.labels, "finished_reason"])  # fmt: skip
        lengths = buckets_1_2_5(cfg.max_model_len)
        self.lengths = self.per_request((
            ("prompt_tokens", "request_prompt_tokens", lengths,
             "Number of prefill tokens processed."),
            ("generation_tokens", "request_generation_tokens", lengths,
             "Number of generation tokens processed."),
            ("cached_tokens", "request_cached_tokens", lengths,
             "Number of prefix-cached input tokens per request."),
        ))  # fmt: skip
        self.ttft, self.tpot = self.ttft_tpot(TTFT_BUCKETS, TPOT_BUCKETS)
        self.itl = hist("iter_token_latency", "Histogram of inter-token latency", TPOT_BUCKETS)
        self.times = self.per_request((
            ("e2e", "e2e_request_latency_seconds", LATENCY_BUCKETS,
             "Histogram of e2e request latency in seconds."),
            ("queue_time", "request_queue_time_seconds", LATENCY_BUCKETS,
             "Histogram of time spent in WAITING phase for request."),
            # lmdeploy/metrics/loggers.py @ 0168eedaef9497414956cb20c2ad0f443de6c248
            ("prefill_time", "request_prefill_time_seconds", LATENCY_BUCKETS,
             "Histogram of time spent in PREFILL phase for request."),
            ("decode_time", "request_decode_time_seconds", LATENCY_BUCKETS,
             "Histogram of time spent in DECODE phase for request."),
        ))  # fmt: skip
        for e in range(cfg.data_parallel):
            lv = self._lv(e)
            for c in (self.prompt, self.generation, self.cached):
                c.labels(*lv)
            for name in RESPONSE_TYPES:
                self.success.labels(*lv, f"ResponseType.{name}")
            for h in (*self.lengths.histograms, self.ttft, self.tpot, self.itl,
                      *self.times.histograms):  # fmt: skip
                h.labels(*lv)
        self._view = WithoutCreated(self.registry)

    def _lv(self, engine: int) -> tuple[str, str]:
        return (self.cfg.model, str(engine))

    def on_step(self, engine: int, stats: StepStats) -> None:
        lv = self._lv(engine)
        if stats.step:
            self.prompt.labels(*lv).inc(stats.prompt_tokens)
            self.generation.labels(*lv).inc(stats.generation_tokens)
        observe_latencies(stats, lv, self.ttft, self.itl, self.tpot)
        for req in stats.finished:
            reason = REASONS.get(req.finish_reason, "FINISH")
            self.success.labels(*lv, f"ResponseType.{reason}").inc()
            self.lengths.observe(lv, req)
            self.times.observe(lv, req)
            self.cached.labels(*lv).inc(req.cached_tokens)

    def render(self, states: Sequence[EngineSnapshot], accept: str = "") -> Exposition:
        for s in states:
            lv = self._lv(s.engine)
            self.waiting.labels(*lv).set(s.waiting)
            self.running.labels(*lv).set(s.running)
            self.kv.labels(*lv).set(s.kv_usage)
        return self.text(self._view)


def create(cfg: SimConfig) -> LmdeployWriter:
    return LmdeployWriter(cfg)
